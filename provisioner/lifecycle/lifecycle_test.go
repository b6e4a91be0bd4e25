package lifecycle

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle/lifecycletest"
)

func TestRunLifecycle(t *testing.T) {
	base := t.TempDir()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	create := env(map[string]string{EnvVolumeName: "pvc-1", EnvVolumeMode: "2775"})
	for range 2 { // a second create, after a retry, reuses the directory
		if err := Run(Create, base, create); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(base, "pvc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fs.ModeDir | fs.ModeSetgid | 0o775; fi.Mode() != want {
		t.Errorf("mode %v, want %v", fi.Mode(), want)
	}
	if err := os.WriteFile(filepath.Join(base, "pvc-1", "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	remove := env(map[string]string{EnvVolumeName: "pvc-1"})
	for range 2 { // a directory already gone is no error
		if err := Run(Delete, base, remove); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "pvc-1")); !os.IsNotExist(err) {
		t.Errorf("directory still there after delete: %v", err)
	}

	for _, tt := range []struct {
		name, op string
		vars     map[string]string
		want     string
	}{
		{"name climbs out", Create, map[string]string{EnvVolumeName: "../etc", EnvVolumeMode: "0777"}, "cannot name a volume directory"},
		{"name empty", Delete, map[string]string{}, "cannot name a volume directory"},
		{"mode not octal", Create, map[string]string{EnvVolumeName: "pvc-2", EnvVolumeMode: "rwx"}, EnvVolumeMode},
		{"unknown operation", "resize", map[string]string{EnvVolumeName: "pvc-2"}, "unknown lifecycle operation"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Run(tt.op, base, env(tt.vars))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestOctalMode(t *testing.T) {
	for _, s := range []string{"0777", "0775", "02775", "01777", "04755", "0700"} {
		m, err := Mode(map[string]string{ModeParameter: s})
		if err != nil {
			t.Fatal(err)
		}
		if got := octalMode(m); got != s {
			t.Errorf("octalMode(Mode(%s)) = %s", s, got)
		}
	}
}

// lifecycleDurations is a histogram of lifecycle pods, registered.
func lifecycleDurations(t *testing.T) *prometheus.HistogramVec {
	t.Helper()
	h := NewDurations("provisioner")
	if err := prometheus.NewRegistry().Register(h); err != nil {
		t.Fatal(err)
	}
	return h
}

// startedEvents is a cache of the lifecycle pods on client, running until
// the test ends.
func startedEvents(t *testing.T, client kubernetes.Interface) *Events {
	t.Helper()
	e := NewEvents(client, "lifecycle")
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLifecyclePodsRun(t *testing.T) {
	job := Job{Op: Create, Node: "n1", Dir: "/var/lib/caches", Volume: "pvc-1", Mode: 0o775, Size: "1Gi"}
	newPods := func(t *testing.T, timeout time.Duration) (Pods, *fake.Clientset) {
		client := fake.NewClientset()
		return Pods{client: client, namespace: "lifecycle", image: "reclaimable:test", timeout: timeout, events: startedEvents(t, client),
			durations: lifecycleDurations(t)}, client
	}
	// timed checks that the pod's run was timed once, with result.
	timed := func(t *testing.T, l Pods, result string) {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(l.durations)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range families {
			for _, m := range f.Metric {
				var labels []string
				for _, l := range m.Label {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				got = append(got, fmt.Sprintf("%s %d", strings.Join(labels, ","), m.Histogram.GetSampleCount()))
			}
		}
		if want := []string{"op=create,result=" + result + " 1"}; !slices.Equal(got, want) {
			t.Errorf("lifecycle durations %v, want %v", got, want)
		}
	}
	noPodLeft := func(t *testing.T, client *fake.Clientset) {
		t.Helper()
		pods, err := client.CoreV1().Pods("lifecycle").List(context.Background(), metav1.ListOptions{})
		if err != nil || len(pods.Items) != 0 {
			t.Errorf("lifecycle pods left: %v %v", pods, err)
		}
	}

	t.Run("succeeds", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		lifecycletest.Finish(t, client, "create-pvc-1", corev1.PodSucceeded, "")
		if err := l.Run(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		noPodLeft(t, client)
		timed(t, l, "succeeded")
	})
	t.Run("waits on the cache, not the API server", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		// The kubelet's part: the pod runs for 100 ms, then succeeds. It
		// reads the pod from the cache, so that the client's actions are
		// the provisioner's alone.
		go func() {
			var p *corev1.Pod
			_ = wait.PollUntilContextTimeout(t.Context(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				got, err := l.events.pods.Get("create-pvc-1")
				p = got
				return err == nil, nil
			})
			time.Sleep(100 * time.Millisecond)
			p = p.DeepCopy()
			p.Status.Phase = corev1.PodSucceeded
			_, _ = client.CoreV1().Pods("lifecycle").UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		}()
		if err := l.Run(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		gets := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
				gets++
			}
		}
		// At most one: the pod may not be in the cache right after its
		// creation.
		if gets > 1 {
			t.Errorf("%d reads of the pod from the API server while it ran, want at most 1", gets)
		}
	})
	t.Run("fails with the pod's message", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		lifecycletest.Finish(t, client, "create-pvc-1", corev1.PodFailed, "no space left on device")
		err := l.Run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "failed: no space left on device") || !strings.Contains(err.Error(), "node n1") {
			t.Fatalf("error %v, want the pod's termination message and node", err)
		}
		noPodLeft(t, client)
		timed(t, l, "failed")
	})
	t.Run("deadline", func(t *testing.T) {
		l, client := newPods(t, 50*time.Millisecond)
		err := l.Run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "did not finish within 50ms") {
			t.Fatalf("error %v, want the deadline", err)
		}
		noPodLeft(t, client)
		timed(t, l, "deadline")
		// Not forced: the pod stays until its kubelet has stopped its
		// containers, which may still work on the volume.
		for _, a := range client.Actions() {
			if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.DeleteOptions.GracePeriodSeconds != nil && *d.DeleteOptions.GracePeriodSeconds == 0 {
				t.Errorf("pod %s deleted with grace period 0, want its kubelet to confirm its end", d.Name)
			}
		}
	})
	t.Run("a delete waits for the volume's create pod", func(t *testing.T) {
		l, client := newPods(t, 50*time.Millisecond)
		// The create pod timed out and was deleted, but its kubelet has
		// not confirmed that its container stopped.
		stuck := l.pod(job, image{name: l.image})
		stuck.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		if _, err := client.CoreV1().Pods("lifecycle").Create(context.Background(), stuck, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		del := job
		del.Op = Delete
		err := l.Run(context.Background(), del)
		if err == nil || !strings.Contains(err.Error(), "create-pvc-1") {
			t.Fatalf("error %v, want the delete to wait for the create pod", err)
		}
		if _, err := client.CoreV1().Pods("lifecycle").Get(context.Background(), "delete-pvc-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("delete pod: %v, want none started while the create pod exists", err)
		}
	})
	t.Run("a delete starts once the volume's create pod is gone", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		stuck := l.pod(job, image{name: l.image})
		stuck.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		if _, err := client.CoreV1().Pods("lifecycle").Create(context.Background(), stuck, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Its kubelet confirms the end: the pod goes; the delete pod then
		// runs and succeeds.
		go func() {
			_ = wait.PollUntilContextTimeout(t.Context(), time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				return client.CoreV1().Pods("lifecycle").Delete(ctx, "create-pvc-1", metav1.DeleteOptions{}) == nil, nil
			})
		}()
		lifecycletest.Finish(t, client, "delete-pvc-1", corev1.PodSucceeded, "")
		del := job
		del.Op = Delete
		if err := l.Run(context.Background(), del); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a pod deleted by someone else", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		go func() {
			for {
				if err := client.CoreV1().Pods("lifecycle").Delete(context.Background(), "create-pvc-1", metav1.DeleteOptions{}); err == nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		err := l.Run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "was deleted before it finished") {
			t.Fatalf("error %v, want the pod's deletion", err)
		}
		timed(t, l, "failed")
	})
	t.Run("an earlier attempt's pod is waited for, not doubled", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		if _, err := client.CoreV1().Pods("lifecycle").Create(context.Background(), l.pod(job, image{name: l.image}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		lifecycletest.Finish(t, client, "create-pvc-1", corev1.PodSucceeded, "")
		if err := l.Run(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		noPodLeft(t, client)
	})
}

func TestLifecyclePod(t *testing.T) {
	l := Pods{namespace: "lifecycle", image: "reclaimable:test"}
	p, err := l.podFor(context.Background(), Job{Op: Delete, Node: "n1", Dir: "/var/lib/caches", Volume: "pvc-1", Mode: 0o775 | fs.ModeSetgid, Size: "1Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Spec.Containers[0]; c.Image != "reclaimable:test" || c.ImagePullPolicy != corev1.PullIfNotPresent || len(p.Spec.ImagePullSecrets) != 0 {
		t.Errorf("image %s, pull policy %s, pull secrets %v: want the image given, IfNotPresent, none", c.Image, c.ImagePullPolicy, p.Spec.ImagePullSecrets)
	}
	if p.Spec.NodeName != "n1" || p.Namespace != "lifecycle" || p.Name != "delete-pvc-1" {
		t.Errorf("pod %s/%s on %q", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if hp := p.Spec.Volumes[0].HostPath; hp == nil || hp.Path != "/var/lib/caches" {
		t.Errorf("pod mounts %v, want the node path", p.Spec.Volumes[0])
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	want := map[string]string{EnvVolumeName: "pvc-1", EnvVolumePath: "/var/lib/caches/pvc-1", EnvVolumeMode: "02775", EnvVolumeSize: "1Gi"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if args := strings.Join(p.Spec.Containers[0].Args, " "); args != "lifecycle delete" {
		t.Errorf("args %q", args)
	}
}

func TestLifecyclePodFromTemplates(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "quota"},
		Data: map[string]string{
			"create": `metadata:
  labels: {team: storage}
spec:
  restartPolicy: Always
  containers:
  - name: make
    image: example.com/quota:1
    args: [make-with-quota]
    env: [{name: RECLAIMABLE_VOLUME_NAME, value: chosen-by-the-template}, {name: EXTRA, value: "1"}]
    volumeMounts: [{name: pool, mountPath: /data}]
  volumes: [{name: pool, emptyDir: {}}]
`,
			"delete": "spec: {containers: []}",
		},
	}
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "bad"}, Data: map[string]string{"create": "spec: {containerz: []}"}}
	l := Pods{client: fake.NewClientset(cm, bad), namespace: "lifecycle", image: "reclaimable:test"}
	job := Job{Op: Create, Node: "n1", Dir: "/var/lib/caches", Volume: "pvc-1", Mode: 0o775, Size: "1Gi", Templates: "quota"}

	p, err := l.podFor(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "create-pvc-1" || p.Namespace != "lifecycle" || p.Spec.NodeName != "n1" || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod %s/%s on %q restart %s: the job's binding lost", p.Namespace, p.Name, p.Spec.NodeName, p.Spec.RestartPolicy)
	}
	if p.Labels["team"] != "storage" || p.Labels[wellknown.Lifecycle] != Create {
		t.Errorf("labels %v", p.Labels)
	}
	if c := p.Spec.Containers[0]; c.Image != "example.com/quota:1" || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("container %+v", c)
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[EnvVolumeName] != "pvc-1" || env["EXTRA"] != "1" || env[EnvVolumePath] != "/var/lib/caches/pvc-1" {
		t.Errorf("env %v: the job's variables must win, the template's others stay", env)
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].HostPath == nil || p.Spec.Volumes[0].HostPath.Path != "/var/lib/caches" {
		t.Errorf("volumes %v, want the node path as pool alone", p.Spec.Volumes)
	}

	for _, tt := range []struct {
		name string
		job  Job
		want string
	}{
		{"a template without containers", Job{Op: Delete, Volume: "pvc-1", Templates: "quota"}, "has no container"},
		{"not a pod template", Job{Op: Create, Volume: "pvc-1", Templates: "bad"}, "is not a pod template"},
		{"no such ConfigMap", Job{Op: Create, Volume: "pvc-1", Templates: "gone"}, "reading the lifecycle templates lifecycle/gone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := l.podFor(context.Background(), tt.job); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	// A ConfigMap without the operation's key leaves the built-in pod.
	bad.Data = map[string]string{}
	if _, err := l.client.CoreV1().ConfigMaps("lifecycle").Update(context.Background(), bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err = l.podFor(context.Background(), Job{Op: Create, Volume: "pvc-1", Templates: "bad"})
	if err != nil || p.Spec.Containers[0].Image != "reclaimable:test" {
		t.Errorf("pod %v, %v: want the built-in one", p, err)
	}
}

// The installation's PodTemplate gives the built-in pods their image, pull
// policy and pull secrets, read for each pod; --lifecycle-image overrides
// its image alone; a class's own templates do without it.
func TestLifecyclePodOfTheInstallationsTemplate(t *testing.T) {
	tmpl := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "reclaimable-lifecycle"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
			Containers:       []corev1.Container{{Name: TemplateContainer, Image: "registry.example.com/reclaimable:v1.2.3", ImagePullPolicy: corev1.PullAlways}},
		}},
	}
	noContainer := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "other"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "x"}}}}}
	noImage := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "no-image"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: TemplateContainer}}}}}
	quota := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lifecycle", Name: "quota"},
		Data: map[string]string{Create: "spec: {containers: [{name: make, image: example.com/quota:1}]}"}}
	client := fake.NewClientset(tmpl, noContainer, noImage, quota)
	pods := Pods{client: client, namespace: "lifecycle"}
	job := Job{Op: Create, Node: "n1", Dir: "/var/lib/caches", Volume: "pvc-1"}
	for _, tt := range []struct {
		name, image, template string
		job                   Job
		wantImage             string
		wantPolicy            corev1.PullPolicy
		wantSecrets           []corev1.LocalObjectReference
		wantErr               string
	}{
		{name: "the template's image and secrets", template: "reclaimable-lifecycle", job: job,
			wantImage: "registry.example.com/reclaimable:v1.2.3", wantPolicy: corev1.PullAlways, wantSecrets: tmpl.Template.Spec.ImagePullSecrets},
		{name: "the image given wins", image: "reclaimable:test", template: "reclaimable-lifecycle", job: job,
			wantImage: "reclaimable:test", wantPolicy: corev1.PullAlways, wantSecrets: tmpl.Template.Spec.ImagePullSecrets},
		{name: "a class's template needs none", template: "gone", job: Job{Op: Create, Volume: "pvc-1", Templates: "quota"},
			wantImage: "example.com/quota:1"},
		{name: "no such template", image: "reclaimable:test", template: "gone", job: job, wantErr: "reading the lifecycle pods' PodTemplate lifecycle/gone"},
		{name: "no lifecycle container", template: "other", job: job, wantErr: `has no container "lifecycle"`},
		{name: "no image", template: "no-image", job: job, wantErr: "has no image"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := pods
			l.image = tt.image
			l = l.WithTemplate(tt.template)
			p, err := l.podFor(context.Background(), tt.job)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := p.Spec.Containers[0]
			if c.Image != tt.wantImage || c.ImagePullPolicy != tt.wantPolicy || !slices.Equal(p.Spec.ImagePullSecrets, tt.wantSecrets) {
				t.Errorf("image %s, pull policy %q, pull secrets %v; want %s, %q, %v", c.Image, c.ImagePullPolicy, p.Spec.ImagePullSecrets, tt.wantImage, tt.wantPolicy, tt.wantSecrets)
			}
		})
	}
	// A change to the template reaches the next pod, without a restart.
	tmpl.Template.Spec.Containers[0].Image = "registry.example.com/reclaimable:v1.2.4"
	if _, err := client.CoreV1().PodTemplates("lifecycle").Update(context.Background(), tmpl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.WithTemplate("reclaimable-lifecycle").podFor(context.Background(), job)
	if err != nil || p.Spec.Containers[0].Image != "registry.example.com/reclaimable:v1.2.4" {
		t.Errorf("pod %v, %v: want the template's new image", p, err)
	}
	if !pods.WithTemplate("reclaimable-lifecycle").Runs() || pods.Runs() {
		t.Error("Runs: want true with a template, false with neither image nor template")
	}
}
