package podwatcher

import (
	"slices"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestDecideGate(t *testing.T) {
	reqs := func(names ...string) []claimRequest {
		var out []claimRequest
		for _, n := range names {
			out = append(out, claimRequest{ClaimName: n})
		}
		return out
	}
	existing := func(names ...string) func(string) bool {
		return func(n string) bool { return slices.Contains(names, n) }
	}
	for _, tt := range []struct {
		name        string
		requests    []claimRequest
		rejected    bool
		exists      func(string) bool
		want        gateVerdict
		wantMissing []string
	}{
		{"every claim exists", reqs("a", "b"), false, existing("a", "b"), releaseGate, nil},
		{"one claim missing", reqs("a", "b"), false, existing("a"), awaitClaims, []string{"b"}},
		{"a rejected request keeps the gate", nil, true, existing(), keepGate, nil},
		{"rejected, though the claims exist", reqs("a"), true, existing("a"), keepGate, nil},
		{"no claim asked for", nil, false, existing(), releaseGate, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, missing := decideGate(tt.requests, tt.rejected, tt.exists)
			if got != tt.want || !slices.Equal(missing, tt.wantMissing) {
				t.Errorf("decideGate = %v %v, want %v %v", got, missing, tt.want, tt.wantMissing)
			}
		})
	}
}

func gated(pod *corev1.Pod, gates ...string) *corev1.Pod {
	for _, g := range gates {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return pod
}

// gatePatch returns the body of the pod patch sent, or "".
func (f *fixture) gatePatch() string {
	for _, a := range f.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" {
			return string(p.GetPatch())
		}
	}
	return ""
}

// The gate goes in the sync that creates the claim, without waiting for the
// cache; the patch tests the gate's place and removes that gate only.
func TestGateRemovedOnceTheClaimIsCreated(t *testing.T) {
	pod := gated(annotatedPod("p", "uid-p", ask("cache", "true", validYAML)), "example.com/other", wellknown.ClaimsGate)
	f := newFixture(t, []runtime.Object{pod})
	if err := f.sync(podRef("p")); err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"test","path":"/spec/schedulingGates/1/name","value":"reclaimable.github.io/claims"},{"op":"remove","path":"/spec/schedulingGates/1"}]`
	if got := f.gatePatch(); got != want {
		t.Errorf("patch = %s, want %s", got, want)
	}
	f.expectActions("create persistentvolumeclaims", "patch pods")
	live, err := f.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	if gates := live.(*corev1.Pod).Spec.SchedulingGates; len(gates) != 1 || gates[0].Name != "example.com/other" {
		t.Errorf("gates left = %v, want only the other one", gates)
	}
	if got := f.metric("reclaimable_podwatcher_scheduling_gates_removed_total"); got != 1 {
		t.Errorf("scheduling_gates_removed_total = %v", got)
	}
}

// A pod with a bad annotation keeps its gate and gets its Warning; a pod
// without the gate is never patched; a gated pod that asks for nothing is
// released.
func TestGateKeptOrLeftAlone(t *testing.T) {
	bad := gated(annotatedPod("bad", "uid-bad", ask("cache", "maybe", validYAML)), wellknown.ClaimsGate)
	plain := annotatedPod("plain", "uid-plain", ask("cache", "true", validYAML))
	nothing := gated(annotatedPod("nothing", "uid-nothing", nil), wellknown.ClaimsGate)
	f := newFixture(t, []runtime.Object{bad, plain, nothing})

	if err := f.sync(podRef("bad")); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents("Warning " + ReasonInvalidEnabled)

	if err := f.sync(podRef("plain")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims")

	if err := f.sync(podRef("nothing")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("patch pods")
}

// jobWithGatedPod returns a Job "build" that asks for claim build-cache,
// and one of its pods, gated, without claim annotations of its own.
func jobWithGatedPod() (*batchv1.Job, *corev1.Pod) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "build", UID: "uid-job", Annotations: ask("cache", "true", validYAML)},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVolume("cache", "build-cache")}}}},
	}
	pod := gated(annotatedPod("build-x", "uid-pod", nil), wellknown.ClaimsGate)
	pod.Spec.Volumes = job.Spec.Template.Spec.Volumes
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	return job, pod
}

// A Job's pod waits for the Job's claim, looked for on the API server while
// the cache lacks it, and is queued again when the Job creates it.
func TestJobPodGateWaitsForTheJobsClaim(t *testing.T) {
	job, pod := jobWithGatedPod()
	f := newFixture(t, []runtime.Object{job, pod})

	if err := f.sync(podRef("build-x")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("get persistentvolumeclaims")

	if err := f.sync(ref{kindJob, "ns", "build"}); err != nil {
		t.Fatal(err)
	}
	f.expectActions("create persistentvolumeclaims")
	if n := f.c.queue.Len(); n != 1 {
		t.Fatalf("queued after the Job's claim was created: %d keys, want its gated pod", n)
	}
	if err := f.sync(podRef("build-x")); err != nil {
		t.Fatal(err)
	}
	f.expectActions("patch pods")
}

// A pod held past gateWarnAfter gets one Warning while it waits and one
// when it is released, and the gauges count it.
func TestGateHeldLongIsReported(t *testing.T) {
	job, pod := jobWithGatedPod()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod.CreationTimestamp = metav1.NewTime(created)
	f := newFixture(t, []runtime.Object{job, pod})
	now := created.Add(10 * time.Second)
	clk := testingclock.NewFakeClock(now)
	f.c.useClock(clk)

	if n, oldest := f.c.gatedPods(); n != 1 || oldest != 10*time.Second {
		t.Errorf("gatedPods = %d, %s; want 1, 10s", n, oldest)
	}
	if err := f.sync(podRef("build-x")); err != nil {
		t.Fatal(err)
	}
	f.expectEvents() // a claim may take a few seconds

	// Each sweep finds it held longer: one Warning all the same, counted once.
	for _, at := range []time.Duration{2 * time.Minute, 2*time.Minute + 17*time.Second, 9 * time.Minute} {
		clk.SetTime(created.Add(at))
		if err := f.sync(podRef("build-x")); err != nil {
			t.Fatal(err)
		}
	}
	f.expectEvents("Warning " + ReasonWaitingForClaims)
	if got := f.metric("reclaimable_podwatcher_rejections_total", "reason", ReasonWaitingForClaims); got != 1 {
		t.Errorf("rejections_total{reason=%s} = %v, want 1", ReasonWaitingForClaims, got)
	}

	if err := f.sync(ref{kindJob, "ns", "build"}); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Normal ClaimCreated")
	if err := f.sync(podRef("build-x")); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Warning " + ReasonGateHeldLong)
}

// The claims gate has one name: a gate of another name, however like it,
// is another controller's and stays.
func TestGateRemovedOnlyUnderItsName(t *testing.T) {
	for _, tt := range []struct {
		name  string
		gates []string
		want  string
	}{
		{"beside look-alikes", []string{wellknown.ClaimsGate, "example.com/other", "reclaimable.kubernetes.io/claims"},
			`[{"op":"test","path":"/spec/schedulingGates/0/name","value":"reclaimable.github.io/claims"},{"op":"remove","path":"/spec/schedulingGates/0"}]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := gated(annotatedPod("p", "uid-p", ask("cache", "true", validYAML)), tt.gates...)
			f := newFixture(t, []runtime.Object{pod})
			if err := f.sync(podRef("p")); err != nil {
				t.Fatal(err)
			}
			if got := f.gatePatch(); got != tt.want {
				t.Errorf("patch = %s, want %s", got, tt.want)
			}
		})
	}
}
