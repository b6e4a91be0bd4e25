package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Runnable is one controller. Run is called once its replica leads, and
// returns when ctx is done.
type Runnable interface {
	Name() string
	Run(ctx context.Context) error
}

// Env is what a process gives its controllers: clients, shared informers,
// event recorders and a metrics registry. Build one with NewEnv, let the
// controllers register their informers and metrics, then call Run.
type Env struct {
	Options
	// Client does the controllers' work; it is rate-limited by --kube-api-qps.
	Client kubernetes.Interface
	// Config is the configuration Client was built from.
	Config *rest.Config
	// Registry collects the Prometheus metrics served at /metrics.
	Registry *Registry

	eventClient kubernetes.Interface
	broadcaster record.EventBroadcaster
	metrics     http.Handler
	// leading is 1 for each controller of the process while it leads (or
	// runs without leader election), 0 while it stands by.
	leading *prometheus.GaugeVec

	mu        sync.Mutex
	factories map[factoryKey]informers.SharedInformerFactory
	// extra are the factories of other APIs (generated clients), started
	// and shut down with the others.
	extra []Factory
	// shared holds what packages keep once per process (Shared).
	sharedMu sync.Mutex
	shared   map[string]any
	// informers are those built outside a factory (KeptPods).
	informers []cache.SharedIndexInformer
	synced    []cache.InformerSynced
	health    *health
}

type factoryKey struct {
	namespace, labelSelector string
	// metadataOnly caches objects without spec and status.
	metadataOnly bool
}

// NewEnv validates opts and builds the clients.
func NewEnv(opts Options, userAgent string) (*Env, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cfg, err := opts.RESTConfig()
	if err != nil {
		return nil, err
	}
	requests := newRequestMetric()
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &requestCounter{next: rt, count: requests} })
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = float32(opts.QPS), opts.Burst
	// One limit for every client built from cfg (ClientFor's too), as
	// --kube-api-qps promises for the process.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	useProtobuf(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	eventCfg := rest.CopyConfig(cfg)
	eventCfg.QPS, eventCfg.Burst = float32(opts.EventQPS), opts.EventBurst
	eventCfg.RateLimiter = nil // a limit of its own: events never delay work
	eventClient, err := kubernetes.NewForConfig(eventCfg)
	if err != nil {
		return nil, fmt.Errorf("building event client: %w", err)
	}

	registry := NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(requests)
	leading := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "leader",
		Help: "1 while this process's controller leads (holds its Lease, or runs without leader election), 0 while it stands by."}, []string{"controller"})
	registry.MustRegister(leading)
	// The handler registers its own error counter: made here, it is in
	// the registry before the first scrape, as every other metric is.
	metricsHandler := promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry})

	return &Env{
		Options:     opts,
		Client:      client,
		Config:      cfg,
		Registry:    registry,
		metrics:     metricsHandler,
		leading:     leading,
		eventClient: eventClient,
		factories:   map[factoryKey]informers.SharedInformerFactory{},
		health:      newHealth(),
	}, nil
}

// InformerFactory returns the shared informer factory for one namespace
// ("" for all) and label selector ("" for all objects), so that controllers
// running in one process share their watches and caches. Call it before Run.
func (e *Env) InformerFactory(namespace, labelSelector string) informers.SharedInformerFactory {
	return e.factory(factoryKey{namespace: namespace, labelSelector: labelSelector})
}

// ManagedClaims returns the shared informer on the claims in namespace (""
// for all) labelled as made by this installation's podwatcher. It caches
// their metadata only: its readers, the podwatcher and the releaser, need
// nothing else, and the requests and status of thousands of claims would
// double its size. Call it before Run.
func (e *Env) ManagedClaims(namespace string) coreinformers.PersistentVolumeClaimInformer {
	return e.factory(factoryKey{
		namespace:     namespace,
		labelSelector: wellknown.ClaimManagedBy + "=" + e.ControllerID,
		metadataOnly:  true,
	}).Core().V1().PersistentVolumeClaims()
}

func (e *Env) factory(key factoryKey) informers.SharedInformerFactory {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := e.factories[key]; ok {
		return f
	}
	transform := trim
	if key.metadataOnly {
		transform = trimToMetadata
	}
	f := informers.NewSharedInformerFactoryWithOptions(e.Client, 0,
		informers.WithNamespace(key.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = key.labelSelector }),
		informers.WithTransform(transform),
	)
	e.factories[key] = f
	return f
}

// WaitFor adds an informer that is not built by InformerFactory to the set
// that must sync before the process reports ready.
func (e *Env) WaitFor(synced ...cache.InformerSynced) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.synced = append(e.synced, synced...)
}

// Recorder returns an event recorder for one component. Events are written
// through their own rate-limited client.
func (e *Env) Recorder(component string) record.EventRecorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broadcaster == nil {
		e.broadcaster = record.NewBroadcaster()
		e.broadcaster.StartStructuredLogging(4)
		e.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.eventClient.CoreV1().Events(metav1.NamespaceAll)})
	}
	return e.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
}

// Factory is an informer factory of an API the Env has no client for (a
// generated client's).
type Factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// AddFactory has Run start f with the process's informers, shut it down
// with them, and wait for synced before any controller runs. Call it
// before Run.
func (e *Env) AddFactory(f Factory, synced ...cache.InformerSynced) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.extra = append(e.extra, f)
	e.synced = append(e.synced, synced...)
}

// Shared returns what a package keeps once per process under key (an
// informer on its API, say), made by make on first use.
func (e *Env) Shared(key string, make func() (any, error)) (any, error) {
	e.sharedMu.Lock()
	defer e.sharedMu.Unlock()
	if v, ok := e.shared[key]; ok {
		return v, nil
	}
	v, err := make()
	if err != nil {
		return nil, err
	}
	if e.shared == nil {
		e.shared = map[string]any{}
	}
	e.shared[key] = v
	return v, nil
}

// Run serves health and metrics, starts the informers, waits for them to
// sync, then runs every controller under its own leader election. It returns
// nil when ctx is done and an error when a controller fails or loses its
// lease, so that the process exits and starts afresh.
func (e *Env) Run(ctx context.Context, controllers ...Runnable) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	stopServers, err := e.health.serve(ctx, e.HealthAddr, e.MetricsAddr, e.metrics, e.Profiling)
	if err != nil {
		return err
	}
	defer stopServers()
	defer func() {
		if e.broadcaster != nil {
			e.broadcaster.Shutdown()
		}
	}()

	e.mu.Lock()
	synced := append([]cache.InformerSynced(nil), e.synced...)
	for _, f := range e.factories {
		f.Start(ctx.Done())
	}
	factories := make([]informers.SharedInformerFactory, 0, len(e.factories))
	for _, f := range e.factories {
		factories = append(factories, f)
	}
	extra := slices.Clone(e.extra)
	for _, f := range extra {
		f.Start(ctx.Done())
	}
	var running sync.WaitGroup
	for _, inf := range e.informers {
		running.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	e.mu.Unlock()
	defer func() {
		cancel(nil)
		running.Wait()
	}()
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
		for _, f := range extra {
			f.Shutdown()
		}
	}()

	start := time.Now()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("cache for %v did not sync: %w", typ, context.Cause(ctx))
			}
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("caches did not sync: %w", context.Cause(ctx))
	}
	logger.Info("Caches synced", "duration", time.Since(start))
	e.health.setReady()

	var wg sync.WaitGroup
	for _, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx := klog.NewContext(ctx, logger.WithValues("controller", c.Name()))
			if err := e.runLeading(cctx, c); err != nil {
				cancel(fmt.Errorf("%s: %w", c.Name(), err))
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
