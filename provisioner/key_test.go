package provisioner

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// ownedBy makes a claim an ephemeral volume's: its Pod pod (UID uid) is its
// controller.
func ownedBy(pod, uid string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
}

func labelledClaim(kv ...string) func(*corev1.PersistentVolumeClaim) {
	return func(c *corev1.PersistentVolumeClaim) { c.Labels = wellknown.Map(kv...) }
}

func TestKeyOf(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "runner-x", UID: "pod-uid",
		Labels:      map[string]string{"actions.github.com/scale-set-name": "web", "ci": "from-pod"},
		Annotations: map[string]string{"buildkite.com/pipeline-slug": "my-app", "ci": "not-read"}}}
	for _, tt := range []struct {
		name  string
		label string
		claim *corev1.PersistentVolumeClaim
		want  string
	}{
		{"no keyLabel: no key", "", claimFor("ns", "c", "1Gi", labelledClaim("ci", "a")), ""},
		{"the claim's label", "ci", claimFor("ns", "c", "1Gi", labelledClaim("ci", "a"), ownedBy("runner-x", "pod-uid")), "ci=a"},
		{"the owning pod's label, the claim having none", "actions.github.com/scale-set-name", claimFor("ns", "c", "1Gi", ownedBy("runner-x", "pod-uid")), "actions.github.com/scale-set-name=web"},
		{"an empty value is no key", "ci", claimFor("ns", "c", "1Gi", labelledClaim("ci", "")), ""},
		{"the pod replaced by another of its name: no key", "ci", claimFor("ns", "c", "1Gi", ownedBy("runner-x", "earlier-uid")), ""},
		{"the pod gone: no key", "ci", claimFor("ns", "c", "1Gi", ownedBy("runner-y", "uid-y")), ""},
		{"an owner that is no Pod is not read", "ci", claimFor("ns", "c", "1Gi", func(c *corev1.PersistentVolumeClaim) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tekton.dev/v1", Kind: "PipelineRun", Name: "runner-x", UID: "pod-uid", Controller: ptr.To(true)}}
		}), ""},
		{"neither has the label", "team", claimFor("ns", "c", "1Gi", ownedBy("runner-x", "pod-uid")), ""},
		{"the owning pod's annotation, without the label", "buildkite.com/pipeline-slug", claimFor("ns", "c", "1Gi", ownedBy("runner-x", "pod-uid")), "buildkite.com/pipeline-slug=my-app"},
		{"the claim's annotation before the pod's", "buildkite.com/pipeline-slug", claimFor("ns", "c", "1Gi", ownedBy("runner-x", "pod-uid"), func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{"buildkite.com/pipeline-slug": "team-a/app/main"}
		}), "buildkite.com/pipeline-slug=team-a/app/main"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &provisioner{client: fake.NewClientset(pod)}
			got, err := p.keyOf(context.Background(), tt.claim, tt.label)
			if err != nil || got != tt.want {
				t.Errorf("keyOf = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// A claim of a pool with keyLabel gets the member last used under its key
// before a smaller one of another key, and the member remembers the key.
func TestProvisionIssuesTheMemberOfTheClaimsKey(t *testing.T) {
	claim := claimFor("ns", "generated-1", "1Gi", ownedBy("runner-1", "pod-1"))
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("other-key", "1Gi", returned("ns/generated-0", t0()), keyed("ci=b")),
		volume("own-key", "2Gi", returned("ns/generated-9", t0()), keyed("ci=a")),
	}, claim)
	if _, err := f.client.CoreV1().Pods("ns").Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "runner-1", UID: "pod-1", Labels: map[string]string{"ci": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.provision(f.directoryClass(map[string]string{wellknown.KeyLabel: "ci"}), claim)
	wantIssued(t, err, "own-key")
	if got := f.server("own-key").Annotations[wellknown.LastKey]; got != "ci=a" {
		t.Errorf("last key = %q, want ci=a", got)
	}
}

// Under keyPolicy Require a claim never gets a member last used under
// another key: the pool grows instead, and the new volume carries the key.
// A claim without the key label takes the member used without one.
func TestProvisionRequiresTheClaimsKey(t *testing.T) {
	keyedClaim := claimFor("ns", "generated-1", "1Gi", labelledClaim("ci", "a"))
	plain := claimFor("ns", "plain", "1Gi")
	f := newFixture(t, []*corev1.PersistentVolume{
		volume("other-key", "1Gi", returned("ns/generated-0", t0()), keyed("ci=b")),
		volume("no-key", "1Gi", returned("ns/earlier", t0())),
	}, keyedClaim, plain)
	class := f.directoryClass(map[string]string{wellknown.KeyLabel: "ci", wellknown.KeyPolicy: wellknown.KeyPolicyRequire})

	pv, _, err := f.provision(class, keyedClaim)
	if err != nil || pv == nil {
		t.Fatalf("Provision = %v, %v; want a new volume", pv, err)
	}
	if got := pv.Annotations[wellknown.LastKey]; got != "ci=a" {
		t.Errorf("new volume's last key = %q, want ci=a", got)
	}
	for _, name := range []string{"other-key", "no-key"} {
		if ref := f.server(name).Spec.ClaimRef; ref != nil {
			t.Errorf("member %s issued to %s/%s", name, ref.Namespace, ref.Name)
		}
	}
	_, _, err = f.provision(class, plain)
	wantIssued(t, err, "no-key")
	if got, ok := f.server("no-key").Annotations[wellknown.LastKey]; ok {
		t.Errorf("last key = %q, want none", got)
	}
}
