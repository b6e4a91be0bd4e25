package podwatcher

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestOutcome(t *testing.T) {
	now := metav1.Now()
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	job := func(conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{Status: batchv1.JobStatus{Conditions: conds}}
	}
	cond := func(typ batchv1.JobConditionType, status corev1.ConditionStatus) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: status}
	}
	for _, tc := range []struct {
		name string
		obj  any
		want string
	}{
		{"pod running", pod(corev1.PodRunning, false), ""},
		{"pod succeeded", pod(corev1.PodSucceeded, false), wellknown.OutcomeSucceeded},
		{"pod failed", pod(corev1.PodFailed, false), wellknown.OutcomeFailed},
		// Its containers may have exited 0 on the deletion's SIGTERM.
		{"pod succeeded once deleted", pod(corev1.PodSucceeded, true), ""},
		{"pod failed once deleted", pod(corev1.PodFailed, true), wellknown.OutcomeFailed},
		{"pod deleted while running", pod(corev1.PodRunning, true), ""},
		{"job running", job(), ""},
		{"job complete", job(cond(batchv1.JobComplete, corev1.ConditionTrue)), wellknown.OutcomeSucceeded},
		{"job success criteria met", job(cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue)), wellknown.OutcomeSucceeded},
		{"job failed", job(cond(batchv1.JobFailed, corev1.ConditionTrue)), wellknown.OutcomeFailed},
		{"job failure target", job(cond(batchv1.JobFailureTarget, corev1.ConditionTrue)), wellknown.OutcomeFailed},
		{"job suspended", job(cond(batchv1.JobSuspended, corev1.ConditionTrue)), ""},
		{"job complete false", job(cond(batchv1.JobComplete, corev1.ConditionFalse)), ""},
		{"not an owner", &corev1.ConfigMap{}, ""},
	} {
		if got := outcome(tc.obj); got != tc.want {
			t.Errorf("%s: outcome = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// An owner that ended writes how on its claims, once, guarded by the
// claim's resourceVersion; other owners' claims are not touched.
func TestOutcomeIsRecordedOnTheOwnersClaims(t *testing.T) {
	succeeded := annotatedPod("built", "uid-built", ask("cache", "true", validYAML))
	succeeded.Status.Phase = corev1.PodSucceeded
	failedJob := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j", UID: "uid-j", Annotations: ask("cache", "true", validYAML)},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("cache", "j-cache")}}}},
		Status:     batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}},
	}
	recorded := annotatedPod("recorded", "uid-recorded", ask("cache", "true", validYAML))
	recorded.Status.Phase = corev1.PodSucceeded
	recordedClaim := managedClaim("recorded-cache", kindPod, "recorded", "uid-recorded")
	recordedClaim.Annotations[wellknown.ConsumerOutcome] = wellknown.OutcomeSucceeded
	running := annotatedPod("running", "uid-running", ask("cache", "true", validYAML))
	running.Status.Phase = corev1.PodRunning
	f := newFixture(t, []runtime.Object{
		succeeded, managedClaim("built-cache", kindPod, "built", "uid-built"),
		failedJob, managedClaim("j-cache", kindJob, "j", "uid-j"),
		recorded, recordedClaim,
		running, managedClaim("running-cache", kindPod, "running", "uid-running"),
	})
	for _, k := range []ref{podRef("built"), {kindJob, "ns", "j"}, podRef("recorded"), podRef("running")} {
		if err := f.sync(k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	f.expectActions("patch persistentvolumeclaims", "patch persistentvolumeclaims")
	for claim, want := range map[string]string{"built-cache": wellknown.OutcomeSucceeded, "j-cache": wellknown.OutcomeFailed, "running-cache": ""} {
		c, err := f.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Annotations[wellknown.ConsumerOutcome]; got != want {
			t.Errorf("claim %s: outcome %q, want %q", claim, got, want)
		}
	}
	f.expectEvents()
}

// A claim changed since the cache saw it is not written blind: the sync
// fails and is retried from a newer cache.
func TestOutcomeConflictIsRetried(t *testing.T) {
	pod := annotatedPod("built", "uid-built", ask("cache", "true", validYAML))
	pod.Status.Phase = corev1.PodSucceeded
	f := newFixture(t, []runtime.Object{pod, managedClaim("built-cache", kindPod, "built", "uid-built")})
	var sent string
	f.client.PrependReactor("patch", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sent = string(a.(k8stesting.PatchAction).GetPatch())
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "built-cache", nil)
	})
	if err := f.sync(podRef("built")); err == nil {
		t.Error("sync succeeded, want an error to retry")
	}
	if want := `{"metadata":{"annotations":{"` + wellknown.ConsumerOutcome + `":"Succeeded"},"resourceVersion":"7"}}`; sent != want {
		t.Errorf("patch = %s, want %s", sent, want)
	}
}
