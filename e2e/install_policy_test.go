//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const podwatcherPolicy = "reclaimable-podwatcher-pod-writes"

// podwatcherClient is a client with the podwatcher's own token, as the
// installation gives it.
func podwatcherClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, "podwatcher"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// deniedBy tells whether err is the refusal of the admission policy named
// policy.
func deniedBy(policy string) func(error) bool {
	return func(err error) bool {
		return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), policy)
	}
}

// The podwatcher may patch pods, which RBAC cannot narrow to a field: the
// installation's ValidatingAdmissionPolicy refuses every write of its
// ServiceAccount to a pod but the removal of the claims gate. Each write
// below is one that a pod update may make, sent with the podwatcher's own
// token.
func TestInstallPodwatcherMayOnlyRemoveItsGate(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	ns := framework.Namespace(t)
	podwatcher := podwatcherClient(t)
	pod, err := framework.Client().CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Labels: map[string]string{"app": "build"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{
			Containers:      []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: wellknown.ClaimsGate}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string, dryRun bool) error {
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := podwatcher.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.JSONPatchType, []byte(body), opts)
		return err
	}
	denied := deniedBy(podwatcherPolicy)
	// The API server loads a new policy within moments of its creation; a
	// dry run shows when, without changing the pod.
	framework.Eventually(t, 30*time.Second, func(context.Context) (bool, error) {
		return denied(patch(`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`, true)), nil
	}, "the podwatcher's pod policy to be in force")

	for _, tc := range []struct{ what, patch string }{
		{"add a label", `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`},
		{"change an annotation", `[{"op":"replace","path":"/metadata/annotations/a","value":"c"}]`},
		{"add a finalizer", `[{"op":"add","path":"/metadata/finalizers","value":["example.com/keep"]}]`},
		{"change an image", `[{"op":"replace","path":"/spec/containers/0/image","value":"busybox:evil"}]`},
		{"add a toleration", `[{"op":"add","path":"/spec/tolerations/-","value":{"operator":"Exists"}}]`},
		{"set a deadline", `[{"op":"add","path":"/spec/activeDeadlineSeconds","value":1}]`},
		{"select a node", `[{"op":"add","path":"/spec/nodeSelector","value":{"kubernetes.io/hostname":"elsewhere"}}]`},
		{"remove another gate", `[{"op":"remove","path":"/spec/schedulingGates/0"}]`},
		{"remove every gate", `[{"op":"remove","path":"/spec/schedulingGates"}]`},
		{"remove its gate and add a label", `[{"op":"remove","path":"/spec/schedulingGates/1"},{"op":"add","path":"/metadata/labels/x","value":"y"}]`},
	} {
		if err := patch(tc.patch, false); !denied(err) {
			t.Errorf("the podwatcher could %s: %v", tc.what, err)
		}
	}
	got, err := framework.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != pod.ResourceVersion {
		t.Errorf("the pod changed (version %s, was %s): %+v", got.ResourceVersion, pod.ResourceVersion, got)
	}

	// What the podwatcher sends to release a pod.
	if err := patch(`[{"op":"test","path":"/spec/schedulingGates/1/name","value":"`+wellknown.ClaimsGate+`"},{"op":"remove","path":"/spec/schedulingGates/1"}]`, false); err != nil {
		t.Fatalf("the podwatcher could not remove its gate: %v", err)
	}
	got, err = framework.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gates := got.Spec.SchedulingGates; len(gates) != 1 || gates[0].Name != "example.com/other" {
		t.Errorf("gates after the podwatcher's patch: %v, want only example.com/other", gates)
	}
}

const podwatcherClaimPolicy = "reclaimable-podwatcher-claim-writes"

// The podwatcher may patch claims only to record how their owner ended:
// the installation's policy refuses every other write of its
// ServiceAccount to a claim, and a second outcome.
func TestInstallPodwatcherMayOnlyRecordAnOutcome(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	ns := framework.Namespace(t)
	podwatcher := podwatcherClient(t)
	claim, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctx, objects.NewClaim(ns, "cache", "none", "1Mi", func(c *corev1.PersistentVolumeClaim) {
		c.Labels = map[string]string{"app": "build"}
		c.Annotations = map[string]string{"a": "b"}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string, dryRun bool) error {
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := podwatcher.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim.Name, types.MergePatchType, []byte(body), opts)
		return err
	}
	denied := deniedBy(podwatcherClaimPolicy)
	framework.Eventually(t, 30*time.Second, func(context.Context) (bool, error) {
		return denied(patch(`{"metadata":{"labels":{"x":"y"}}}`, true)), nil
	}, "the podwatcher's claim policy to be in force")

	outcome := func(v string) string { return `"` + wellknown.ConsumerOutcome + `":"` + v + `"` }
	for _, tc := range []struct{ what, patch string }{
		{"add a label", `{"metadata":{"labels":{"x":"y"}}}`},
		{"change an annotation", `{"metadata":{"annotations":{"a":"c"}}}`},
		{"remove an annotation", `{"metadata":{"annotations":{"a":null}}}`},
		{"add another annotation", `{"metadata":{"annotations":{"x":"y"}}}`},
		{"record an outcome and another annotation", `{"metadata":{"annotations":{` + outcome("Succeeded") + `,"x":"y"}}}`},
		{"record an outcome of its own", `{"metadata":{"annotations":{` + outcome("Maybe") + `}}}`},
		{"add a finalizer", `{"metadata":{"finalizers":["example.com/keep"]}}`},
		{"add an owner", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"0a0a0a0a-0000-0000-0000-000000000000"}]}}`},
		{"bind the claim to a volume", `{"spec":{"volumeName":"someone-elses"}}`},
	} {
		if err := patch(tc.patch, false); !denied(err) {
			t.Errorf("the podwatcher could %s: %v", tc.what, err)
		}
	}

	// What the podwatcher sends when a claim's owner succeeded; then it
	// may not change its mind.
	if err := patch(`{"metadata":{"resourceVersion":"`+claim.ResourceVersion+`","annotations":{`+outcome("Succeeded")+`}}}`, false); err != nil {
		t.Fatalf("the podwatcher could not record an outcome: %v", err)
	}
	if err := patch(`{"metadata":{"annotations":{`+outcome("Failed")+`}}}`, false); !denied(err) {
		t.Errorf("the podwatcher could change a recorded outcome: %v", err)
	}
	got, err := framework.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[wellknown.ConsumerOutcome] != wellknown.OutcomeSucceeded || got.Annotations["a"] != "b" || len(got.Labels) != 1 {
		t.Errorf("the claim after the podwatcher's writes: labels %v, annotations %v", got.Labels, got.Annotations)
	}
}

const outcomePolicy = "reclaimable-consumer-outcome"

// The releaser spares a volume its scrub (onRelease ScrubUnlessSucceeded)
// by the outcome recorded on its claim: no claim may be made with one, and
// no one but the podwatcher (or a cluster administrator) may set, change or
// remove it, not even a user who may write every claim of the namespace.
func TestInstallOnlyThePodwatcherRecordsAnOutcome(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	ns := framework.Namespace(t)
	// A user who may write every claim of the namespace.
	claims := serviceAccountClient(t, ns, "editor", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"},
		Verbs: []string{"get", "create", "update", "patch"}}).CoreV1().PersistentVolumeClaims(ns)
	outcome := `{"metadata":{"annotations":{"` + wellknown.ConsumerOutcome + `":"` + wellknown.OutcomeSucceeded + `"}}}`
	denied := deniedBy(outcomePolicy)
	withOutcome := func(c *corev1.PersistentVolumeClaim) {
		c.Annotations = map[string]string{wellknown.ConsumerOutcome: wellknown.OutcomeSucceeded}
		c.Labels = map[string]string{wellknown.ClaimManagedBy: "reclaimable"}
	}
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := claims.Create(ctx, objects.NewClaim(ns, "probe", "none", "1Mi", withOutcome), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return denied(err), nil
	}, "the outcome policy to be in force")

	if _, err := claims.Create(ctx, objects.NewClaim(ns, "preset", "none", "1Mi", withOutcome), metav1.CreateOptions{}); !denied(err) {
		t.Errorf("a claim labelled as the podwatcher's was created with an outcome: %v", err)
	}
	// Present but empty is present: the podwatcher would record no other.
	if _, err := claims.Create(ctx, objects.NewClaim(ns, "empty", "none", "1Mi", func(c *corev1.PersistentVolumeClaim) {
		c.Annotations = map[string]string{wellknown.ConsumerOutcome: ""}
	}), metav1.CreateOptions{}); !denied(err) {
		t.Errorf("a claim was created with an empty outcome: %v", err)
	}
	claim, err := claims.Create(ctx, objects.NewClaim(ns, "cache", "none", "1Mi"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Patch(ctx, claim.Name, types.MergePatchType, []byte(outcome), metav1.PatchOptions{}); !denied(err) {
		t.Errorf("a user recorded an outcome: %v", err)
	}

	// Recorded by the podwatcher, it stays as it is.
	if _, err := podwatcherClient(t).CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim.Name, types.MergePatchType, []byte(outcome), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the podwatcher could not record an outcome: %v", err)
	}
	for _, tc := range []struct{ what, patch string }{
		{"change", `{"metadata":{"annotations":{"` + wellknown.ConsumerOutcome + `":"` + wellknown.OutcomeFailed + `"}}}`},
		{"remove", `{"metadata":{"annotations":{"` + wellknown.ConsumerOutcome + `":null}}}`},
	} {
		if _, err := claims.Patch(ctx, claim.Name, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{}); !denied(err) {
			t.Errorf("a user could %s a recorded outcome: %v", tc.what, err)
		}
	}
	// Anything else of the claim a user may still change.
	if _, err := claims.Patch(ctx, claim.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling a claim with an outcome: %v", err)
	}
}
