package v1alpha1_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// etcdRequestLimit is etcd's default largest request (--max-request-bytes).
// A status is written whole: one that could pass it would stop being
// written, and whatever waits for the write with it.
const etcdRequestLimit = 3 << 19 // 1.5 MiB

// schema is the part of an OpenAPI v3 schema whose largest value is bounded.
type schema struct {
	Type        string            `json:"type"`
	Format      string            `json:"format"`
	Enum        []any             `json:"enum"`
	MaxLength   *int              `json:"maxLength"`
	MaxItems    *int              `json:"maxItems"`
	IntOrString bool              `json:"x-kubernetes-int-or-string"`
	Properties  map[string]schema `json:"properties"`
	Items       *schema           `json:"items"`
	AddtlProps  *schema           `json:"additionalProperties"`
}

// largest is the size of the largest JSON value s admits, in ASCII; at
// names the field, for a message on what has no bound.
func largest(t *testing.T, s schema, at string) int {
	t.Helper()
	switch {
	case s.IntOrString:
		return 64 // a quantity, as the API server serializes it
	case len(s.Enum) > 0:
		n := 0
		for _, v := range s.Enum {
			n = max(n, len(strconv.Quote(v.(string))))
		}
		return n
	}
	switch s.Type {
	case "integer", "number":
		return 20
	case "boolean":
		return 5
	case "string":
		switch {
		case s.Format == "date-time":
			return 32
		case s.MaxLength != nil:
			return *s.MaxLength + 2
		}
		t.Errorf("%s: a string without maxLength", at)
		return 0
	case "array":
		if s.MaxItems == nil {
			t.Errorf("%s: a list without maxItems", at)
			return 0
		}
		return 2 + *s.MaxItems*(largest(t, *s.Items, at+"[]")+1)
	case "object":
		if s.AddtlProps != nil {
			t.Errorf("%s: a map: no bound on its keys", at)
		}
		n := 2
		for name, p := range s.Properties {
			n += len(name) + 4 + largest(t, p, at+"."+name)
		}
		return n
	}
	t.Errorf("%s: type %q has no bound here", at, s.Type)
	return 0
}

// The largest status the CRD admits fits in one etcd request, with room to
// spare for the rest of the object: every list and string of it has a
// maximum, and a field added without one fails here.
func TestTheLargestStatusFitsInARequest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "base", "crd", "reclaimable.github.io_volumepools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatal("the CRD has no version")
	}
	for _, v := range crd.Spec.Versions {
		status, ok := v.Schema.OpenAPIV3Schema.Properties["status"]
		if !ok {
			t.Fatalf("version %s has no status", v.Name)
		}
		if n := largest(t, status, "status"); n > etcdRequestLimit/2 {
			t.Errorf("version %s: the largest status is %d bytes, want at most %d (half of etcd's largest request)", v.Name, n, etcdRequestLimit/2)
		} else {
			t.Logf("version %s: the largest status is %d bytes", v.Name, n)
		}
	}
}
