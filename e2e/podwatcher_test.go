//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// The podwatcher tests run their controller with --namespace, so that each
// only sees its own namespace, and with their own controller ID.

const pwTimeout = 30 * time.Second

type pwTest struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	ns     string
	id     string
	class  string
}

func newPWTest(t *testing.T) *pwTest {
	t.Helper()
	return &pwTest{
		t:      t,
		ctx:    context.Background(),
		client: framework.Client(),
		ns:     framework.Namespace(t),
		id:     framework.Name("pw"),
		class:  framework.Name("pw-retain"),
	}
}

// watchInvariants checks the product's invariants on this test's claims
// and owners. Volumes are left out of scope: no releaser runs here, so a
// Retain volume rightly stays Released.
func (e *pwTest) watchInvariants() *framework.Invariants {
	return framework.WatchInvariants(e.t, framework.Scope{ControllerID: e.id, Namespaces: []string{e.ns}})
}

// start runs the podwatcher for this test's namespace and waits until it is ready.
func (e *pwTest) start(args ...string) *framework.Process {
	e.t.Helper()
	p := framework.StartController(e.t, append([]string{"podwatcher", "--controller-id=" + e.id, "--namespace=" + e.ns}, args...)...)
	p.WaitReady(e.t)
	return p
}

// retainVolume creates this test's StorageClass (once) and one Retain
// hostPath volume of it, which the real PV controller binds to a claim.
func (e *pwTest) retainVolume() *corev1.PersistentVolume {
	e.t.Helper()
	_, err := e.client.StorageV1().StorageClasses().Create(e.ctx, objects.NewClass(e.class, "kubernetes.io/no-provisioner"), metav1.CreateOptions{})
	switch {
	case err == nil:
		e.t.Cleanup(func() {
			_ = e.client.StorageV1().StorageClasses().Delete(context.Background(), e.class, metav1.DeleteOptions{})
		})
	case !apierrors.IsAlreadyExists(err):
		e.t.Fatal(err)
	}
	name := framework.Name("pw-pv")
	return framework.CreateVolume(e.t, objects.NewVolume(name, e.class, "1Gi", "/tmp/"+name))
}

// template is a claim template for this test's class, in YAML.
func (e *pwTest) template() string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  labels:
    from-template: "yes"
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`, e.class)
}

func pwAnnotations(volume, enabled, template string) map[string]string {
	a := map[string]string{wellknown.EnabledKey(volume): enabled}
	if template != "" {
		a[wellknown.TemplateKey(volume)] = template
	}
	return a
}

func pwPodSpec(volumes ...corev1.Volume) corev1.PodSpec {
	spec := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
		Volumes:       volumes,
	}
	for _, v := range volumes {
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	return spec
}

// job creates a Job of two pods from template, its claim annotations on
// the Job itself.
func (e *pwTest) job(name string, annotations map[string]string, template corev1.PodTemplateSpec) *batchv1.Job {
	e.t.Helper()
	parallelism := int32(2)
	job, err := e.client.BatchV1().Jobs(e.ns).Create(e.ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       batchv1.JobSpec{Parallelism: &parallelism, Completions: &parallelism, Template: template},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return job
}

// pod creates a pod that mounts claim as volume "cache".
func (e *pwTest) pod(name, claim string, annotations map[string]string) *corev1.Pod {
	e.t.Helper()
	pod, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       pwPodSpec(objects.ClaimVolume("cache", claim)),
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pod
}

func (e *pwTest) getClaim(ctx context.Context, name string) (*corev1.PersistentVolumeClaim, error) {
	return e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
}

// waitClaim waits until claim name exists and returns it.
func (e *pwTest) waitClaim(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	var claim *corev1.PersistentVolumeClaim
	framework.Eventually(e.t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		claim = c
		return err == nil, err
	}, "claim "+name+" to exist")
	return claim
}

// waitClaimGone waits until no claim of that name and UID exists.
func (e *pwTest) waitClaimGone(name string, uid types.UID) {
	e.t.Helper()
	framework.Eventually(e.t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && c.UID != uid, err
	}, "claim "+name+" to be deleted")
}

func (e *pwTest) waitPodGone(name string) {
	e.t.Helper()
	framework.Eventually(e.t, pwTimeout, func(ctx context.Context) (bool, error) {
		_, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, "pod "+name+" to be gone")
}

// events lists the events about object name with reason.
func (e *pwTest) events(ctx context.Context, name, reason string) ([]corev1.Event, error) {
	list, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitEvent waits for an event about name with reason and returns it.
func (e *pwTest) waitEvent(name, reason string) corev1.Event {
	e.t.Helper()
	return framework.WaitEvent(e.t, pwTimeout, framework.EventQuery{Namespace: e.ns, Name: name, Reason: reason})
}

// managedClaims lists the claims this test's controller manages.
func (e *pwTest) managedClaims(ctx context.Context) ([]corev1.PersistentVolumeClaim, error) {
	list, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{LabelSelector: wellknown.ClaimManagedBy + "=" + e.id})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitDeletedByPodwatcher waits until claim is gone, deleted by the
// podwatcher p itself: with a Normal ClaimDeleted event naming pod's UID,
// and counted as its one delete.
func (e *pwTest) waitDeletedByPodwatcher(p *framework.Process, claim *corev1.PersistentVolumeClaim, pod *corev1.Pod) {
	e.t.Helper()
	e.waitClaimGone(claim.Name, claim.UID)
	event := e.waitEvent(claim.Name, "ClaimDeleted")
	if event.Type != corev1.EventTypeNormal || !strings.Contains(event.Message, string(pod.UID)) {
		e.t.Errorf("ClaimDeleted event = %s %q, want Normal naming the pod's UID", event.Type, event.Message)
	}
	if got := p.Metric("reclaimable_podwatcher_claims_deleted_total", nil); got != 1 {
		e.t.Errorf("claims_deleted_total = %v, want 1", got)
	}
}

// A bare Pod gets its claim with the labels, the ownerReference and the
// template's fields; the claim binds to a Retain volume through the real PV
// controller, the pod runs, and the claim goes when the pod goes: deleted
// by the garbage collector, through the ownerReference, with no delete and
// no event from the podwatcher.
func TestPodwatcherPodClaimLifecycle(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	pv := e.retainVolume()
	p := e.start()

	pod := e.pod("builder", "builder-cache", pwAnnotations("cache", "true", e.template()))
	claim := e.waitClaim("builder-cache")

	if got := claim.Labels[wellknown.ClaimManagedBy]; got != e.id {
		t.Errorf("managed-by = %q, want %q", got, e.id)
	}
	if got := claim.Labels[wellknown.ClaimedBy]; got != string(pod.UID) {
		t.Errorf("claimed-by = %q, want the pod's UID %q", got, pod.UID)
	}
	if claim.Labels["from-template"] != "yes" {
		t.Errorf("template label missing: %v", claim.Labels)
	}
	if n := len(claim.OwnerReferences); n != 1 {
		t.Fatalf("ownerReferences = %v", claim.OwnerReferences)
	}
	ref := claim.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != pod.Name || ref.UID != pod.UID || ref.Controller == nil || !*ref.Controller {
		t.Errorf("ownerReference = %+v", ref)
	}
	if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != e.class {
		t.Errorf("storageClassName = %v, want %s", claim.Spec.StorageClassName, e.class)
	}
	e.waitEvent(pod.Name, "ClaimCreated")

	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, claim.Name)
		if err != nil {
			return false, err
		}
		return c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName == pv.Name, nil
	}, "the claim to bind to "+pv.Name)
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	}, "the pod to run")
	if got := p.Metric("reclaimable_podwatcher_claims_created_total", nil); got != 1 {
		t.Errorf("claims_created_total = %v, want 1", got)
	}

	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitClaimGone(claim.Name, claim.UID)
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		got, err := e.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.VolumeReleased, err
	}, "the volume to be Released")
	e.expectNoClaimDelete(p, claim.Name)
	inv.Check(t, pwTimeout)
}

// expectNoClaimDelete checks that the podwatcher p sent no DELETE of a claim
// and recorded no ClaimDeleted event on claim: the garbage collector did it.
// Events are written asynchronously, hence a few seconds of watching.
func (e *pwTest) expectNoClaimDelete(p *framework.Process, claim string) {
	e.t.Helper()
	framework.Consistently(e.t, 3*time.Second, func(ctx context.Context) (bool, error) {
		events, err := e.events(ctx, claim, "ClaimDeleted")
		if err != nil {
			return false, err
		}
		if len(events) > 0 {
			return false, fmt.Errorf("ClaimDeleted event on %s: %q", claim, events[0].Message)
		}
		_, body, err := p.Get(ctx, p.MetricsAddr, "/metrics")
		if err != nil {
			return false, err
		}
		if deletes := grepLines(grepLines(body, `resource="persistentvolumeclaims"`), `verb="delete"`); deletes != "" {
			return false, fmt.Errorf("the podwatcher sent claim deletes: %s", deletes)
		}
		return true, nil
	}, "the podwatcher leaves the claim to the garbage collector")
	if got := p.Metric("reclaimable_podwatcher_claims_deleted_total", nil); got != 0 {
		e.t.Errorf("claims_deleted_total = %v, want 0", got)
	}
}

// startEventDriven starts the podwatcher with a sweep and a garbage
// collection grace far longer than the test's waits, so that whatever it
// does within them was set off by an event.
func (e *pwTest) startEventDriven() *framework.Process {
	return e.start("--cleanup-interval=1h", "--garbage-collection-grace=1h")
}

// When the owner is deleted with propagationPolicy Orphan, the garbage
// collector keeps the claim and strips its ownerReference; the podwatcher
// alone must then find the owner gone and delete the claim, at once: on the
// owner's delete event or the claim's update, not at a sweep or after the
// grace, both an hour away.
func TestPodwatcherDeletesClaimOfOrphaningDelete(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	p := e.startEventDriven()

	pod := e.pod("orphaner", "orphaner-cache", pwAnnotations("cache", "true", e.template()))
	claim := e.waitClaim("orphaner-cache")
	orphan := metav1.DeletePropagationOrphan
	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	e.waitDeletedByPodwatcher(p, claim, pod)
	inv.Check(t, pwTimeout)
}

// A claim that someone gave a second owner outlives its pod's background
// delete: the garbage collector keeps it for the live owner and only strips
// the pod's ownerReference, after the pod is gone. That update is what
// tells the podwatcher, which had left the claim to the collector, to
// delete it; its sweep and grace are an hour away.
func TestPodwatcherDeletesClaimWhenCollectorStripsReference(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	p := e.startEventDriven()

	pod := e.pod("shared", "shared-cache", pwAnnotations("cache", "true", e.template()))
	claim := e.waitClaim("shared-cache")
	other, err := e.client.CoreV1().ConfigMaps(e.ns).Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q},`+
		`{"op":"add","path":"/metadata/ownerReferences/-","value":{"apiVersion":"v1","kind":"ConfigMap","name":%q,"uid":%q}}]`,
		claim.ResourceVersion, other.Name, other.UID)
	if _, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Patch(e.ctx, claim.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDeletedByPodwatcher(p, claim, pod)
	inv.Check(t, pwTimeout)
}

// A claim deleted while its pod still waits for it is created again.
func TestPodwatcherRecreatesClaimDeletedWhileWanted(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	e.start()

	// No volume of the class exists: the claim stays Pending, the pod waits.
	pod := e.pod("waiter", "waiter-cache", pwAnnotations("cache", "true", e.template()))
	first := e.waitClaim("waiter-cache")
	if err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, first.Name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && c.UID != first.UID && c.Labels[wellknown.ClaimedBy] == string(pod.UID), err
	}, "the claim to be created again")
}

// A Job asks for one claim, shared by its pods (even when the pod template
// repeats the annotations), owned by the Job, kept while the finished Job
// exists and deleted with it. The Job is deleted with the API's default for
// batch/v1 Jobs (orphaning its pods), so the garbage collector only strips
// the ownerReference and the podwatcher alone deletes the claim, promptly
// (its sweep and grace are an hour).
func TestPodwatcherJobClaim(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	pv := e.retainVolume()
	e.startEventDriven()

	annotations := pwAnnotations("cache", "true", e.template())
	job := e.job("build", annotations, corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
		Spec:       pwPodSpec(objects.ClaimVolume("cache", "build-cache")),
	})
	claim := e.waitClaim("build-cache")
	ref := claim.OwnerReferences
	if len(ref) != 1 || ref[0].APIVersion != "batch/v1" || ref[0].Kind != "Job" || ref[0].Name != job.Name || ref[0].UID != job.UID ||
		claim.Labels[wellknown.ClaimedBy] != string(job.UID) {
		t.Fatalf("claim %s: ownerReferences %+v, labels %v; want the Job's", claim.Name, ref, claim.Labels)
	}

	// Both pods exist and use the one claim; no pod got a claim of its own.
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
		return err == nil && len(pods.Items) >= 2, err
	}, "the Job's pods")
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, claim.Name)
		return err == nil && c.Spec.VolumeName == pv.Name && c.Status.Phase == corev1.ClaimBound, err
	}, "the Job's claim to bind")
	framework.Consistently(t, 3*time.Second, func(ctx context.Context) (bool, error) {
		claims, err := e.managedClaims(ctx)
		return err == nil && len(claims) == 1 && claims[0].UID == claim.UID, err
	}, "the Job has exactly one claim")

	// A finished Job keeps its claim until the Job itself is deleted.
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		j, err := e.client.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}, "the Job to complete")
	if c, err := e.getClaim(e.ctx, claim.Name); err != nil || c.UID != claim.UID || c.DeletionTimestamp != nil {
		t.Fatalf("the claim of a finished Job that still exists must stay: %v, %v", c, err)
	}

	if err := e.client.BatchV1().Jobs(e.ns).Delete(e.ctx, job.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The orphaned pods of the finished Job still reference the claim, so
	// in-use protection keeps it Terminating until they are gone too.
	e.waitEvent(claim.Name, "ClaimDeleted")
	framework.Eventually(t, pwTimeout, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, claim.Name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && c.DeletionTimestamp != nil, err
	}, "the claim to be deleted")
	if err := e.client.CoreV1().Pods(e.ns).DeleteCollection(e.ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name}); err != nil {
		t.Fatal(err)
	}
	e.waitClaimGone(claim.Name, claim.UID)
	inv.Check(t, pwTimeout)
}

// Every malformed request is a Warning event on its owner with its own
// reason, and no claim is made for it. A well-formed pod in the same
// namespace gets its claim, which shows that the controller was working.
func TestPodwatcherRejectsBadAnnotations(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	p := e.start("--cleanup-interval=1s")

	good := e.template()
	emptyDir := corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	cases := []struct {
		name        string
		reason      string
		annotations map[string]string
		volume      *corev1.Volume // default: "cache" mounting claim <name>-cache
	}{
		{"bad-bool", "InvalidEnabledAnnotation", pwAnnotations("cache", "yes please", good), nil},
		{"no-template", "MissingClaimTemplate", pwAnnotations("cache", "true", ""), nil},
		{"bad-yaml", "InvalidClaimTemplate", pwAnnotations("cache", "true", "spec: [oops\n"), nil},
		{"bad-json", "InvalidClaimTemplate", pwAnnotations("cache", "true", `{"spec": {"storageClassName": }`), nil},
		{"unknown-field", "InvalidClaimTemplate", pwAnnotations("cache", "true", "spec:\n  storageClass: x\n"), nil},
		{"not-a-claim", "NotAPersistentVolumeClaim", pwAnnotations("cache", "true", "apiVersion: v1\nkind: ConfigMap\ndata: {}\n"), nil},
		{"several-docs", "MultipleDocuments", pwAnnotations("cache", "true", good+"---\n"+good), nil},
		{"missing-volume", "VolumeNotFound", pwAnnotations("data", "true", good), nil},
		{"volume-not-claim", "VolumeNotAClaim", pwAnnotations("cache", "true", good), &emptyDir},
		{"other-namespace", "ForbiddenNamespace", pwAnnotations("cache", "true", "metadata:\n  namespace: kube-system\n"+strings.SplitN(good, "metadata:\n", 2)[1]), nil},
		{"volume-name", "ForbiddenVolumeName", pwAnnotations("cache", "true", good+"  volumeName: someone-elses-volume\n"), nil},
		{"cross-ns-source", "ForbiddenDataSource", pwAnnotations("cache", "true",
			good+"  dataSourceRef:\n    kind: PersistentVolumeClaim\n    name: secret-data\n    namespace: kube-system\n"), nil},
		// Well-formed but refused by the API server's own validation.
		{"api-refused", "ClaimRejected", pwAnnotations("cache", "true", "spec:\n  accessModes: [ReadWriteOnce]\n"), nil},
	}
	for _, c := range cases {
		volume := objects.ClaimVolume("cache", c.name+"-cache")
		if c.volume != nil {
			volume = *c.volume
		}
		_, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Annotations: c.annotations},
			Spec:       pwPodSpec(volume),
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	e.pod("well-formed", "well-formed-cache", pwAnnotations("cache", "true", good))

	for _, c := range cases {
		event := e.waitEvent(c.name, c.reason)
		if event.Type != corev1.EventTypeWarning || event.Message == "" || event.InvolvedObject.Kind != "Pod" {
			t.Errorf("%s: event %s %s %q on %s", c.name, event.Type, event.Reason, event.Message, event.InvolvedObject.Kind)
		}
		t.Logf("%s: %s: %s", c.name, event.Reason, event.Message)
	}
	e.waitClaim("well-formed-cache")

	// Each rejection was decided in the sync that recorded it; later syncs
	// (pod updates, sweeps every second) must not change the decision.
	framework.Consistently(t, 3*time.Second, func(ctx context.Context) (bool, error) {
		claims, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			if c.Name != "well-formed-cache" {
				return false, fmt.Errorf("unexpected claim %s", c.Name)
			}
		}
		return len(claims.Items) == 1, nil
	}, "only the well-formed pod has a claim")

	// Each problem was reported once, not on every pod update.
	for _, c := range cases {
		events, err := e.events(e.ctx, c.name, c.reason)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].Count > 1 {
			t.Errorf("%s: %d events (%+v); want one, recorded once", c.name, len(events), events)
		}
	}
	if got := p.Metric("reclaimable_podwatcher_rejections_total", map[string]string{"reason": "MultipleDocuments"}); got != 1 {
		t.Errorf("rejections_total{reason=MultipleDocuments} = %v, want 1", got)
	}
	inv.Check(t, pwTimeout)
}

func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// A claim that exists before the pod asks for it and is not ours is used
// as it is: never labelled, adopted or deleted, also after the pod is gone
// and through several sweeps.
func TestPodwatcherLeavesForeignClaimAlone(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	e.start("--cleanup-interval=1s")

	class := e.class
	foreign, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared-cache", Labels: map[string]string{"owner": "someone"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := e.pod("user", "shared-cache", pwAnnotations("cache", "true", e.template()))
	event := e.waitEvent(pod.Name, "ClaimExists")
	if event.Type != corev1.EventTypeNormal {
		t.Errorf("ClaimExists event type = %s", event.Type)
	}

	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPodGone(pod.Name)
	framework.Consistently(t, 4*time.Second, func(ctx context.Context) (bool, error) {
		c, err := e.getClaim(ctx, foreign.Name)
		if err != nil {
			return false, err
		}
		_, managed := c.Labels[wellknown.ClaimManagedBy]
		_, claimed := c.Labels[wellknown.ClaimedBy]
		return c.UID == foreign.UID && c.DeletionTimestamp == nil && !managed && !claimed && len(c.OwnerReferences) == 0, nil
	}, "the foreign claim stays as it was")
	inv.Check(t, pwTimeout)
}

// The controller is killed and restarted while annotated pods come and go
// (some deleted with propagationPolicy Orphan, so that only the podwatcher
// can remove their claims). In the end every pod has its claim and no
// claim outlives its pod.
func TestPodwatcherRestartsWhilePodsComeAndGo(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	inv := e.watchInvariants()
	p := e.start("--cleanup-interval=2s")
	annotations := pwAnnotations("cache", "true", e.template())
	orphan := metav1.DeletePropagationOrphan
	background := metav1.DeletePropagationBackground

	var live []string
	next := 0
	create := func() {
		name := fmt.Sprintf("churn-%d", next)
		next++
		e.pod(name, name+"-cache", annotations)
		live = append(live, name)
	}
	remove := func() {
		name := live[0]
		live = live[1:]
		policy := &background
		if next%2 == 0 {
			policy = &orphan
		}
		if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{PropagationPolicy: policy}); err != nil {
			t.Fatal(err)
		}
	}

	for round := range 4 {
		for range 3 {
			create()
		}
		remove()
		if round%2 == 0 {
			// Let it make some claims before the crash.
			e.waitClaim(live[len(live)-1] + "-cache")
		}
		p.Kill()
		// While it is down.
		create()
		remove()
		p.Start()
		create()
		remove()
	}
	p.WaitReady(t)

	lastProblem := ""
	problem := func(format string, args ...any) (bool, error) {
		if msg := fmt.Sprintf(format, args...); msg != lastProblem {
			t.Log(msg)
			lastProblem = msg
		}
		return false, nil
	}
	framework.Eventually(t, 90*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claims, err := e.managedClaims(ctx)
		if err != nil {
			return false, err
		}
		podUIDs := map[string]bool{}
		for _, pod := range pods.Items {
			podUIDs[string(pod.UID)] = true
		}
		claimFor := map[string]bool{}
		for _, c := range claims {
			if !podUIDs[c.Labels[wellknown.ClaimedBy]] {
				return problem("claim %s of a gone pod remains", c.Name) // a leak, unless still being cleaned up
			}
			claimFor[c.Labels[wellknown.ClaimedBy]] = true
		}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil && !claimFor[string(pod.UID)] {
				return problem("pod %s has no claim", pod.Name)
			}
		}
		return true, nil
	}, "every pod to have its claim and no claim to outlive its pod")

	if len(live) != 8 {
		t.Fatalf("test bookkeeping: %d live pods, want 8", len(live))
	}
	for _, name := range live {
		pod, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.getClaim(e.ctx, name+"-cache")
		if err != nil || c.Labels[wellknown.ClaimedBy] != string(pod.UID) {
			t.Errorf("pod %s: claim %v, err %v", name, c, err)
		}
	}
	inv.Check(t, pwTimeout)
}
