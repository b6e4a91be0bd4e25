//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/reclaimable/reclaimable/e2e/framework"
)

const claimsPolicy = "reclaimable-claims-by-annotation"

// An author who may create pods, Jobs and Deployments in a namespace but
// not claims is refused each of them when it asks for claims by
// annotation, with the installation's policy naming the right and the
// annotation; granted create on claims, the same author is admitted and
// the podwatcher makes the claims, for the Deployment's pods too, which
// its ReplicaSet's controller creates. An update that leaves the claim
// annotations as they were is admitted whoever sends it: objects made
// before the policy keep working.
func TestInstallClaimsOnlyForThoseWhoMayCreateClaims(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	author := serviceAccountClient(t, ns, "author", rbacv1.PolicyRule{
		APIGroups: []string{"", "batch", "apps"}, Resources: []string{"pods", "jobs", "deployments"},
		Verbs: []string{"create", "get", "list", "update", "patch"},
	})
	install(t)
	ctx, admin := context.Background(), framework.Client()
	// Made by an administrator, as before the policy: the author may
	// change it but for its claim annotations.
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, annotatedDeployment("earlier", "earlier-cache"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// update changes the Deployment as the author, from its latest
	// version: its controller writes it too.
	update := func(change func(*appsv1.Deployment)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := author.AppsV1().Deployments(ns).Get(ctx, "earlier", metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(d)
			_, err = author.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
	}

	denied := func(err error) bool {
		return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), claimsPolicy)
	}
	create := func(obj runtime.Object, dryRun bool) error {
		opts := metav1.CreateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var err error
		switch o := obj.(type) {
		case *corev1.Pod:
			_, err = author.CoreV1().Pods(ns).Create(ctx, o, opts)
		case *batchv1.Job:
			_, err = author.BatchV1().Jobs(ns).Create(ctx, o, opts)
		case *appsv1.Deployment:
			_, err = author.AppsV1().Deployments(ns).Create(ctx, o, opts)
		}
		return err
	}
	// The API server loads a new policy within moments of its creation; a
	// dry run shows when.
	framework.Eventually(t, 30*time.Second, func(context.Context) (bool, error) {
		return denied(create(annotatedPod("probe", "probe-cache"), true)), nil
	}, "the claims policy to be in force")

	objects := []runtime.Object{annotatedPod("builder", "builder-cache"), annotatedJob("nightly", "nightly-cache"), annotatedDeployment("agents", "agents-cache")}
	for i, obj := range objects {
		err := create(obj, false)
		if i == 0 {
			t.Logf("refused: %v", err)
		}
		if !denied(err) {
			t.Fatalf("%T of an author who may not create claims: %v, want it refused by %s", obj, err, claimsPolicy)
		}
		for _, want := range []string{"may not create persistentvolumeclaims in namespace " + ns, "dynamic-pvc-provisioner.kubernetes.io/cache.enabled"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%T refused with %q, which does not say %q", obj, err, want)
			}
		}
	}
	if err := create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: cachePodSpec("unused")}, false); err != nil {
		t.Fatalf("a pod that asks for no claim: %v", err)
	}

	// The author's changes to what was made before: a label goes through,
	// another claim template does not.
	if err := update(func(d *appsv1.Deployment) { d.Labels = map[string]string{"team": "build"} }); err != nil {
		t.Fatalf("an update that keeps the claim annotations: %v", err)
	}
	err := update(func(d *appsv1.Deployment) {
		d.Spec.Template.Annotations["dynamic-pvc-provisioner.kubernetes.io/cache.pvc"] = claimTemplate("100Gi")
	})
	if !denied(err) {
		t.Fatalf("an update of the claim template by an author who may not create claims: %v, want it refused", err)
	}

	// Granted create on claims, the author is admitted, and the claims
	// are made.
	grant(t, ns, "author", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"create"}})
	framework.Eventually(t, 30*time.Second, func(context.Context) (bool, error) {
		return create(annotatedPod("probe", "probe-cache"), true) == nil, nil
	}, "the author's new right to be seen by the authorizer")
	for _, obj := range objects {
		if err := create(obj, false); err != nil {
			t.Fatalf("%T of an author who may create claims: %v", obj, err)
		}
	}
	framework.StartController(t, "podwatcher", "--controller-id="+framework.Name("claims"), "--namespace="+ns).WaitReady(t)
	for _, claim := range []string{"builder-cache", "nightly-cache", "agents-cache", "earlier-cache"} {
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			return err == nil, nil
		}, "claim "+claim+" to be made")
	}
}

// serviceAccountClient makes a ServiceAccount in ns with a Role of rules
// and returns a client that authenticates with its token.
func serviceAccountClient(t *testing.T, ns, name string, rules ...rbacv1.PolicyRule) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	admin := framework.Client()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grant(t, ns, name, rules...)
	cfg := rest.AnonymousClientConfig(framework.Config())
	cfg.BearerToken = serviceAccountToken(t, ns, name)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// grant gives the ServiceAccount name of ns the rules, in a Role and
// RoleBinding of their own.
func grant(t *testing.T, ns, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	admin := framework.Client()
	role := framework.Name(name)
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimTemplate is a claim annotation's template of size.
func claimTemplate(size string) string {
	return fmt.Sprintf("spec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: %s\n", size)
}

// claimAnnotations ask for a claim for the volume "cache".
func claimAnnotations() map[string]string {
	return map[string]string{
		"dynamic-pvc-provisioner.kubernetes.io/cache.enabled": "true",
		"dynamic-pvc-provisioner.kubernetes.io/cache.pvc":     claimTemplate("1Gi"),
	}
}

// cachePodSpec mounts claim as the volume "cache".
func cachePodSpec(claim string) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
		Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}},
	}
}

func annotatedPod(name, claim string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: claimAnnotations()}, Spec: cachePodSpec(claim)}
}

func annotatedJob(name, claim string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: claimAnnotations()},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: cachePodSpec(claim)}},
	}
}

// annotatedDeployment asks for claims in its pod template: each pod asks.
func annotatedDeployment(name, claim string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	replicas := int32(1)
	spec := cachePodSpec(claim)
	spec.RestartPolicy = corev1.RestartPolicyAlways
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: claimAnnotations()}, Spec: spec},
		},
	}
}
