package provisioner

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/reclaimable/reclaimable/internal/keys"
)

func TestRunLifecycle(t *testing.T) {
	base := t.TempDir()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	create := env(map[string]string{EnvVolumeName: "pvc-1", EnvVolumeMode: "2775"})
	for range 2 { // a second create, after a retry, reuses the directory
		if err := RunLifecycle(LifecycleCreate, base, create); err != nil {
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
		if err := RunLifecycle(LifecycleDelete, base, remove); err != nil {
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
		{"name climbs out", LifecycleCreate, map[string]string{EnvVolumeName: "../etc", EnvVolumeMode: "0777"}, "cannot name a volume directory"},
		{"name empty", LifecycleDelete, map[string]string{}, "cannot name a volume directory"},
		{"mode not octal", LifecycleCreate, map[string]string{EnvVolumeName: "pvc-2", EnvVolumeMode: "rwx"}, EnvVolumeMode},
		{"unknown operation", "resize", map[string]string{EnvVolumeName: "pvc-2"}, "unknown lifecycle operation"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := RunLifecycle(tt.op, base, env(tt.vars))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestOctalMode(t *testing.T) {
	for _, s := range []string{"0777", "0775", "02775", "01777", "04755", "0700"} {
		m, err := directoryMode(map[string]string{paramDirectoryMode: s})
		if err != nil {
			t.Fatal(err)
		}
		if got := octalMode(m); got != s {
			t.Errorf("octalMode(directoryMode(%s)) = %s", s, got)
		}
	}
}

// lifecycleDurations is the provisioner's histogram of lifecycle pods.
func lifecycleDurations(t *testing.T) *prometheus.HistogramVec {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m.lifecycle
}

// startedEvents is a cache of the lifecycle pods on client, running until
// the test ends.
func startedEvents(t *testing.T, client kubernetes.Interface) *lifecycleEvents {
	t.Helper()
	e := newLifecycleEvents(client, "lifecycle")
	if err := e.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

// finish plays the kubelet: once the lifecycle pod exists, it ends it in
// phase with message.
func finish(t *testing.T, client *fake.Clientset, name string, phase corev1.PodPhase, message string) {
	t.Helper()
	go func() {
		ctx := context.Background()
		for {
			p, err := client.CoreV1().Pods("lifecycle").Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				p.Status.Phase = phase
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "lifecycle", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: message},
				}}}
				if _, err := client.CoreV1().Pods("lifecycle").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err == nil {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
}

func TestLifecyclePodsRun(t *testing.T) {
	job := lifecycleJob{op: LifecycleCreate, node: "n1", dir: "/var/lib/caches", volume: "pvc-1", mode: 0o775, size: "1Gi"}
	newPods := func(t *testing.T, timeout time.Duration) (lifecyclePods, *fake.Clientset) {
		client := fake.NewClientset()
		return lifecyclePods{client: client, namespace: "lifecycle", image: "reclaimable:test", timeout: timeout, events: startedEvents(t, client),
			durations: lifecycleDurations(t)}, client
	}
	// timed checks that the pod's run was timed once, with result.
	timed := func(t *testing.T, l lifecyclePods, result string) {
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
		finish(t, client, "create-pvc-1", corev1.PodSucceeded, "")
		if err := l.run(context.Background(), job); err != nil {
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
		if err := l.run(context.Background(), job); err != nil {
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
		finish(t, client, "create-pvc-1", corev1.PodFailed, "no space left on device")
		err := l.run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "failed: no space left on device") || !strings.Contains(err.Error(), "node n1") {
			t.Fatalf("error %v, want the pod's termination message and node", err)
		}
		noPodLeft(t, client)
		timed(t, l, "failed")
	})
	t.Run("deadline", func(t *testing.T) {
		l, client := newPods(t, 50*time.Millisecond)
		err := l.run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "did not finish within 50ms") {
			t.Fatalf("error %v, want the deadline", err)
		}
		noPodLeft(t, client)
		timed(t, l, "deadline")
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
		err := l.run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), "was deleted before it finished") {
			t.Fatalf("error %v, want the pod's deletion", err)
		}
		timed(t, l, "failed")
	})
	t.Run("an earlier attempt's pod is waited for, not doubled", func(t *testing.T) {
		l, client := newPods(t, time.Minute)
		if _, err := client.CoreV1().Pods("lifecycle").Create(context.Background(), l.pod(job), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		finish(t, client, "create-pvc-1", corev1.PodSucceeded, "")
		if err := l.run(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		noPodLeft(t, client)
	})
}

func TestLifecyclePod(t *testing.T) {
	l := lifecyclePods{namespace: "lifecycle", image: "reclaimable:test"}
	p := l.pod(lifecycleJob{op: LifecycleDelete, node: "n1", dir: "/var/lib/caches", volume: "pvc-1", mode: 0o775 | fs.ModeSetgid, size: "1Gi"})
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
	l := lifecyclePods{client: fake.NewClientset(cm, bad), namespace: "lifecycle", image: "reclaimable:test"}
	job := lifecycleJob{op: LifecycleCreate, node: "n1", dir: "/var/lib/caches", volume: "pvc-1", mode: 0o775, size: "1Gi", templates: "quota"}

	p, err := l.podFor(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "create-pvc-1" || p.Namespace != "lifecycle" || p.Spec.NodeName != "n1" || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod %s/%s on %q restart %s: the job's binding lost", p.Namespace, p.Name, p.Spec.NodeName, p.Spec.RestartPolicy)
	}
	if p.Labels["team"] != "storage" || p.Labels[keys.Lifecycle] != LifecycleCreate {
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
		job  lifecycleJob
		want string
	}{
		{"a template without containers", lifecycleJob{op: LifecycleDelete, volume: "pvc-1", templates: "quota"}, "has no container"},
		{"not a pod template", lifecycleJob{op: LifecycleCreate, volume: "pvc-1", templates: "bad"}, "is not a pod template"},
		{"no such ConfigMap", lifecycleJob{op: LifecycleCreate, volume: "pvc-1", templates: "gone"}, "reading the lifecycle templates lifecycle/gone"},
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
	p, err = l.podFor(context.Background(), lifecycleJob{op: LifecycleCreate, volume: "pvc-1", templates: "bad"})
	if err != nil || p.Spec.Containers[0].Image != "reclaimable:test" {
		t.Errorf("pod %v, %v: want the built-in one", p, err)
	}
}
