package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Versions of the real node's parts besides the kubelet, which is the
// control plane's version.
const (
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.2"
	CNIPluginsVersion = "v1.9.1"
)

// Binary names inside the node's cache directory.
const (
	Kubelet    = "kubelet"
	Containerd = "containerd"
	shim       = "containerd-shim-runc-v2"
	Ctr        = "ctr"
	Runc       = "runc"
	cniDir     = "cni"
)

// cniPlugins are the CNI plugins a pod network namespace is set up with
// (see cniConfig).
var cniPlugins = []string{"plugins/main/bridge", "plugins/main/loopback", "plugins/ipam/host-local"}

// seccompHeader is what runc's seccomp support compiles against: the
// Debian package libseccomp-dev.
const seccompHeader = "/usr/include/seccomp.h"

// NodeBinDir is where the real node's binaries are cached, beside the
// control plane's and keyed the same way.
func NodeBinDir() (string, error) {
	return cacheDir(fmt.Sprintf("node_k8s-%s_containerd-%s_runc-%s_cni-%s", KubernetesVersion, ContainerdVersion, RuncVersion, CNIPluginsVersion))
}

// EnsureNodeBinaries returns the cache directory holding the kubelet,
// containerd, its shim, ctr, runc and the CNI plugins, building what is
// missing.
func EnsureNodeBinaries(ctx context.Context, log io.Writer) (string, error) {
	dir, err := NodeBinDir()
	if err != nil {
		return "", err
	}
	files := []string{Kubelet, Containerd, shim, Ctr, Runc}
	for _, p := range cniPlugins {
		files = append(files, filepath.Join(cniDir, filepath.Base(p)))
	}
	what := fmt.Sprintf("the real node (kubelet %s, containerd %s, runc %s, CNI plugins %s)", KubernetesVersion, ContainerdVersion, RuncVersion, CNIPluginsVersion)
	return dir, ensureCached(ctx, dir, files, what, log, buildNode)
}

func buildNode(ctx context.Context, out string, log io.Writer) error {
	// Without seccomp support runc cannot start any pod: the kubelet gives
	// every sandbox the RuntimeDefault profile.
	if _, err := os.Stat(seccompHeader); err != nil {
		return fmt.Errorf("building runc needs %s from the Debian package libseccomp-dev: run 'make node-deps' (as root) or 'apt-get install libseccomp-dev'", seccompHeader)
	}
	if err := goCommand(ctx, ToolsDir(), log, nil, "build", "-ldflags", kubernetesLDFlags(), "-o", filepath.Join(out, Kubelet), "k8s.io/kubernetes/cmd/kubelet"); err != nil {
		return fmt.Errorf("building the kubelet: %w", err)
	}
	// None of these modules has replace directives: each installs on its
	// own, outside any module.
	neutral, err := os.MkdirTemp("", "node-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(neutral)
	static := []string{"GOBIN=" + out, "CGO_ENABLED=0"}
	var containerd []string
	for _, c := range []string{Containerd, shim, Ctr} {
		containerd = append(containerd, "github.com/containerd/containerd/v2/cmd/"+c+"@"+ContainerdVersion)
	}
	var cni []string
	for _, p := range cniPlugins {
		cni = append(cni, "github.com/containernetworking/plugins/"+p+"@"+CNIPluginsVersion)
	}
	steps := []struct {
		what string
		env  []string
		args []string
	}{
		{"containerd", static, append([]string{"install"}, containerd...)},
		{"runc", []string{"GOBIN=" + out, "CGO_ENABLED=1"}, []string{"install", "-tags", "seccomp", "github.com/opencontainers/runc@" + RuncVersion}},
		{"the CNI plugins", []string{"GOBIN=" + filepath.Join(out, cniDir), "CGO_ENABLED=0"}, append([]string{"install"}, cni...)},
	}
	for _, s := range steps {
		if err := goCommand(ctx, neutral, log, s.env, s.args...); err != nil {
			return errors.Join(fmt.Errorf("building %s", s.what), err)
		}
	}
	return nil
}
