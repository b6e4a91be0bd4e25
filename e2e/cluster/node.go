package cluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reclaimable/reclaimable/internal/release"
)

// The real node carries this taint and label, so that only pods meant for
// it (tolerating the taint) land there; the fake nodes take the rest.
const (
	RealNodeTaint = "e2e.reclaimable/real-node"
	RealNodeLabel = "e2e.reclaimable/real-node"
)

// RealNodeZone is the real node's zone (its label corev1.LabelTopologyZone):
// the zone of the tests' zonal CSI driver on it (StartCSI). The fake nodes
// have none unless a test gives them one.
const RealNodeZone = "zone-a"

// NoRealNodeEnv, set to a reason, turns the tests that need a real node
// into reported skips on a machine where it cannot start (not root, no
// overlayfs). Unset, such a machine fails them with the reason.
const NoRealNodeEnv = "RECLAIMABLE_E2E_NO_REAL_NODE"

// Node is a real node beside the fake ones: a kubelet and containerd of
// its own running pods with runc, its state under one directory.
type Node struct {
	Name string
	// IP is the node's InternalIP: the address of the machine's interface
	// that holds the default route (the kubelet refuses a loopback one).
	IP string
	// Dir holds everything the node makes: containerd's root and state,
	// the kubelet's root, pod logs, CNI state, configuration and logs.
	Dir string

	cluster *Cluster
	procs   []*process
	binDir  string // the node's binaries, ctr among them
	service *serviceForwarder
}

// NodeUnsupported says why a real node cannot start on this machine, or
// returns nil when it can.
func NodeUnsupported() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("a real node needs root (mounts, cgroups, network namespaces); this process runs as uid %d", os.Geteuid())
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\toverlay\n") {
		return errors.New("a real node needs the overlay filesystem (containerd's snapshotter), which this kernel does not offer")
	}
	return nil
}

// StartNode starts the real node name and waits until it is Ready. It
// first cleans whatever killed earlier nodes left on the machine.
func (c *Cluster) StartNode(ctx context.Context, name string) (_ *Node, err error) {
	if err := NodeUnsupported(); err != nil {
		return nil, err
	}
	binDir, err := EnsureNodeBinaries(ctx, c.opts.Log)
	if err != nil {
		return nil, err
	}
	ip, err := defaultRouteIP()
	if err != nil {
		return nil, fmt.Errorf("choosing the real node's address: %w", err)
	}
	n := &Node{Name: name, IP: ip, Dir: filepath.Join(c.Dir, "nodes", name), cluster: c, binDir: binDir}
	if err := cleanAbandonedNodes(); err != nil {
		return nil, err
	}
	if err := cleanNode(n.Dir); err != nil {
		return nil, fmt.Errorf("cleaning what an earlier node left in %s: %w", n.Dir, err)
	}
	for _, sub := range []string{"logs", "images", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	start := time.Now()
	if err := n.prepare(ctx); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + binDir + ":" + os.Getenv("PATH")}
	if err := n.startContainerd(ctx, env); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx, env); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	fmt.Fprintf(c.opts.Log, "Real node %s Ready in %s (kubelet %s, containerd %s, address %s)\n", name, time.Since(start).Round(10*time.Millisecond), KubernetesVersion, ContainerdVersion, ip)
	return n, nil
}

// prepare writes the node's machine-wide record (the kernel settings as
// they are before the kubelet runs), makes its cgroup, and writes its
// images, credentials and configuration.
func (n *Node) prepare(ctx context.Context) error {
	if err := n.record(); err != nil {
		return err
	}
	if err := makeCgroupRoot(n.cgroupRoot()); err != nil {
		return err
	}
	if err := n.buildImages(ctx); err != nil {
		return err
	}
	if err := n.writeCredentials(); err != nil {
		return err
	}
	return n.writeConfigs(n.binDir)
}

// startContainerd starts the node's containerd, with env, and imports the
// node's images into it once it answers.
func (n *Node) startContainerd(ctx context.Context, env []string) error {
	containerd := &process{name: Containerd, path: filepath.Join(n.binDir, Containerd), args: []string{"--config", n.path("containerd.toml")}, log: n.logPath(Containerd), env: env}
	if err := n.startProcess(containerd); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx, n.binDir, containerd); err != nil {
		return err
	}
	for _, img := range nodeImages {
		if err := n.ctr(ctx, n.binDir, "images", "import", n.path("images", img.file)); err != nil {
			return fmt.Errorf("importing %s: %w", img.ref, err)
		}
	}
	// As a user loads it: ctr images import of make image's archive.
	if err := n.ctr(ctx, n.binDir, "images", "import", n.path("images", reclaimableArchive)); err != nil {
		return fmt.Errorf("importing %s: %w", ReclaimableImage, err)
	}
	return nil
}

// startKubelet starts the node's kubelet, with env, and waits until the
// node is Ready. The kubelet registers the node tainted RealNodeTaint,
// unless the cluster is a Peer one.
func (n *Node) startKubelet(ctx context.Context, env []string) error {
	c := n.cluster
	if err := sharedMount(n.path("kubelet")); err != nil {
		return err
	}
	if err := n.serveKubernetesService(c.Config.Host); err != nil {
		return err
	}
	kubelet := &process{name: Kubelet, path: filepath.Join(n.binDir, Kubelet), log: n.logPath(Kubelet), env: env, args: []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"),
		"--root-dir=" + n.path("kubelet"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--node-labels=" + RealNodeLabel + "=true," + corev1.LabelTopologyZone + "=" + RealNodeZone,
		"--v=2",
	}}
	if !c.opts.Peer {
		kubelet.args = append(kubelet.args, "--register-with-taints="+RealNodeTaint+"=true:NoSchedule")
	}
	if err := n.startProcess(kubelet); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, n.Name, func() error {
		if kubelet.exited() {
			return errors.New("the kubelet exited")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%w\n%s", err, kubelet.tail())
	}
	return nil
}

// Stop stops the kubelet, every pod container and containerd, and removes
// what they left on the machine: mounts, cgroups, shim sockets, the
// kernel settings the kubelet changed.
func (n *Node) Stop() error {
	n.service.stop()
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].stop(10 * time.Second)
	}
	return cleanNode(n.Dir)
}

// LogPath is where the kubelet or containerd of the node writes its log.
func (n *Node) LogPath(component string) string { return n.logPath(component) }

// sharedMount bind-mounts dir, the kubelet's root, onto itself with shared
// propagation. The kubelet does the same at start when the directory is not
// on a shared mount, while its pod-resources server may be creating its
// socket there: the socket's rename from its temporary name then crosses
// the new mount, fails ("invalid cross-device link"), and the kubelet exits.
// Made beforehand, the mount leaves it nothing to do; cleanNode unmounts it.
func sharedMount(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the kubelet's root %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("making the kubelet's root %s a shared mount: %w", dir, err)
	}
	return nil
}

// PluginRegistrationDir is where the kubelet looks for plugins, a CSI
// driver's among them, that tell it of themselves.
func (n *Node) PluginRegistrationDir() string { return n.path("kubelet", "plugins_registry") }

func (n *Node) path(elem ...string) string { return filepath.Join(append([]string{n.Dir}, elem...)...) }

func (n *Node) logPath(component string) string { return n.path("logs", component+".log") }

// cgroupRoot is the node's own cgroup, named after its directory, so that
// two nodes on one machine never share one.
func (n *Node) cgroupRoot() string { return nodeCgroupRoot(n.Dir) }

func nodeCgroupRoot(dir string) string { return "/reclaimable-node-" + dirHash(dir) }

// nodeBridge is the node's pod bridge, within the 15 bytes of a link name.
func nodeBridge(dir string) string { return "rcl" + dirHash(dir) }

func dirHash(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:])[:10]
}

func (n *Node) startProcess(p *process) error {
	if err := p.start(!n.cluster.opts.Detach); err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return writePIDs(n.Dir, n.procs)
}

// ImportImage imports an image archive into the node's containerd, as a
// user loads an image into a node: ctr images import.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	return n.ctr(ctx, n.binDir, "images", "import", archive)
}

// ImageArchive is the archive of ReclaimableImage the node imported at
// start.
func (n *Node) ImageArchive() string { return n.path("images", reclaimableArchive) }

func (n *Node) containerdSocket() string { return n.path("containerd", "containerd.sock") }

func (n *Node) ctr(ctx context.Context, binDir string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, Ctr), append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *Node) waitContainerd(ctx context.Context, binDir string, p *process) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, errors.New("containerd exited")
		}
		last = n.ctr(ctx, binDir, "version")
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd not serving (%v): %w\n%s", last, err, p.tail())
	}
	return nil
}

// buildImages builds the images' programs from this work tree, static, in
// one go build, and writes their archives.
func (n *Node) buildImages(ctx context.Context) error {
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", n.path("images") + string(filepath.Separator)}
	for _, img := range nodeImages {
		args = append(args, img.pkg)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the node's images: %w\n%s", err, out)
	}
	for _, img := range nodeImages {
		// go build names each binary after its package's directory.
		b, err := os.ReadFile(n.path("images", path.Base(img.pkg)))
		if err != nil {
			return err
		}
		if err := writeImage(n.path("images", img.file), img.ref, img.program, b); err != nil {
			return fmt.Errorf("writing the image %s: %w", img.ref, err)
		}
	}
	// The reclaimable image, exactly as make image writes it.
	layout, err := release.BuildImage(ctx, RepoRoot(), reclaimableVersion, ReclaimableImage, []string{runtime.GOARCH}, n.path("images"))
	if err != nil {
		return err
	}
	return layout.WriteTar(n.path("images", reclaimableArchive))
}

// writeCredentials issues the kubelet's client certificate (the Node
// authorizer knows it as system:node:<name>) and its serving certificate.
func (n *Node) writeCredentials() error {
	p := n.cluster.pki
	client, serving := "node-"+n.Name, "node-"+n.Name+"-serving"
	if err := p.issue(client, "system:node:"+n.Name, []string{"system:nodes"}, false, nil, nil); err != nil {
		return err
	}
	if err := p.issue(serving, "system:node:"+n.Name, nil, true, []string{n.Name}, []net.IP{net.ParseIP(n.IP)}); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: n.cluster.Config.Host, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos[n.Name] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(client + ".crt"), ClientKey: p.path(client + ".key")}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: n.Name}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, n.path("kubelet.kubeconfig"))
}

func (n *Node) writeConfigs(binDir string) error {
	kubeletPort, err := freePort()
	if err != nil {
		return err
	}
	healthzPort, err := freePort()
	if err != nil {
		return err
	}
	p := n.cluster.pki
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(containerdConfig,
			n.path("containerd", "root"), n.path("containerd", "state"), n.containerdSocket(),
			PauseImage, filepath.Join(binDir, Runc), n.path("runc"), filepath.Join(binDir, cniDir), n.path("cni", "net.d")),
		"cni/net.d/10-reclaimable.conflist": fmt.Sprintf(cniConfig, nodeBridge(n.Dir), n.path("cni", "ipam")),
		"kubelet.yaml": fmt.Sprintf(kubeletConfig,
			n.IP, kubeletPort, healthzPort, p.path("ca.crt"),
			p.path("node-"+n.Name+"-serving.crt"), p.path("node-"+n.Name+"-serving.key"),
			n.cgroupRoot(), "unix://"+n.containerdSocket(), n.path("pod-logs"), n.path("volume-plugins")),
	}
	for name, content := range files {
		if err := os.WriteFile(n.path(name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// containerd: its own root, state, socket and runc state, and the pods'
// network namespaces under its state rather than in /var/run/netns; no
// configuration imported from the machine and no NRI; the CRI's sandbox
// image pinned to the imported pause image. restrict_oom_score_adj: a
// container may not lower its OOM score below containerd's, which machines
// without CAP_SYS_RESOURCE refuse to any process.
const containerdConfig = `version = 3
root = %q
state = %q
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = %q

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    tolerate_missing_hugetlb_controller = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          Root = %q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`

// The pod network: a bridge of the node's own with an address for each
// pod, the bridge their gateway to the Service range only, so that they
// reach the kubernetes Service's address (service.go), and the kubelet
// reaches them (probes). Nothing else: no default route, no masquerading,
// no iptables rule, no way out of the machine. The bridge plugin turns
// forwarding on for a gateway; the node records it and puts it back. The
// kernel may lack the dummy link type; veth and bridge are everywhere.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "reclaimable-node",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "10.96.0.0/16"}]}
  }]
}
`

// The kubelet: its API on the node address with client certificates of
// the cluster's CA (the API server's kubelet client) and no further
// authorization; cgroupfs under the node's own cgroup; cgroup v1 and swap
// tolerated; no OOM score below 0 (see containerdConfig); eviction
// thresholds low enough that a busy disk does not evict test pods.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
tlsCertFile: %q
tlsPrivateKeyFile: %q
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: %q
podLogsDir: %q
volumePluginDir: %q
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
`

// defaultRouteIP is the IPv4 address of the interface that holds the
// default route.
func defaultRouteIP() (string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || fields[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(fields[0])
		if err != nil {
			return "", err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return "", err
		}
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.To4() != nil && !ipnet.IP.IsLoopback() {
				return ipnet.IP.String(), nil
			}
		}
		return "", fmt.Errorf("interface %s of the default route has no IPv4 address", fields[0])
	}
	return "", errors.New("no default route: the kubelet needs a node address that is not loopback")
}
