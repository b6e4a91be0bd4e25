package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options shape a cluster.
type Options struct {
	// Dir holds certificates, data, logs and kubeconfigs. It must not hold
	// another running cluster.
	Dir string
	// Nodes are the fake nodes created at start; default one, "node-1".
	Nodes []string
	// ClaimBinderSyncPeriod is the PV controller's resync period; shorter
	// speeds up the rare paths that wait for a resync. Default 5s.
	ClaimBinderSyncPeriod time.Duration
	// ControllerManagerQPS raises the controller-manager's client limits, so
	// that the PV controller is limited by the API server, not by its client.
	// Default 200.
	ControllerManagerQPS int
	// Detach lets the components outlive the calling process (cluster up).
	// Otherwise they are killed if it dies.
	Detach bool
	// Log receives progress messages; nil discards them.
	Log io.Writer
	// Peer starts the cluster as Kubernetes' own storage tests need it:
	// privileged pods allowed (their host-side checks run in privileged
	// pods), the fake nodes tainted FakeNodeTaint (their pods tolerate
	// nothing, and only the real node runs them for real); StartNode then
	// leaves the real node untainted.
	Peer bool
	// WithoutCRDs starts the cluster without the project's CRDs, which
	// Start otherwise installs (every controller watches VolumePools), as a
	// new cluster is before its first install.
	WithoutCRDs bool
}

// FakeNodeTaint is on the fake nodes of a Peer cluster.
const FakeNodeTaint = "e2e.reclaimable/fake-node"

// Cluster is a running local control plane.
type Cluster struct {
	Dir string
	// Kubeconfig is an administrator's kubeconfig (system:masters).
	Kubeconfig string
	// Config and Client are the administrator's.
	Config *rest.Config
	Client kubernetes.Interface
	// BinDir holds the binaries, kubectl among them.
	BinDir string

	opts  Options
	procs []*process
	nodes []*Node
	pki   *pki
	ports map[string]int
}

// Kubectl is the path of a kubectl of the cluster's version.
func (c *Cluster) Kubectl() string { return filepath.Join(c.BinDir, Kubectl) }

// Start builds (or reuses) the binaries and starts a cluster. On error it
// stops whatever it had started.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Dir == "" {
		return nil, errors.New("cluster: Options.Dir is required")
	}
	opts.defaults()
	binDir, err := EnsureBinaries(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	// A cluster's logs and data are its own: none of a previous one's.
	for _, sub := range []string{"logs", "etcd"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}

	c := &Cluster{Dir: dir, BinDir: binDir, opts: opts, ports: map[string]int{}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	start := time.Now()
	if err := c.configure(); err != nil {
		return nil, err
	}
	if err := c.startComponents(ctx); err != nil {
		return nil, err
	}
	if err := c.populate(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "Local control plane up in %s (API server https://127.0.0.1:%d)\n", time.Since(start).Round(10*time.Millisecond), c.ports["apiserver"])
	return c, nil
}

// defaults fills what is unset.
func (o *Options) defaults() {
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"node-1"}
	}
	if o.ClaimBinderSyncPeriod == 0 {
		o.ClaimBinderSyncPeriod = 5 * time.Second
	}
	if o.ControllerManagerQPS == 0 {
		o.ControllerManagerQPS = 200
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// configure issues the certificates, picks the components' ports and
// writes their kubeconfigs and the scheduler's configuration.
func (c *Cluster) configure() error {
	var err error
	if c.pki, err = newPKI(filepath.Join(c.Dir, "pki")); err != nil {
		return err
	}
	for _, name := range []string{"etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok"} {
		if c.ports[name], err = freePort(); err != nil {
			return err
		}
	}
	if err := c.writeKubeconfigs(); err != nil {
		return err
	}
	return c.writeSchedulerConfig()
}

// startComponents starts each component in turn, once the one before it is
// healthy, connects to the API server as soon as it is, and records the
// processes' IDs for cluster down.
func (c *Cluster) startComponents(ctx context.Context) error {
	c.procs = c.components()
	for _, p := range c.procs {
		if err := p.start(!c.opts.Detach); err != nil {
			return err
		}
		if err := c.waitHealthy(ctx, p); err != nil {
			return err
		}
		if p.name == KubeAPIServer {
			if err := c.connect(); err != nil {
				return err
			}
		}
	}
	return writePIDs(c.Dir, c.procs)
}

// populate waits for the default ServiceAccount, installs the CRDs unless
// told not to, and creates the fake nodes, tainted in a Peer cluster.
func (c *Cluster) populate(ctx context.Context) error {
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return err
	}
	if !c.opts.WithoutCRDs {
		if err := c.installCRDs(ctx); err != nil {
			return err
		}
	}
	var taints []corev1.Taint
	if c.opts.Peer {
		taints = append(taints, corev1.Taint{Key: FakeNodeTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	}
	for _, n := range c.opts.Nodes {
		if err := c.CreateNode(ctx, n, nil, taints...); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the real nodes, then every component, in reverse start order.
func (c *Cluster) Stop() {
	for _, n := range c.nodes {
		if err := n.Stop(); err != nil {
			fmt.Fprintf(c.opts.Log, "Stopping real node %s: %v\n", n.Name, err)
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	_ = os.Remove(filepath.Join(c.Dir, pidFile))
}

// Restart stops one component (KubeAPIServer, KubeControllerManager,
// KubeScheduler, Kwok or Etcd) and starts it again with the same flags,
// waiting until it is healthy. The data in etcd is kept.
func (c *Cluster) Restart(ctx context.Context, component string) error {
	for _, p := range c.procs {
		if p.name != component {
			continue
		}
		p.stop(10 * time.Second)
		if err := p.start(!c.opts.Detach); err != nil {
			return err
		}
		if err := c.waitHealthy(ctx, p); err != nil {
			return err
		}
		return writePIDs(c.Dir, c.procs)
	}
	return fmt.Errorf("no component %q", component)
}

// LogPath is where a component writes its log.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

func (c *Cluster) components() []*process {
	pki := c.pki.path
	url := func(name string) string { return "http://127.0.0.1:" + strconv.Itoa(c.ports[name]) }
	proc := func(name string, args ...string) *process {
		return &process{name: name, path: filepath.Join(c.BinDir, name), args: args, log: c.LogPath(name)}
	}
	return []*process{
		proc(Etcd,
			"--name=e2e",
			"--data-dir="+filepath.Join(c.Dir, "etcd"),
			"--listen-client-urls="+url("etcd"), "--advertise-client-urls="+url("etcd"),
			"--listen-peer-urls="+url("etcd-peer"), "--initial-advertise-peer-urls="+url("etcd-peer"),
			"--initial-cluster=e2e="+url("etcd-peer"),
			"--unsafe-no-fsync", "--log-level=warn"),
		proc(KubeAPIServer,
			"--etcd-servers="+url("etcd"),
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(c.ports["apiserver"]),
			"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
			"--client-ca-file="+pki("ca.crt"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+pki("sa.pub"),
			"--service-account-signing-key-file="+pki("sa.key"),
			"--service-cluster-ip-range=10.96.0.0/16",
			// Node: the real node's kubelet acts as system:node:<name>.
			"--authorization-mode=Node,RBAC",
			// The real node's name resolves nowhere: dial its address.
			"--kubelet-preferred-address-types=InternalIP,Hostname",
			"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"), "--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
			// MutatingAdmissionPolicy is beta and off by default in v1.34:
			// the claims-gate component needs it.
			"--feature-gates=MutatingAdmissionPolicy=true",
			"--runtime-config=admissionregistration.k8s.io/v1beta1=true",
			"--endpoint-reconciler-type=none",
			"--allow-privileged="+strconv.FormatBool(c.opts.Peer),
			"--profiling=false"),
		proc(KubeControllerManager,
			"--kubeconfig="+c.kubeconfigPath("controller-manager"),
			"--authentication-skip-lookup",
			"--controllers=*",
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file="+pki("sa.key"),
			"--root-ca-file="+pki("ca.crt"),
			"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports["controller-manager"]),
			"--pvclaimbinder-sync-period="+c.opts.ClaimBinderSyncPeriod.String(),
			// kwok renews the fake nodes' leases through the client that
			// also plays every fake pod; under a burst of pods on two cores
			// a renewal can come after the default 50 s, the node is marked
			// NotReady and its pods not Ready, and kwok never makes them
			// Ready again. No test here is about a node going silent.
			"--node-monitor-grace-period=5m",
			"--kube-api-qps="+strconv.Itoa(c.opts.ControllerManagerQPS),
			"--kube-api-burst="+strconv.Itoa(2*c.opts.ControllerManagerQPS),
			"--profiling=false"),
		proc(KubeScheduler,
			"--config="+c.schedulerConfigPath(),
			"--authentication-skip-lookup",
			// Alpha in v1.34: lets VolumeBinding score static bindings
			// with the configuration's shape (see writeSchedulerConfig).
			"--feature-gates=StorageCapacityScoring=true",
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports["scheduler"])),
		proc(Kwok,
			"--kubeconfig="+c.kubeconfigPath("kwok"),
			"--config="+filepath.Join(c.BinDir, kwokStages),
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
			"--node-ip=127.0.0.1",
			"--server-address=127.0.0.1:"+strconv.Itoa(c.ports["kwok"])),
	}
}

func (c *Cluster) schedulerConfigPath() string {
	return filepath.Join(c.Dir, "scheduler.yaml")
}

// writeSchedulerConfig configures the scheduler as the local backend's
// section of docs/pools.md advises: VolumeBinding scores a node where a free volume
// fits the pod's claim by how closely it fits (a volume of the claim's size
// scores highest), so that a warm member draws the pod to its node.
func (c *Cluster) writeSchedulerConfig() error {
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
enableProfiling: false
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: VolumeBinding
    args:
      shape:
      - {utilization: 0, score: 0}
      - {utilization: 100, score: 10}
`, c.kubeconfigPath("scheduler"))
	return os.WriteFile(c.schedulerConfigPath(), []byte(config), 0o644)
}

func (c *Cluster) kubeconfigPath(user string) string {
	return filepath.Join(c.Dir, user+".kubeconfig")
}

// writeKubeconfigs issues a client certificate per user and a kubeconfig
// for each. kwok gets system:masters: it plays every kubelet.
func (c *Cluster) writeKubeconfigs() error {
	users := []struct{ name, cn, group string }{
		{"admin", "admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kwok", "kwok", "system:masters"},
	}
	server := "https://127.0.0.1:" + strconv.Itoa(c.ports["apiserver"])
	for _, u := range users {
		var groups []string
		if u.group != "" {
			groups = []string{u.group}
		}
		if err := c.pki.issue(u.name, u.cn, groups, false, nil, nil); err != nil {
			return err
		}
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.pki.path("ca.crt")}
		cfg.AuthInfos[u.name] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki.path(u.name + ".crt"), ClientKey: c.pki.path(u.name + ".key")}
		cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: u.name}
		cfg.CurrentContext = "local"
		if err := clientcmd.WriteToFile(*cfg, c.kubeconfigPath(u.name)); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.kubeconfigPath("admin")
	return nil
}

func (c *Cluster) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.Config, c.Client = cfg, client
	return nil
}

// waitHealthy polls a component's health endpoint until it answers ok.
func (c *Cluster) waitHealthy(ctx context.Context, p *process) error {
	var url string
	switch p.name {
	case Etcd:
		url = fmt.Sprintf("http://127.0.0.1:%d/health", c.ports["etcd"])
	case KubeAPIServer:
		url = fmt.Sprintf("https://127.0.0.1:%d/readyz", c.ports["apiserver"])
	case KubeControllerManager:
		url = fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports["controller-manager"])
	case KubeScheduler:
		url = fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports["scheduler"])
	case Kwok:
		url = fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports["kwok"])
	}
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates:       []tls.Certificate{cert},
			InsecureSkipVerify: true, // loopback only; the components use self-signed serving certificates
		}},
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited", p.name)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not healthy (%s): %w\n%s", p.name, last, err, p.tail())
	}
	return nil
}

func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// CreateNode adds a fake node that kwok manages and waits until it is Ready.
func (c *Cluster) CreateNode(ctx context.Context, name string, labels map[string]string, taints ...corev1.Taint) error {
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
	for k, v := range labels {
		l[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("10000"),
			},
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("10000"),
			},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return c.waitNodeReady(ctx, name, func() error { return nil })
}

// waitNodeReady polls the node until it is Ready, for up to a minute, or
// until alive says what plays the node has stopped.
func (c *Cluster) waitNodeReady(ctx context.Context, name string, alive func() error) error {
	last := "not registered"
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w", name, last, err)
	}
	return nil
}

// installCRDs installs the project's CustomResourceDefinitions, as the
// installation does, and waits until they are served: every controller
// watches its objects, so none would report ready without them.
func (c *Cluster) installCRDs(ctx context.Context) error {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "manifests", "base", "crd")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", dir},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", dir},
	} {
		cmd := exec.CommandContext(ctx, c.Kubectl(), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing the CRDs: kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
