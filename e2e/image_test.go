//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/e2e/cluster"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/process"
	"github.com/reclaimable/reclaimable/internal/ociimage"
	"github.com/reclaimable/reclaimable/internal/release"
)

// make image writes the image the manifests and the chart install, of
// VERSION, as one archive holding an OCI index and docker save's
// manifest.json. Imported into the real node with ctr images import, as a
// user loads it, a pod of it runs there with the manifests' pull policy,
// as the image's own non-root user, and says the version. It is the image
// the test bed's lifecycle and scrub pods run.
func TestMakeImageLoadsIntoTheNodeAndRuns(t *testing.T) {
	node := framework.RealNode(t)
	t.Parallel()
	ctx := context.Background()
	version, err := release.Version(process.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	ref := release.Ref(version)
	if cluster.ReclaimableImage != ref {
		t.Fatalf("the test bed's image is %s, want %s", cluster.ReclaimableImage, ref)
	}

	archive := makeImage(t)
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	files := tarFiles(t, b)
	var index struct{ Manifests []ociimage.Descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Errorf("index.json (%v): %s, want one manifest named %s", err, files["index.json"], ref)
	}
	var docker []ociimage.DockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 || strings.Join(docker[0].RepoTags, ",") != ref {
		t.Errorf("manifest.json (%v): %s, want one image tagged %s", err, files["manifest.json"], ref)
	}
	if nodes, err := os.ReadFile(node.ImageArchive()); err != nil || !bytes.Equal(nodes, b) {
		t.Errorf("the archive the node imported at start (%s, %v) is not the one make image writes", node.ImageArchive(), err)
	}

	if err := node.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	ns := framework.Namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "version"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:   []corev1.Toleration{{Key: cluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			// The image's user: the kubelet refuses to start it if the
			// image runs as root.
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "reclaimable", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"--version"},
			}},
		},
	}
	if got := strings.TrimSpace(runToCompletion(t, ns, pod)); got != version {
		t.Errorf("reclaimable --version in the image says %q, want %s", got, version)
	}
}

// makeImage runs make image as a user does and returns the archive.
func makeImage(t *testing.T) string {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "reclaimable.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "image", "IMAGE_ARCHIVE="+archive)
	cmd.Dir = process.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return archive
}

// tarFiles returns the regular files of a tar archive by name.
func tarFiles(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	r := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
	}
}
