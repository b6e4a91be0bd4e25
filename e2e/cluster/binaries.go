// Package cluster runs a real Kubernetes control plane on 127.0.0.1 for the
// end-to-end tests, the benchmark and the demo: etcd, kube-apiserver with
// RBAC, kube-controller-manager (with the real PersistentVolume controller),
// kube-scheduler and kwok, which plays the kubelet on fake nodes.
//
// The binaries are built from the Go module proxy (the e2e/tools module) on
// first use and cached by version, so only the first run on a machine pays
// for the build.
package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Versions of the control plane. Kubernetes v1.34.10 pins etcd v3.6.4; the
// e2e/tools module must agree with these.
const (
	KubernetesVersion = "v1.34.10"
	EtcdVersion       = "v3.6.4"
	KwokVersion       = "v0.8.0"
)

// Binary names inside the cache directory.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubectl               = "kubectl"
	Kwok                  = "kwok"
	kwokStages            = "kwok-stages.yaml"
)

var kubeCommands = []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl}

// kwok has no built-in stages (kwokctl normally injects them): these are its
// defaults for fast fake nodes and pods, taken from its module.
var kwokStageFiles = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// ToolsDir is the e2e/tools module that pins the control plane's sources.
func ToolsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tools")
}

// BinDir is where the binaries of this version set are cached:
// $RECLAIMABLE_E2E_CACHE, else the user cache directory, keyed by the
// versions and by the tools module's go.mod and go.sum.
func BinDir() (string, error) {
	return cacheDir(fmt.Sprintf("k8s-%s_etcd-%s_kwok-%s", KubernetesVersion, EtcdVersion, KwokVersion))
}

// cacheDir is the directory of one set of binaries in the cache, named
// after prefix and the tools module, which pins the sources of Kubernetes.
func cacheDir(prefix string) (string, error) {
	root := os.Getenv("RECLAIMABLE_E2E_CACHE")
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("finding a cache directory (set RECLAIMABLE_E2E_CACHE): %w", err)
		}
		root = filepath.Join(dir, "reclaimable-e2e")
	}
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(ToolsDir(), f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return filepath.Join(root, prefix+"_"+hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// EnsureBinaries returns the cache directory holding every binary of the
// control plane, building what is missing. Concurrent callers on one machine
// wait for one build.
func EnsureBinaries(ctx context.Context, log io.Writer) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	files := append([]string{Etcd, Kwok, kwokStages}, kubeCommands...)
	what := fmt.Sprintf("the local control plane (Kubernetes %s, etcd %s, kwok %s)", KubernetesVersion, EtcdVersion, KwokVersion)
	return dir, ensureCached(ctx, dir, files, what, log, build)
}

// ensureCached builds files into dir with build unless dir already holds
// them all. The build goes to a temporary directory renamed into place, so
// a killed build leaves no half-filled cache, and a lock file makes
// concurrent callers wait for one build.
func ensureCached(ctx context.Context, dir string, files []string, what string, log io.Writer, build func(context.Context, string, io.Writer) error) error {
	if complete(dir, files) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	// Another process may have built it while this one waited for the lock.
	if complete(dir, files) {
		return nil
	}

	fmt.Fprintf(log, "Building %s into %s; this happens once per machine and takes several minutes.\n", what, dir)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".partial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := build(ctx, tmp, log); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func complete(dir string, files []string) bool {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

func build(ctx context.Context, out string, log io.Writer) error {
	args := []string{"build", "-ldflags", kubernetesLDFlags(), "-o", out + string(filepath.Separator), "./etcd"}
	for _, c := range kubeCommands {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	if err := goCommand(ctx, ToolsDir(), log, nil, args...); err != nil {
		return fmt.Errorf("building etcd and Kubernetes: %w", err)
	}

	// kwok has no replace directives, so it installs on its own, outside any module.
	neutral, err := os.MkdirTemp("", "kwok-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(neutral)
	if err := goCommand(ctx, neutral, log, []string{"GOBIN=" + out}, "install", "sigs.k8s.io/kwok/cmd/kwok@"+KwokVersion); err != nil {
		return fmt.Errorf("installing kwok: %w", err)
	}
	kwokDir, err := moduleDir(ctx, neutral, "sigs.k8s.io/kwok@"+KwokVersion, log)
	if err != nil {
		return fmt.Errorf("locating kwok's stages: %w", err)
	}
	var stages bytes.Buffer
	for _, f := range kwokStageFiles {
		b, err := os.ReadFile(filepath.Join(kwokDir, f))
		if err != nil {
			return fmt.Errorf("reading kwok stage: %w", err)
		}
		stages.WriteString("---\n")
		stages.Write(b)
		stages.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(out, kwokStages), stages.Bytes(), 0o644)
}

// moduleDir downloads module ("path@version") from the module proxy, from
// dir (outside any module), and returns the directory of its source.
func moduleDir(ctx context.Context, dir, module string, log io.Writer) (string, error) {
	var dl bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &dl, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("downloading %s: %w", module, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(dl.Bytes(), &mod); err != nil || mod.Dir == "" {
		return "", errors.Join(fmt.Errorf("locating the directory of module %s", module), err)
	}
	return mod.Dir, nil
}

func goCommand(ctx context.Context, dir string, log io.Writer, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.Env = append(os.Environ(), env...)
	return cmd.Run()
}

// kubernetesLDFlags stamp the Kubernetes version into a binary built from
// the module proxy, as its release build does: components and nodes report it.
func kubernetesLDFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+KubernetesVersion,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean")
	}
	return strings.Join(flags, " ")
}
