// Package controller is the plumbing the three controllers share: client
// configuration and rate limits, shared informers, event recording, leader
// election, the workqueue loop and the health and metrics endpoints.
package controller

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
)

// Options are the flags every subcommand accepts.
type Options struct {
	Kubeconfig      string
	ControllerID    string
	ProvisionerName string

	// QPS and Burst limit the requests that do the controllers' work. Events
	// have a budget of their own (EventQPS, EventBurst) so that a burst of
	// events never delays a claim or a volume.
	QPS        float64
	Burst      int
	EventQPS   float64
	EventBurst int

	// LeaderElection holds the --leader-elect flags every Kubernetes
	// component has. Each controller elects its own leader through a Lease
	// named "<ResourceName>-<controller>"; ResourceName defaults to the
	// controller ID, ResourceNamespace to the pod's namespace.
	LeaderElection componentbaseconfig.LeaderElectionConfiguration

	HealthAddr  string
	MetricsAddr string
	// Profiling serves Go's profiles at /debug/pprof/ beside the metrics,
	// as the Kubernetes components' --profiling does: what an administrator
	// reads to tell where a controller's memory or CPU goes.
	Profiling bool
}

// AddFlags registers the common flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file. Defaults to $KUBECONFIG, then to the in-cluster service account.")
	fs.StringVar(&o.ControllerID, "controller-id", "reclaimable", "Identity shared by the controllers of one installation; they only act on objects labelled with it.")
	fs.StringVar(&o.ProvisionerName, "provisioner-name", "vendor/reclaimable", "Name of this installation's provisioner, as StorageClasses name it in \"provisioner\"; the releaser also associates the volumes it created.")
	fs.Float64Var(&o.QPS, "kube-api-qps", 50, "Sustained requests per second to the API server, events excluded.")
	fs.IntVar(&o.Burst, "kube-api-burst", 100, "Requests allowed in a burst above --kube-api-qps.")
	fs.Float64Var(&o.EventQPS, "event-qps", 20, "Sustained event writes per second; kept apart from --kube-api-qps so events never delay real work.")
	fs.IntVar(&o.EventBurst, "event-burst", 50, "Event writes allowed in a burst above --event-qps.")
	o.LeaderElection = componentbaseconfig.LeaderElectionConfiguration{
		LeaderElect:   true,
		LeaseDuration: metav1.Duration{Duration: 15 * time.Second},
		RenewDeadline: metav1.Duration{Duration: 10 * time.Second},
		RetryPeriod:   metav1.Duration{Duration: 2 * time.Second},
		ResourceLock:  resourcelock.LeasesResourceLock,
	}
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, fs)
	// Each controller has a Lease of its own: the name is their prefix.
	fs.Lookup("leader-elect-resource-name").Usage = "Prefix of the Leases' names: each controller elects its leader through the Lease \"<prefix>-<controller>\". Defaults to --controller-id."
	fs.Lookup("leader-elect-resource-namespace").Usage = "Namespace of the Leases. Defaults to the pod's namespace, else \"default\"."
	// The name this flag had before the components' common set; kept so
	// that installations that pass it keep working.
	fs.StringVar(&o.LeaderElection.ResourceNamespace, "leader-elect-namespace", "", "")
	_ = fs.MarkDeprecated("leader-elect-namespace", "use --leader-elect-resource-namespace")
	fs.StringVar(&o.HealthAddr, "health-addr", ":8081", "Address serving /healthz and /readyz; empty disables it.")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", ":8080", "Address serving Prometheus metrics at /metrics; empty disables it.")
	fs.BoolVar(&o.Profiling, "profiling", false, "Serve Go's profiles (heap, CPU, goroutines) at /debug/pprof/ on --metrics-addr.")
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if msgs := validation.IsValidLabelValue(o.ControllerID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--controller-id %q is not a valid label value: %s", o.ControllerID, strings.Join(msgs, "; ")))
	}
	if o.ControllerID == "" {
		errs = append(errs, errors.New("--controller-id must not be empty"))
	}
	if o.ProvisionerName == "" {
		errs = append(errs, errors.New("--provisioner-name must not be empty"))
	}
	if o.QPS <= 0 || o.Burst <= 0 || o.EventQPS <= 0 || o.EventBurst <= 0 {
		errs = append(errs, errors.New("--kube-api-qps, --kube-api-burst, --event-qps and --event-burst must be positive"))
	}
	le := o.LeaderElection
	if le.LeaderElect && !(le.RetryPeriod.Duration > 0 && le.RetryPeriod.Duration < le.RenewDeadline.Duration && le.RenewDeadline.Duration < le.LeaseDuration.Duration) {
		errs = append(errs, errors.New("leader election needs 0 < --leader-elect-retry-period < --leader-elect-renew-deadline < --leader-elect-lease-duration"))
	}
	if le.ResourceLock != resourcelock.LeasesResourceLock {
		errs = append(errs, fmt.Errorf("--leader-elect-resource-lock %q: only %q is supported", le.ResourceLock, resourcelock.LeasesResourceLock))
	}
	if le.ResourceName != "" {
		if msgs := validation.IsDNS1123Subdomain(le.ResourceName + "-provisioner"); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-name %q does not make valid Lease names: %s", le.ResourceName, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// RESTConfig loads the client configuration: --kubeconfig, else $KUBECONFIG,
// else the service account mounted into the pod.
func (o *Options) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	if o.Kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig, no $KUBECONFIG and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// leaseName is the Lease of one controller.
func (o *Options) leaseName(controller string) string {
	prefix := o.LeaderElection.ResourceName
	if prefix == "" {
		prefix = o.ControllerID
	}
	return prefix + "-" + controller
}

// Namespace is the installation's namespace: where its Leases live, which
// --leader-elect-resource-namespace names, else the namespace the pod runs
// in, as the downward API or the service account tells.
func (o *Options) Namespace() string { return o.leaseNamespace() }

// leaseNamespace is where the Leases live when no flag says otherwise: the
// namespace the pod runs in, as the downward API or the service account tells.
func (o *Options) leaseNamespace() string {
	if ns := o.LeaderElection.ResourceNamespace; ns != "" {
		return ns
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}
