//go:build e2e

package e2e

// The installation in manifests/, applied to the local control plane as an
// administrator would apply it: the API server validates every manifest,
// enforces the "restricted" Pod Security Standard on the installation's
// namespace, and authorizes each controller through the RBAC the manifests
// grant, nothing more.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
)

const (
	installNamespace   = "reclaimable-system"
	lifecycleNamespace = "reclaimable-lifecycle"
)

// installedControllers are the controllers the base deploys apart, each
// under the ServiceAccount "reclaimable-<controller>".
var installedControllers = []string{"podwatcher", "provisioner", "releaser"}

func manifestsDir() string { return filepath.Join(process.RepoRoot(), "manifests") }

// kubectl runs the cluster's kubectl as an administrator and returns its
// standard output and standard error apart: warnings go to the latter.
func kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, framework.Cluster().Kubectl(), append([]string{"--kubeconfig=" + framework.Kubeconfig()}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String(), err
}

var installed struct {
	once sync.Once
	err  error
}

// install applies manifests/ for real, once per test binary: the Namespace,
// RBAC, the share and the Deployments. Nothing runs the Deployments' pods
// (kwok only pretends), so the Leases stay free for the controllers the
// tests start with the installation's credentials.
func install(t *testing.T) {
	t.Helper()
	installed.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, _, installed.err = kubectl(ctx, "apply", "-k", manifestsDir())
	})
	if installed.err != nil {
		t.Fatalf("installing manifests/: %v", installed.err)
	}
}

// Every manifest passes the API server's validation and admission, with no
// warning: the base, the small-cluster overlay, the NFS component, and the
// examples (which are not part of the installation).
func TestInstallManifestsPassServerValidation(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	ns := framework.Namespace(t)

	// An overlay as an administrator would write one, with the NFS share
	// and the claims gate.
	// The share's volume source cannot change once created, and the
	// installed one is a host path, so the check renames the share's volume
	// and claim.
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, manifestsDir())
	if err != nil {
		t.Fatal(err)
	}
	nfsShare := framework.Name("nfs-share")
	kustomization := fmt.Sprintf(`resources: [%s]
components: [%s, %s]
patches:
  - target: {kind: PersistentVolume, name: reclaimable-share}
    patch: '[{"op": "replace", "path": "/metadata/name", "value": %[4]q}]'
  - target: {kind: PersistentVolumeClaim, name: reclaimable-share}
    patch: '[{"op": "replace", "path": "/metadata/name", "value": %[4]q}]'
`, filepath.ToSlash(filepath.Join(rel, "overlays", "all")), filepath.ToSlash(filepath.Join(rel, "components", "nfs-share")),
		filepath.ToSlash(filepath.Join(rel, "components", "claims-gate")), nfsShare)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"base", []string{"-k", manifestsDir()}, []string{
			"namespace/reclaimable-system", "deployment.apps/reclaimable-podwatcher",
			"deployment.apps/reclaimable-provisioner", "deployment.apps/reclaimable-releaser",
			"clusterrole.rbac.authorization.k8s.io/reclaimable-provisioner", "persistentvolume/reclaimable-share",
			"namespace/reclaimable-lifecycle", "role.rbac.authorization.k8s.io/reclaimable-lifecycle",
			"rolebinding.rbac.authorization.k8s.io/reclaimable-lifecycle",
		}},
		{"overlay all", []string{"-k", filepath.Join(manifestsDir(), "overlays", "all")}, []string{
			"deployment.apps/reclaimable ", "serviceaccount/reclaimable ",
		}},
		{"overlay all with the NFS share and the claims gate", []string{"-k", overlay}, []string{
			"deployment.apps/reclaimable ", "persistentvolume/" + nfsShare + " created",
			"mutatingadmissionpolicy.admissionregistration.k8s.io/reclaimable-claims-gate created",
			"mutatingadmissionpolicybinding.admissionregistration.k8s.io/reclaimable-claims-gate created",
		}},
		{"examples", []string{"-n", ns, "-f", filepath.Join(manifestsDir(), "examples")}, []string{
			"storageclass.storage.k8s.io/reclaimable", "storageclass.storage.k8s.io/reclaimable-local", "storageclass.storage.k8s.io/gp3", "storageclass.storage.k8s.io/build-cache", "pod/build-cache-example", "job.batch/dependency-mirror-sync",
			"podtemplate/ci-agent", "volumepool.reclaimable.github.io/reclaimable", "pod/reuse-1", "pod/reuse-2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := kubectl(ctx, append([]string{"apply", "--dry-run=server"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			// A Pod Security violation in a Deployment's template is only a
			// warning at this point; it must not be there.
			if strings.Contains(stderr, "Warning") {
				t.Errorf("the API server warned:\n%s", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("dry run did not apply %q:\n%s", w, stdout)
				}
			}
		})
	}
}

// The installation's pods are admitted under the enforced "restricted" Pod
// Security Standard and are scheduled, the provisioner's with the share's
// claim bound. Their containers run on a fake node, which reports them
// ready whatever they do: readiness would prove nothing here.
func TestInstallPodsRunUnderRestrictedPodSecurity(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	client := framework.Client()

	nsObj, err := client.CoreV1().Namespaces().Get(ctx, installNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces Pod Security level %q, want restricted", installNamespace, got)
	}
	// Enforcement is live: a pod that is not restricted is refused.
	loose := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "not-restricted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	_, err = client.CoreV1().Pods(installNamespace).Create(ctx, loose, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Fatalf("a pod that is not restricted was not refused by Pod Security admission: %v", err)
	}

	// A Deployment whose pods are not all scheduled fails the test with
	// where they stand.
	defer func() {
		if !t.Failed() {
			return
		}
		pods, err := client.CoreV1().Pods(installNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the installation's pods: %v", err)
			return
		}
		for _, p := range pods.Items {
			t.Logf("pod %s created %s on node %q, phase %s, conditions %+v", p.Name, p.CreationTimestamp.Format(time.RFC3339), p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
	}()
	for _, c := range installedControllers {
		name := "reclaimable-" + c
		framework.Eventually(t, 90*time.Second, func(ctx context.Context) (bool, error) {
			d, err := client.AppsV1().Deployments(installNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want := deref(d.Spec.Replicas, 1)
			if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != want {
				return false, nil
			}
			selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				return false, err
			}
			pods, err := client.CoreV1().Pods(installNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			if err != nil {
				return false, err
			}
			scheduled := int32(0)
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
					scheduled++
				}
			}
			return scheduled == want, nil
		}, "the pods of Deployment "+name+" to be admitted and scheduled")
	}
}

// renderedObjects returns the objects kustomize renders from dir.
func renderedObjects(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	stdout, _, err := kubectl(context.Background(), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, stdout)
}

func decodeObjects(t *testing.T, text string) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			// A kind client-go does not know, such as the CRDs: kept as
			// it is, with its metadata.
			u := &unstructured.Unstructured{}
			if err = yaml.Unmarshal(doc, &u.Object); err == nil {
				obj = u
			}
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		objs = append(objs, obj)
	}
}

// Every Deployment of the base and of the small-cluster overlay runs the
// image as user 65532 with a read-only root filesystem, no capabilities,
// resource requests and limits, probes on the health port, a metrics port
// named for scraping, leader election on, and flags the binary accepts.
func TestInstallDeploymentsAreHardened(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{manifestsDir(), filepath.Join(manifestsDir(), "overlays", "all")} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs := renderedObjects(t, dir)
			serviceAccounts := map[string]bool{}
			var deployments []*appsv1.Deployment
			for _, obj := range objs {
				switch o := obj.(type) {
				case *corev1.ServiceAccount:
					serviceAccounts[o.Name] = true
				case *appsv1.Deployment:
					deployments = append(deployments, o)
				case *storagev1.StorageClass:
					t.Errorf("StorageClass %s is in the installation; examples are not part of it", o.Name)
				case *rbacv1.ClusterRole:
					checkNoWildcards(t, "ClusterRole "+o.Name, o.Rules)
				case *rbacv1.Role:
					checkNoWildcards(t, "Role "+o.Name, o.Rules)
				}
				// The lifecycle pods' Role and its binding alone live in
				// their namespace.
				want := installNamespace
				if name := obj.(metav1.Object).GetName(); name == "reclaimable-lifecycle" {
					want = lifecycleNamespace
				}
				if ns := obj.(metav1.Object).GetNamespace(); ns != "" && ns != want {
					t.Errorf("%T %s is in namespace %s, want %s", obj, obj.(metav1.Object).GetName(), ns, want)
				}
			}
			if len(deployments) == 0 {
				t.Fatal("no Deployment rendered")
			}
			for _, d := range deployments {
				checkDeployment(t, d, serviceAccounts)
			}
		})
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, serviceAccounts map[string]bool) {
	t.Helper()
	spec := d.Spec.Template.Spec
	errorf := func(format string, args ...any) {
		t.Errorf("Deployment %s: "+format, append([]any{d.Name}, args...)...)
	}
	if !serviceAccounts[spec.ServiceAccountName] {
		errorf("runs as ServiceAccount %q, which the manifests do not create", spec.ServiceAccountName)
	}
	if r := deref(d.Spec.Replicas, 1); r < 1 || r > 2 {
		errorf("%d replicas", r)
	}
	psc := spec.SecurityContext
	// The end-to-end tests run every controller as this user and group,
	// with no capability (framework.StartController).
	if psc == nil || !deref(psc.RunAsNonRoot, false) || deref(psc.RunAsUser, 0) != framework.DeployedUID || deref(psc.RunAsGroup, 0) != framework.DeployedGID ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errorf("pod security context %+v: want runAsNonRoot, runAsUser %d and runAsGroup %d as the tests run it, seccomp RuntimeDefault", psc, framework.DeployedUID, framework.DeployedGID)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers, want 1", d.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !strings.HasPrefix(c.Image, "ghcr.io/reclaimable/reclaimable:") {
		errorf("image %q", c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || !deref(sc.ReadOnlyRootFilesystem, false) || deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		errorf("container security context %+v: want a read-only root filesystem, no privilege escalation, all capabilities dropped", sc)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			errorf("%s request %s, limit %s: want both, request <= limit", res, req.String(), lim.String())
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != 8080 || ports["health"] != 8081 {
		errorf("ports %v: want metrics 8080 and health 8081", ports)
	}
	for _, probe := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if probe.probe == nil || probe.probe.HTTPGet == nil || probe.probe.HTTPGet.Path != probe.path || probe.probe.HTTPGet.Port.String() != "health" {
			errorf("%s probe %+v: want GET %s on port health", probe.what, probe.probe, probe.path)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		errorf("no POD_NAMESPACE from the downward API: the Leases would not be in the installation's namespace")
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "MEMORY_LIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	}) {
		errorf("no MEMORY_LIMIT from the downward API's limits.memory: the Go runtime would not know the container's limit")
	}
	if len(c.Command) > 0 {
		errorf("command %v overrides the image's entrypoint", c.Command)
	}
	if len(c.Args) == 0 {
		t.Fatalf("Deployment %s: no args", d.Name)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--leader-elect=") && a != "--leader-elect=true" {
			errorf("%s: leader election must stay on for several replicas", a)
		}
	}
	// The provisioner writes only under --directory-root: the share.
	for _, a := range c.Args {
		root, ok := strings.CutPrefix(a, "--directory-root=")
		if !ok {
			continue
		}
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == root })
		if i < 0 {
			errorf("nothing is mounted at --directory-root %s", root)
			continue
		}
		m := c.VolumeMounts[i]
		j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if j < 0 || spec.Volumes[j].PersistentVolumeClaim == nil || spec.Volumes[j].PersistentVolumeClaim.ClaimName != "reclaimable-share" || m.ReadOnly {
			errorf("--directory-root %s is not the claim reclaimable-share, mounted read-write", root)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && !deref(v.Secret.Optional, false) {
			errorf("Secret %s is required: the pod would not start without it", v.Secret.SecretName)
		}
	}
	// The binary parses exactly these args: --version stops it right after.
	out, err := exec.Command(framework.Binary(), append(containerArgs(t, c, d.Namespace), "--version")...).CombinedOutput()
	if err != nil {
		errorf("reclaimable %s: %v\n%s", strings.Join(c.Args, " "), err, out)
	}
}

// checkNoWildcards fails the test if a rule grants "*": every verb,
// resource and group is spelled out.
func checkNoWildcards(t *testing.T, what string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rules {
		for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups} {
			if slices.Contains(list, "*") {
				t.Errorf("%s grants a wildcard: %+v", what, r)
			}
		}
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("%s grants non-resource URLs: %+v", what, r)
		}
	}
}

// saUser is how the API server names a ServiceAccount of the installation.
func saUser(controller string) string {
	return "system:serviceaccount:" + installNamespace + ":reclaimable-" + controller
}

type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += "/" + a.name
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	} else {
		s += " (all namespaces)"
	}
	return s
}

// can asks the API server's authorizer whether controller's ServiceAccount
// may do a.
func can(ctx context.Context, controller string, a access) (bool, error) {
	resource, subresource, _ := strings.Cut(a.resource, "/") // "volumepools/status"
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   saUser(controller),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + installNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: resource, Subresource: subresource, Namespace: a.namespace, Name: a.name,
		},
	}}
	res, err := framework.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}

func accesses(verbs []string, group, resource, namespace, name string) []access {
	out := make([]access, 0, len(verbs))
	for _, v := range verbs {
		out = append(out, access{v, group, resource, namespace, name})
	}
	return out
}

// Each ServiceAccount may do what its controller needs and nothing the
// other controllers need, and none may read Secrets or write Pods.
func TestInstallServiceAccountsHaveLeastPrivilege(t *testing.T) {
	t.Parallel()
	install(t)
	ctx := context.Background()
	read := []string{"get", "list", "watch"}
	writes := []string{"create", "update", "patch", "delete", "deletecollection"}
	const anyNS, userNS = "", "some-user-namespace"

	type grants struct{ allowed, denied []access }
	common := func(controller string) grants {
		g := grants{
			allowed: slices.Concat(
				accesses([]string{"create"}, "coordination.k8s.io", "leases", installNamespace, ""),
				accesses([]string{"get", "update"}, "coordination.k8s.io", "leases", installNamespace, "reclaimable-"+controller),
				accesses([]string{"create", "patch"}, "", "events", userNS, ""),
			),
			denied: slices.Concat(
				accesses(slices.Concat(read, writes), "", "secrets", anyNS, ""),
				accesses(slices.Concat(read, writes), "", "secrets", installNamespace, ""),
				accesses(slices.Concat(writes, []string{"escalate", "bind"}), "rbac.authorization.k8s.io", "clusterroles", anyNS, ""),
				accesses([]string{"create", "update", "delete", "deletecollection"}, "", "pods", anyNS, ""),
				accesses([]string{"create"}, "", "pods/exec", userNS, ""),
				accesses([]string{"create"}, "", "serviceaccounts/token", installNamespace, ""),
				accesses([]string{"impersonate"}, "", "serviceaccounts", anyNS, ""),
				accesses(writes, "apps", "deployments", installNamespace, ""),
				accesses([]string{"create", "update", "delete"}, "coordination.k8s.io", "leases", "kube-system", ""),
				accesses([]string{"update", "delete"}, "", "events", userNS, ""),
				accesses(writes, "storage.k8s.io", "storageclasses", anyNS, ""),
				accesses(writes, "", "nodes", anyNS, ""),
				accesses(writes, "reclaimable.github.io", "volumepools", anyNS, ""),
			),
		}
		// Another controller's Lease is not this one's to take.
		for _, other := range installedControllers {
			if other != controller {
				g.denied = append(g.denied, accesses([]string{"update", "delete"}, "coordination.k8s.io", "leases", installNamespace, "reclaimable-"+other)...)
			}
		}
		return g
	}
	specific := map[string]grants{
		"podwatcher": {
			allowed: slices.Concat(
				accesses(read, "", "pods", anyNS, ""),
				// Only to remove the claims gate.
				accesses([]string{"patch"}, "", "pods", anyNS, ""),
				accesses(read, "batch", "jobs", anyNS, ""),
				accesses(slices.Concat(read, []string{"create", "delete"}), "", "persistentvolumeclaims", anyNS, ""),
				// Only to record how a claim's owner ended.
				accesses([]string{"patch"}, "", "persistentvolumeclaims", anyNS, ""),
			),
			denied: slices.Concat(
				accesses([]string{"update", "deletecollection"}, "", "persistentvolumeclaims", anyNS, ""),
				accesses(slices.Concat(read, writes), "", "persistentvolumes", anyNS, ""),
				accesses(writes, "batch", "jobs", anyNS, ""),
				accesses(read, "storage.k8s.io", "storageclasses", anyNS, ""),
				accesses(read, "", "nodes", anyNS, ""),
				accesses(read, "reclaimable.github.io", "volumepools", anyNS, ""),
			),
		},
		"releaser": {
			allowed: slices.Concat(
				accesses(slices.Concat(read, []string{"update"}), "", "persistentvolumes", anyNS, ""),
				accesses(read, "", "persistentvolumeclaims", anyNS, ""),
				accesses(read, "storage.k8s.io", "storageclasses", anyNS, ""),
				accesses(read, "reclaimable.github.io", "volumepools", anyNS, ""),
			),
			denied: slices.Concat(
				accesses([]string{"create", "patch", "delete", "deletecollection"}, "", "persistentvolumes", anyNS, ""),
				accesses(writes, "", "persistentvolumeclaims", anyNS, ""),
				accesses(slices.Concat(read, []string{"patch"}), "", "pods", anyNS, ""),
				accesses(read, "batch", "jobs", anyNS, ""),
				accesses(read, "", "nodes", anyNS, ""),
			),
		},
		"provisioner": {
			allowed: slices.Concat(
				accesses(slices.Concat(read, []string{"create", "delete"}), "", "pods", lifecycleNamespace, ""),
				accesses([]string{"get"}, "", "configmaps", lifecycleNamespace, ""),
				accesses([]string{"get"}, "", "podtemplates", lifecycleNamespace, "reclaimable-lifecycle"),
				accesses([]string{"get", "create", "delete"}, "", "persistentvolumeclaims", lifecycleNamespace, ""),
				accesses(slices.Concat(read, []string{"create", "update", "patch", "delete"}), "", "persistentvolumes", anyNS, ""),
				accesses(slices.Concat(read, []string{"update"}), "", "persistentvolumeclaims", anyNS, ""),
				accesses(read, "storage.k8s.io", "storageclasses", anyNS, ""),
				accesses(read, "", "nodes", anyNS, ""),
				accesses(read, "reclaimable.github.io", "volumepools", anyNS, ""),
				accesses([]string{"update"}, "reclaimable.github.io", "volumepools/status", anyNS, ""),
				// The pod that owns a claim, for its cache key (keyLabel).
				accesses([]string{"get"}, "", "pods", anyNS, ""),
			),
			denied: slices.Concat(
				accesses([]string{"deletecollection"}, "", "persistentvolumes", anyNS, ""),
				accesses([]string{"create", "patch", "delete", "deletecollection"}, "", "persistentvolumeclaims", anyNS, ""),
				accesses([]string{"list", "watch", "create", "update", "patch", "delete"}, "", "pods", anyNS, ""),
				accesses([]string{"update", "patch", "deletecollection"}, "", "pods", lifecycleNamespace, ""),
				accesses([]string{"create"}, "", "pods/exec", lifecycleNamespace, ""),
				accesses([]string{"create", "update", "delete"}, "", "configmaps", lifecycleNamespace, ""),
				accesses(slices.Concat(read, []string{"create", "update", "patch", "delete"}), "", "podtemplates", lifecycleNamespace, "other"),
				accesses([]string{"patch", "deletecollection"}, "", "persistentvolumeclaims", lifecycleNamespace, ""),
				accesses([]string{"create"}, "", "pods", installNamespace, ""),
				accesses(read, "batch", "jobs", anyNS, ""),
				accesses([]string{"patch"}, "reclaimable.github.io", "volumepools/status", anyNS, ""),
			),
		},
	}
	// Only the provisioner runs lifecycle pods and writes a pool's status.
	for _, c := range []string{"podwatcher", "releaser"} {
		g := specific[c]
		g.denied = append(g.denied, accesses([]string{"create", "delete"}, "", "pods", lifecycleNamespace, "")...)
		g.denied = append(g.denied, accesses(writes, "reclaimable.github.io", "volumepools/status", anyNS, "")...)
		specific[c] = g
	}

	for _, controller := range installedControllers {
		t.Run(controller, func(t *testing.T) {
			g := common(controller)
			s := specific[controller]
			for _, tc := range []struct {
				want bool
				list []access
			}{{true, slices.Concat(g.allowed, s.allowed)}, {false, slices.Concat(g.denied, s.denied)}} {
				for _, a := range tc.list {
					got, err := can(ctx, controller, a)
					if err != nil {
						t.Fatal(err)
					}
					if got != tc.want {
						t.Errorf("%s may %s: %v, want %v", saUser(controller), a, got, tc.want)
					}
				}
			}
		})
	}
}

// kubeconfigFor writes a kubeconfig that authenticates as controller's
// ServiceAccount with a token from the TokenRequest API, as its pod would.
func kubeconfigFor(t *testing.T, controller string) string {
	t.Helper()
	return kubeconfigIn(t, installNamespace, "reclaimable-"+controller)
}

// kubeconfigIn writes a kubeconfig that authenticates as the ServiceAccount
// serviceAccount of namespace ns, as kubeconfigFor does.
func kubeconfigIn(t *testing.T, ns, serviceAccount string) string {
	t.Helper()
	token := serviceAccountToken(t, ns, serviceAccount)
	admin := framework.Config()
	cluster := &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthority: admin.CAFile, CertificateAuthorityData: admin.CAData}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = cluster
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: serviceAccount}
	cfg.CurrentContext = "local"
	return framework.WriteControllerKubeconfig(t, cfg, framework.ControllerDir(t), ns+"-"+serviceAccount+".kubeconfig")
}

// serviceAccountToken requests an hour's token of the ServiceAccount name
// in ns, as its pod would be given.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	tr, err := framework.Client().CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: newInt64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// noForbidden fails the test if a controller was refused anything.
func noForbidden(t *testing.T, name string, p *framework.Process) {
	t.Helper()
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("%s was refused something: %s", name, line)
		}
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func newInt64(v int64) *int64 { return &v }
