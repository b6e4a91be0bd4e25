//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Hostile claim templates, against the three controllers together: each
// ends with a Warning event that says what is wrong, and nothing is created
// or modified that should not be: no claim, no volume, no directory, and
// another tenant's volume untouched.
func TestAdversarialClaimTemplates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := framework.Client()
	ns := framework.Namespace(t)
	id := framework.Name("hostile")
	provisioner := "hostile.reclaimable/" + id
	root := framework.ControllerDir(t)
	class := createDirectoryClass(t, "hostile", id, provisioner,
		map[string]string{"baseDir": root, "hostPath": root, "maxVolumes": "3", "maxCapacity": "1Ti"})
	inv := framework.WatchInvariants(t, framework.Scope{ControllerID: id, Classes: []string{class}, Namespaces: []string{ns}})

	// Another tenant's volume, which a template names in volumeName.
	foreignClass := createRetainClass(t, nil)
	foreign := createHostPathVolume(t, foreignClass, "1Gi", t.TempDir())

	p := framework.StartController(t, "all", "--controller-id="+id, "--provisioner-name="+provisioner,
		"--directory-root="+root, "--namespace="+ns, "--cleanup-interval=2s", "--release-interval=2s")
	p.WaitReady(t)

	claimSpec := func(extra string) string {
		return fmt.Sprintf("spec:\n  storageClassName: %s\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n%s", class, extra)
	}
	pod := func(name string, annotations map[string]string, volumes ...corev1.Volume) error {
		if len(volumes) == 0 {
			volumes = []corev1.Volume{objects.ClaimVolume("cache", name+"-cache")}
		}
		_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
				Volumes:    volumes,
			},
		}, metav1.CreateOptions{})
		return err
	}
	ask := func(volume, template string) map[string]string {
		return map[string]string{wellknown.EnabledKey(volume): "true", wellknown.TemplateKey(volume): template}
	}

	// Refused by the podwatcher: a Warning on the pod, no claim.
	podCases := []struct{ name, reason, template string }{
		{"other-namespace", "ForbiddenNamespace", "metadata:\n  namespace: kube-system\n" + claimSpec("")},
		{"someone-elses-volume", "ForbiddenVolumeName", claimSpec("  volumeName: " + foreign.Name + "\n")},
		{"cross-namespace-source", "ForbiddenDataSource", claimSpec("  dataSourceRef:\n    kind: PersistentVolumeClaim\n    name: data\n    namespace: kube-system\n")},
		{"huge-template", "InvalidClaimTemplate", claimSpec("") + "# " + strings.Repeat("x", 200*1024) + "\n"},
	}
	for _, c := range podCases {
		if err := pod(c.name, ask("cache", c.template)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	// Hundreds of volumes asking for claims on one pod.
	many := map[string]string{}
	var volumes []corev1.Volume
	for i := range 300 {
		v := fmt.Sprintf("v%d", i)
		many[wellknown.EnabledKey(v)] = "true"
		many[wellknown.TemplateKey(v)] = `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`
		volumes = append(volumes, objects.ClaimVolume(v, fmt.Sprintf("many-%d", i)))
	}
	if err := pod("many-volumes", many, volumes...); err != nil {
		t.Fatal(err)
	}
	// A 1 MB annotation never reaches the controllers: the API server
	// refuses the pod, as it refuses any object with more than 256 KiB of
	// annotations.
	if err := pod("megabyte", ask("cache", claimSpec("")+"# "+strings.Repeat("x", 1<<20)+"\n")); err == nil {
		t.Error("the API server accepted a pod with a 1 MB annotation")
	}

	// Accepted by the podwatcher, refused by the provisioner: a Warning on
	// the claim, no volume.
	claimCases := []struct{ name, reason, template string }{
		{"selector", "UnsupportedSelector", claimSpec("  selector:\n    matchLabels:\n      tenant: other\n")},
		{"clone", "UnsupportedDataSource", claimSpec("  dataSource:\n    kind: PersistentVolumeClaim\n    name: selector-cache\n")},
		{"block", "UnsupportedVolumeMode", claimSpec("  volumeMode: Block\n")},
		{"absurd-size", "UnsupportedCapacity", strings.Replace(claimSpec(""), "1Gi", "99999999999999999999999999999Ei", 1)},
		{"over-class-limit", "UnsupportedCapacity", strings.Replace(claimSpec(""), "1Gi", "2Ti", 1)},
	}
	for _, c := range claimCases {
		if err := pod(c.name, ask("cache", c.template)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}

	for _, c := range podCases {
		waitWarning(t, ns, "Pod", c.name, c.reason)
	}
	waitWarning(t, ns, "Pod", "many-volumes", "TooManyVolumes")
	for _, c := range claimCases {
		waitWarning(t, ns, "PersistentVolumeClaim", c.name+"-cache", c.reason)
	}

	// Nothing more happens: no claim but the three the provisioner refused,
	// no volume of the class, no directory, the foreign volume unchanged.
	framework.Consistently(t, 5*time.Second, func(ctx context.Context) (bool, error) {
		claims, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			if c.Spec.VolumeName != "" || !strings.HasSuffix(c.Name, "-cache") {
				return false, fmt.Errorf("claim %s (volume %q) should not exist or be bound", c.Name, c.Spec.VolumeName)
			}
		}
		if len(claims.Items) != len(claimCases) {
			return false, fmt.Errorf("%d claims, want %d", len(claims.Items), len(claimCases))
		}
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, pv := range pvs.Items {
			if pv.Spec.StorageClassName == class {
				return false, fmt.Errorf("volume %s was created", pv.Name)
			}
			if pv.Name == foreign.Name && (pv.Spec.ClaimRef != nil || len(pv.Labels) > 0) {
				return false, fmt.Errorf("the foreign volume was modified: %+v", pv.ObjectMeta)
			}
		}
		entries, err := os.ReadDir(root)
		if err != nil {
			return false, err
		}
		if len(entries) > 0 {
			return false, fmt.Errorf("directories created: %s", filepath.Join(root, entries[0].Name()))
		}
		return true, nil
	}, "no claim, volume or directory beyond what is allowed, and the foreign volume untouched")
	inv.Check(t, 10*time.Second)
}

// waitWarning waits for a Warning event with reason on the named object and
// checks that it says something.
func waitWarning(t *testing.T, ns, kind, name, reason string) {
	t.Helper()
	e := framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: ns, Kind: kind, Name: name, Reason: reason, Type: corev1.EventTypeWarning})
	if e.Message == "" {
		t.Errorf("the %s Warning on %s %s says nothing", reason, kind, name)
	}
	t.Logf("%s %s: %s: %s", kind, name, reason, e.Message)
}
