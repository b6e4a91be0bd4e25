package lifecycle

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// A lifecycle pod as it is built: the built-in pod for a job, the image and
// pull secrets of the PodTemplate, and a class's own template over it.

// TemplateContainer is the container of the lifecycle pods' PodTemplate
// whose image they run.
const TemplateContainer = "lifecycle"

// image is what the built-in pods run and with which pull secrets: the
// image given, else that of the PodTemplate, read anew for each pod so that
// a change to it needs no restart.
type image struct {
	name    string
	policy  corev1.PullPolicy
	secrets []corev1.LocalObjectReference
}

func (l Pods) imageOf(ctx context.Context) (image, error) {
	im := image{name: l.image, policy: corev1.PullIfNotPresent}
	if l.template == "" {
		return im, nil
	}
	t, err := l.client.CoreV1().PodTemplates(l.namespace).Get(ctx, l.template, metav1.GetOptions{})
	if err != nil {
		return im, fmt.Errorf("reading the lifecycle pods' PodTemplate %s/%s (--lifecycle-pod-template): %w", l.namespace, l.template, err)
	}
	i := slices.IndexFunc(t.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == TemplateContainer })
	if i < 0 {
		return im, fmt.Errorf("the lifecycle pods' PodTemplate %s/%s has no container %q, whose image they run", l.namespace, l.template, TemplateContainer)
	}
	c := t.Template.Spec.Containers[i]
	if im.name == "" {
		im.name = c.Image
	}
	if im.name == "" {
		return im, fmt.Errorf("the container %q of the lifecycle pods' PodTemplate %s/%s has no image", TemplateContainer, l.namespace, l.template)
	}
	if c.ImagePullPolicy != "" {
		im.policy = c.ImagePullPolicy
	}
	im.secrets = t.Template.Spec.ImagePullSecrets
	return im, nil
}

// WithTimeout is l with each pod given d at most.
func (l Pods) WithTimeout(d time.Duration) Pods {
	l.timeout = d
	return l
}

// Namespace is where the pods run.
func (l Pods) Namespace() string { return l.namespace }

// Job is one operation on one volume's directory.
type Job struct {
	Op, Volume string
	// Node pins the pod to the node that holds the directory; "" leaves
	// the choice to the scheduler, among the nodes Affinity admits (all,
	// if nil): any of them reaches the share.
	Node     string
	Affinity *corev1.NodeSelector
	// Dir holds the volume's directory, as the node (a host path) or the
	// NFS server NFSServer shows it; the pod mounts it.
	Dir, NFSServer string
	Mode           fs.FileMode
	Size           string
	// Templates names the class's ConfigMap of pod templates, "" for none.
	Templates string
	// Claim, for a scrub, names the claim in the pod's namespace through
	// which the pod mounts the volume itself, instead of Dir.
	Claim string
}

// where names the node a job's pod runs on, for messages.
func (j Job) where() string {
	if j.Claim != "" {
		return "a node that mounts it"
	}
	if j.Node == "" {
		return "a node that reaches the share"
	}
	return "node " + j.Node
}

// mount is the pod's volume of the directory that holds the volume's.
func (j Job) mount() corev1.VolumeSource {
	if j.Claim != "" {
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: j.Claim}}
	}
	if j.NFSServer != "" {
		return corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: j.NFSServer, Path: j.Dir}}
	}
	typ := corev1.HostPathDirectory
	return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: j.Dir, Type: &typ}}
}

// podName names the pod of job after its operation and volume, so that a
// retry, or a provisioner restarted meanwhile, finds the pod an earlier
// attempt started instead of starting a second one.
func (j Job) podName() string { return j.Op + "-" + j.Volume }

// pod is the built-in lifecycle pod of job, running im.
func (l Pods) pod(j Job, im image) *corev1.Pod {
	// A pod bound to its node runs there whatever the node's taints: the
	// directory is there. One the scheduler places tolerates the taints
	// that only keep other pods away, not those of a node that is gone.
	tolerations := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	var affinity *corev1.Affinity
	if j.Node == "" {
		tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		if j.Affinity != nil {
			affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: j.Affinity.DeepCopy()}}
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      j.podName(),
			Namespace: l.namespace,
			Labels:    wellknown.Map(wellknown.Lifecycle, j.Op, "app.kubernetes.io/managed-by", "reclaimable"),
		},
		Spec: corev1.PodSpec{
			NodeName:         j.Node,
			Affinity:         affinity,
			RestartPolicy:    corev1.RestartPolicyNever,
			Tolerations:      tolerations,
			ImagePullSecrets: im.secrets,
			Containers: []corev1.Container{{
				Name:            "lifecycle",
				Image:           im.name,
				ImagePullPolicy: im.policy,
				Args:            []string{"lifecycle", j.Op},
				Env: []corev1.EnvVar{
					{Name: EnvVolumeName, Value: j.Volume},
					{Name: EnvVolumePath, Value: path.Join(j.Dir, j.Volume)},
					{Name: EnvVolumeMode, Value: octalMode(j.Mode)},
					{Name: EnvVolumeSize, Value: j.Size},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: lifecycleVolume, MountPath: Mount}},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](0),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "FOWNER", "DAC_OVERRIDE", "FSETID"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: lifecycleVolume, VolumeSource: j.mount()}},
		},
	}
}

// podFor is job's pod: the class's template for the operation if it has
// one, else the built-in pod.
func (l Pods) podFor(ctx context.Context, j Job) (*corev1.Pod, error) {
	tmpl, ok, err := l.classTemplate(ctx, j)
	if err != nil {
		return nil, err
	}
	if ok {
		// The built-in pod gives what binds the pod to the job, not its
		// image.
		return fromTemplate(tmpl, l.pod(j, image{})), nil
	}
	im, err := l.imageOf(ctx)
	if err != nil {
		return nil, err
	}
	return l.pod(j, im), nil
}

// classTemplate is the template for job's operation in its class's
// lifecycleTemplates, if the class names them and they have one.
func (l Pods) classTemplate(ctx context.Context, j Job) (corev1.PodTemplateSpec, bool, error) {
	var tmpl corev1.PodTemplateSpec
	if j.Templates == "" {
		return tmpl, false, nil
	}
	cm, err := l.client.CoreV1().ConfigMaps(l.namespace).Get(ctx, j.Templates, metav1.GetOptions{})
	if err != nil {
		return tmpl, false, fmt.Errorf("reading the lifecycle templates %s/%s (parameter %s): %w", l.namespace, j.Templates, TemplatesParameter, err)
	}
	text, ok := cm.Data[j.Op]
	if !ok {
		return tmpl, false, nil
	}
	if err := yaml.UnmarshalStrict([]byte(text), &tmpl); err != nil {
		return tmpl, false, fmt.Errorf("the %q template of ConfigMap %s/%s is not a pod template: %w", j.Op, l.namespace, j.Templates, err)
	}
	if len(tmpl.Spec.Containers) == 0 {
		return tmpl, false, fmt.Errorf("the %q template of ConfigMap %s/%s has no container", j.Op, l.namespace, j.Templates)
	}
	return tmpl, true, nil
}

// fromTemplate makes a lifecycle pod of an administrator's template: what
// binds it to the job (name, namespace, labels, node, tolerations, no
// restarts, the node path as volume "pool", the job's environment in every
// container) comes from the built-in pod; the rest is the template's.
func fromTemplate(tmpl corev1.PodTemplateSpec, builtin *corev1.Pod) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: builtin.ObjectMeta, Spec: tmpl.Spec}
	pod.Annotations = tmpl.Annotations
	pod.Labels = maps.Clone(tmpl.Labels)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	maps.Copy(pod.Labels, builtin.Labels)
	pod.Spec.NodeName = builtin.Spec.NodeName
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, builtin.Spec.Tolerations...)
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == lifecycleVolume })
	pod.Spec.Volumes = append(pod.Spec.Volumes, builtin.Spec.Volumes...)
	env := builtin.Spec.Containers[0].Env
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cs[i].Env = append(slices.DeleteFunc(cs[i].Env, func(e corev1.EnvVar) bool {
				return slices.ContainsFunc(env, func(b corev1.EnvVar) bool { return b.Name == e.Name })
			}), env...)
			if cs[i].TerminationMessagePolicy == "" {
				cs[i].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
			}
		}
	}
	return pod
}
