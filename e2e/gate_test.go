//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/reclaimable/reclaimable/e2e/follow"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// claimsGate holds a pod for the podwatcher, next to a gate of someone
// else's that the podwatcher must leave alone.
var claimsGate = []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: wellknown.ClaimsGate}}

// gatedPod creates a pod that mounts claim as volume "cache", held by gates.
func (e *pwTest) gatedPod(name, claim string, annotations map[string]string, gates []corev1.PodSchedulingGate) *corev1.Pod {
	e.t.Helper()
	spec := pwPodSpec(objects.ClaimVolume("cache", claim))
	spec.SchedulingGates = gates
	pod, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pod
}

// followPod follows pod name from resourceVersion until the test ends.
func (e *pwTest) followPod(name, resourceVersion string) *follow.Follower[*corev1.Pod] {
	e.t.Helper()
	w, err := e.client.CoreV1().Pods(e.ns).Watch(e.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: resourceVersion,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	f := follow.New[*corev1.Pod](w, "pod "+e.ns+"/"+name)
	e.t.Cleanup(f.Stop)
	return f
}

// waitUngated follows a pod until its claims gate is gone and returns the
// versions before and after the write that removed it.
func (e *pwTest) waitUngated(f *follow.Follower[*corev1.Pod], created *corev1.Pod) (before, after *corev1.Pod) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, pwTimeout)
	defer cancel()
	before = created
	for {
		ev, err := f.Next(ctx)
		if err != nil {
			e.t.Fatalf("waiting for the claims gate of pod %s to go: %v", created.Name, err)
		}
		if !follow.Exists(ev) {
			e.t.Fatalf("pod %s deleted while gated", created.Name)
		}
		if !hasClaimsGate(ev.Object) {
			return before, ev.Object
		}
		before = ev.Object
	}
}

func hasClaimsGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == wellknown.ClaimsGate {
			return true
		}
	}
	return false
}

// withoutWriteMarks clears what every write changes, so that two versions of
// a pod compare by their content.
func withoutWriteMarks(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.ResourceVersion, pod.Generation, pod.ManagedFields = "", 0, nil
	return pod
}

func (e *pwTest) waitScheduled(name string) {
	e.t.Helper()
	framework.Eventually(e.t, pwTimeout, func(ctx context.Context) (bool, error) {
		pod, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Spec.NodeName != "", err
	}, "pod "+name+" to be scheduled")
}

// A gated annotated pod is scheduled once its claim exists, and the one
// write of the podwatcher to it removed its gate and changed nothing else,
// another gate included.
func TestGateReleasedOnceTheClaimExists(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	e.retainVolume()
	p := e.startEventDriven()

	pod := e.gatedPod("gated", "gated-cache", pwAnnotations("cache", "true", e.template()), claimsGate)
	versions := e.followPod(pod.Name, pod.ResourceVersion)
	before, after := e.waitUngated(versions, pod)
	e.waitClaim("gated-cache")
	want := withoutWriteMarks(before)
	want.Spec.SchedulingGates = claimsGate[:1]
	if got := withoutWriteMarks(after); !reflect.DeepEqual(got, want) {
		t.Errorf("the write that removed the claims gate changed more than the gate:\nbefore %+v\nafter  %+v", before, after)
	}
	// The counter moves once the patch's response is back in the
	// podwatcher, which may come after the watch has shown the pod ungated.
	const removed = "reclaimable_podwatcher_scheduling_gates_removed_total"
	framework.Eventually(t, pwTimeout, func(context.Context) (bool, error) {
		return p.Metric(removed, nil) >= 1, nil
	}, "the gate's removal to be counted")
	if got := p.Metric(removed, nil); got != 1 {
		t.Errorf("scheduling_gates_removed_total = %v, want 1", got)
	}

	// The other gate is someone else's to remove; then the pod is scheduled.
	if _, err := e.client.CoreV1().Pods(e.ns).Patch(e.ctx, pod.Name, "application/json-patch+json",
		[]byte(`[{"op":"remove","path":"/spec/schedulingGates/0"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitScheduled(pod.Name)
	inv.Check(t, pwTimeout)
}

// A gated pod whose annotation is wrong cannot run: it keeps its gate, and
// gets the same Warning event as an ungated one.
func TestGateKeptForABadAnnotation(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	p := e.startEventDriven()

	pod := e.gatedPod("bad", "bad-cache", pwAnnotations("cache", "maybe", e.template()), []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}})
	e.waitEvent(pod.Name, "InvalidEnabledAnnotation")
	// A well-formed gated pod queued after it is released: the podwatcher
	// has been through the bad one by then.
	good := e.gatedPod("good", "good-cache", pwAnnotations("cache", "true", e.template()), []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}})
	e.waitUngated(e.followPod(good.Name, good.ResourceVersion), good)

	got, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasClaimsGate(got) || got.Spec.NodeName != "" {
		t.Errorf("pod with a bad annotation: gates %v, node %q; want it held", got.Spec.SchedulingGates, got.Spec.NodeName)
	}
	if got := p.Metric("reclaimable_podwatcher_scheduling_gates_removed_total", nil); got != 1 {
		t.Errorf("scheduling_gates_removed_total = %v, want 1 (the good pod's)", got)
	}
}

// A Job's pods carry the gate from its template and are released once the
// Job's claim exists; each pod is scheduled.
func TestGateReleasesAJobsPods(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	e.retainVolume()
	e.startEventDriven()

	spec := pwPodSpec(objects.ClaimVolume("cache", "build-cache"))
	spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}}
	job := e.job("build", pwAnnotations("cache", "true", e.template()), corev1.PodTemplateSpec{Spec: spec})
	e.waitClaim("build-cache")
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
		if err != nil || len(pods.Items) < 2 {
			return false, err
		}
		for _, pod := range pods.Items {
			if hasClaimsGate(&pod) || pod.Spec.NodeName == "" {
				return false, nil
			}
		}
		return true, nil
	}, "the Job's pods to be released and scheduled")
}

// Pods gated while the podwatcher is down are released once it is back.
func TestGateReleasedAfterARestart(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	e.retainVolume()
	p := e.startEventDriven()
	p.Kill()

	annotations := pwAnnotations("cache", "true", e.template())
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("held-%d", i)
		e.gatedPod(name, name+"-cache", annotations, []corev1.PodSchedulingGate{{Name: wellknown.ClaimsGate}})
		names = append(names, name)
	}
	started := time.Now()
	p.Start()
	p.WaitReady(t)
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			pod, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || hasClaimsGate(pod) {
				return false, err
			}
			if _, err := e.getClaim(ctx, name+"-cache"); err != nil {
				return false, err
			}
		}
		return true, nil
	}, "every pod gated while the podwatcher was down to get its claim and lose its gate")
	t.Logf("%d pods gated while the podwatcher was down released %s after it was started", len(names), time.Since(started).Round(time.Millisecond))
}
