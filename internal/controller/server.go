package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// health answers /healthz (the process is alive and every lease it holds is
// being renewed) and /readyz (the caches have synced).
type health struct {
	ready  atomic.Bool
	mu     sync.Mutex
	checks map[string]func(*http.Request) error
}

func newHealth() *health { return &health{checks: map[string]func(*http.Request) error{}} }

func (h *health) setReady() { h.ready.Store(true) }

func (h *health) addCheck(name string, check func(*http.Request) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = check
}

func (h *health) healthz(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, check := range h.checks {
		if err := check(r); err != nil {
			http.Error(w, fmt.Sprintf("%s: %v", name, err), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	if !h.ready.Load() {
		http.Error(w, "caches not synced", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// serve starts the health and metrics servers (an empty address disables
// one). Listening happens before it returns, so a port already in use is
// an error at start-up rather than a silent gap.
func (h *health) serve(ctx context.Context, healthAddr, metricsAddr string, metrics http.Handler, profiling bool) (stop func(), err error) {
	healthMux := http.NewServeMux()
	healthMux.HandleFunc("/healthz", h.healthz)
	healthMux.HandleFunc("/readyz", h.readyz)
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", metrics)
	if profiling {
		metricsMux.HandleFunc("/debug/pprof/", pprof.Index)
		metricsMux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		metricsMux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		metricsMux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		metricsMux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}

	var servers []*http.Server
	for _, s := range []struct {
		addr    string
		handler http.Handler
	}{{healthAddr, healthMux}, {metricsAddr, metricsMux}} {
		if s.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			for _, srv := range servers {
				_ = srv.Close()
			}
			return nil, fmt.Errorf("listening on %s: %w", s.addr, err)
		}
		srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		klog.FromContext(ctx).Info("Serving", "address", ln.Addr().String())
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "Server stopped", "address", ln.Addr().String())
			}
		}()
	}
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(shutdownCtx)
		}
	}, nil
}
