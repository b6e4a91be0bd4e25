package controller

import (
	"net/http"
	"net/url"
	"testing"
)

func TestDescribeRequest(t *testing.T) {
	for _, tc := range []struct {
		method, url, verb, resource string
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p", "get", "pods"},
		{"GET", "/api/v1/namespaces/ns/pods", "list", "pods"},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=1", "watch", "pods"},
		{"GET", "/api/v1/persistentvolumes/pv-1", "get", "persistentvolumes"},
		{"PUT", "/api/v1/persistentvolumes/pv-1", "update", "persistentvolumes"},
		{"PUT", "/api/v1/persistentvolumes/pv-1/status", "update", "persistentvolumes/status"},
		{"POST", "/api/v1/namespaces/ns/persistentvolumeclaims", "create", "persistentvolumeclaims"},
		{"DELETE", "/api/v1/namespaces/ns/persistentvolumeclaims/c", "delete", "persistentvolumeclaims"},
		{"PATCH", "/api/v1/namespaces/ns/events/e", "patch", "events"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", "update", "leases"},
		{"GET", "/apis/batch/v1/jobs?watch=1", "watch", "jobs"},
		{"GET", "/api/v1/namespaces/ns", "get", "namespaces"},
		{"GET", "/version", "get", "other"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := describe(&http.Request{Method: tc.method, URL: u})
		if verb != tc.verb || resource != tc.resource {
			t.Errorf("%s %s = %s %s, want %s %s", tc.method, tc.url, verb, resource, tc.verb, tc.resource)
		}
	}
}
