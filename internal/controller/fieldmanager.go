package controller

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// FieldManager is the field manager of a controller's writes, as
// managedFields name it: "reclaimable-<controller>".
func FieldManager(controller string) string { return "reclaimable-" + controller }

// ClientFor returns the client a controller writes with: Client's
// configuration and rate limit, with every create, update and patch that
// names no field manager given the controller's. The provisioning library
// writes through the client it is handed and names none, so a default on
// the client, rather than on each call, is what reaches its writes too. In
// `reclaimable all`, managedFields then say which controller wrote a field.
func (e *Env) ClientFor(controller string) (kubernetes.Interface, error) {
	client, err := kubernetes.NewForConfig(e.ConfigFor(controller))
	if err != nil {
		return nil, fmt.Errorf("building the client of the %s: %w", controller, err)
	}
	return client, nil
}

// ConfigFor returns the configuration of ClientFor, for the clients of
// other APIs (VolumePools) a controller writes with.
func (e *Env) ConfigFor(controller string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	name := FieldManager(controller)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return fieldManager{next: rt, name: name} })
	return cfg
}

// fieldManager adds ?fieldManager=name to the writes that name none.
type fieldManager struct {
	next http.RoundTripper
	name string
}

func (f fieldManager) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		if q := req.URL.Query(); q.Get("fieldManager") == "" {
			req = req.Clone(req.Context())
			q.Set("fieldManager", f.name)
			req.URL.RawQuery = q.Encode()
		}
	}
	return f.next.RoundTrip(req)
}
