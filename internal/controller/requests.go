package controller

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// requestCounter counts the requests this process sends to the API server
// by verb, resource and status code, so that the cost of a cycle can be
// read from /metrics (reclaimable_api_requests_total).
type requestCounter struct {
	next  http.RoundTripper
	count *prometheus.CounterVec
}

func newRequestMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "api_requests_total",
		Help: "Requests sent to the API server, by verb (get, list, watch, create, update, patch, delete), resource and HTTP status code.",
	}, []string{"verb", "resource", "code"})
}

func (c *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	verb, resource := describe(req)
	c.count.WithLabelValues(verb, resource, code).Inc()
	return resp, err
}

// describe names a request the way the API server's audit log does:
// /api/v1/namespaces/ns/pods/name is a "get" of "pods", without the name a
// "list", with ?watch a "watch"; subresources are "pods/status".
func describe(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// Drop the API prefix: "api/v1" or "apis/<group>/<version>".
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(req.Method), "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:] // a namespaced resource; "namespaces/<name>" itself is kept
	}
	named := len(parts) >= 2
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb, resource
}
