package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// A controller's client names it as the field manager of its creates,
// updates and patches, leaves a field manager given by the caller as it is,
// and adds nothing to reads and deletes.
func TestClientForNamesTheControllerAsFieldManager(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // method -> fieldManager
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method] = r.URL.Query().Get("fieldManager")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}`))
	}))
	defer srv.Close()
	env := &Env{Config: &rest.Config{Host: srv.URL}}
	client, err := env.ClientFor("releaser")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps("ns")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "by-hand"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "c", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "c", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = cms.Delete(ctx, "c", metav1.DeleteOptions{})
	want := map[string]string{
		http.MethodPost: "reclaimable-releaser", http.MethodPut: "by-hand", http.MethodPatch: "reclaimable-releaser",
		http.MethodGet: "", http.MethodDelete: "",
	}
	mu.Lock()
	defer mu.Unlock()
	for method, manager := range want {
		if got, ok := seen[method]; !ok || got != manager {
			t.Errorf("%s sent fieldManager %q (sent: %v), want %q", method, got, ok, manager)
		}
	}
}
