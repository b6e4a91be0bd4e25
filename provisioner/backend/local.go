package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

// The local backend makes each volume a directory on the disk of the node
// the scheduler chose for the claim's first consumer, through a lifecycle
// pod on that node, and pins the volume to that node: each node has a pool
// of its own within the class. It removes a directory, again through a
// pod, only for a volume with reclaim policy Delete.

const (
	backendLocal            = "local"
	paramNodePath           = "nodePath"
	paramLifecycleTemplates = lifecycle.TemplatesParameter
)

func init() {
	Register(backendLocal, func(d Deps) Backend {
		return &localBackend{provisioner: d.Provisioner, client: d.Client, pods: d.Pods}
	})
}

type localBackend struct {
	// A directory on a node is measured only through a pod: no cheap
	// measure at each return.
	Unmeasured
	provisioner string
	client      kubernetes.Interface
	pods        lifecycle.Pods
}

func (*localBackend) Evicts() (EvictionKind, error) { return EvictRemoving, nil }

func (*localBackend) Parameters() []string {
	return []string{paramNodePath, paramDirectoryMode, paramLifecycleTemplates, MaxVolumes, MaxVolumesPerNode, MaxCapacity}
}

// localClass is a validated local-backend class.
type localClass struct {
	*localBackend
	nodePath      string
	directoryMode fs.FileMode
	templates     string // ConfigMap of lifecycle pod templates, "" for the built-in pods
}

func (b *localBackend) ForClass(class *storagev1.StorageClass) (Class, []error) {
	c := &localClass{localBackend: b, nodePath: class.Parameters[paramNodePath]}
	var errs []error
	if !lifecycle.IsCleanAbs(c.nodePath, path.IsAbs, path.Clean) || c.nodePath == "/" {
		errs = append(errs, fmt.Errorf("parameter %q must be an absolute path in clean form below /, not %q", paramNodePath, c.nodePath))
	}
	mode, err := lifecycle.Mode(class.Parameters)
	if err != nil {
		errs = append(errs, err)
	}
	c.directoryMode = mode
	if c.templates, err = lifecycle.Templates(class.Parameters); err != nil {
		errs = append(errs, err)
	}
	// A volume is made on the node its first consumer runs on: the node
	// must be known when it is made.
	if class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		errs = append(errs, fmt.Errorf("the %s backend needs volumeBindingMode %s: a volume is made on the node of its first consumer", backendLocal, storagev1.VolumeBindingWaitForFirstConsumer))
	}
	if !b.pods.Runs() {
		errs = append(errs, fmt.Errorf("the %s backend runs lifecycle pods, and the provisioner was started without --lifecycle-image or --lifecycle-pod-template", backendLocal))
	}
	return c, errs
}

// isMember: a local pool is what this provisioner created for the class.
func (c *localClass) IsMember(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[wellknown.ProvisionedBy] == c.provisioner
}

func (c *localClass) SelectorKeys() []string { return nil }

func (c *localClass) Maker() (Maker, string) { return c, "" }

func (c *localClass) BackingClass() *storagev1.StorageClass { return nil }

// aheadPlacement: each member on the disk of a node the flow picks.
func (c *localClass) AheadPlacement() Placement { return PlaceOnNode }

// refuse: a directory on one node serves one node's pods, as a filesystem.
func (c *localClass) Refuse(claim *corev1.PersistentVolumeClaim) (string, error) {
	for _, m := range claim.Spec.AccessModes {
		if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
			return reasonUnsupportedAccessMode, fmt.Errorf("a %s volume is on one node and serves %s or %s, not %s; ask for one of those, or use a class of the directory backend on a share", backendLocal, corev1.ReadWriteOnce, corev1.ReadWriteOncePod, m)
		}
	}
	return refuseUnlessDirectory(backendLocal, claim)
}

func (c *localClass) Create(ctx context.Context, v NewVolume) (MadeVolume, error) {
	if v.Node == nil {
		return MadeVolume{}, fmt.Errorf("claim %s has no node selected: the %s backend makes a volume on the node of its first consumer", claimKey(v.Claim), backendLocal)
	}
	if err := lifecycle.CheckDirName(v.Name); err != nil {
		return MadeVolume{}, err
	}
	size := v.Claim.Spec.Resources.Requests[corev1.ResourceStorage]
	job := lifecycle.Job{Op: lifecycle.Create, Node: v.Node.Name, Dir: c.nodePath, Volume: v.Name, Mode: c.directoryMode, Size: size.String(), Templates: c.templates}
	if err := c.pods.Run(ctx, job); err != nil {
		// Whatever the create pod made before it failed goes.
		job.Op = lifecycle.Delete
		if derr := c.pods.Run(ctx, job); derr != nil {
			err = errors.Join(err, fmt.Errorf("and removing what it may have made: %w", derr))
			// A pod past its deadline may still make the directory; one
			// on a node that is gone makes nothing more.
			if _, gerr := c.client.CoreV1().Nodes().Get(ctx, v.Node.Name, metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
				return MadeVolume{}, &StorageMayRemain{err}
			}
		}
		return MadeVolume{}, err
	}
	return c.Plan(v)
}

func (c *localClass) Plan(v NewVolume) (MadeVolume, error) {
	if v.Node == nil {
		return MadeVolume{}, fmt.Errorf("the %s backend makes a volume on a node, and volume %s has none", backendLocal, v.Name)
	}
	annotations := wellknown.Map(wellknown.Node, v.Node.Name, wellknown.NodePath, c.nodePath, wellknown.Directory, v.Name)
	if c.templates != "" {
		annotations[wellknown.LifecycleTemplates] = c.templates
	}
	typ := corev1.HostPathDirectory
	hostname := v.Node.Labels[corev1.LabelHostname]
	if hostname == "" {
		hostname = v.Node.Name
	}
	return MadeVolume{
		Source:      corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path.Join(c.nodePath, v.Name), Type: &typ}},
		Annotations: annotations,
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}}},
		}}}},
	}, nil
}

// delete removes pv's directory through a delete pod on its node, after
// checking that the annotations and the source agree on which directory
// that is. A node that is gone cannot run the pod (lifecycle.NodeGoneError): a volume
// the library deletes stays, with the error as a Warning, for an
// administrator to clean the disk and delete the object; the evictor lets
// its member go.
func (b *localBackend) Delete(ctx context.Context, pv *corev1.PersistentVolume) (Deletion, error) {
	name, node, nodePath := pv.Annotations[wellknown.Directory], pv.Annotations[wellknown.Node], pv.Annotations[wellknown.NodePath]
	if name != pv.Name || pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != path.Join(nodePath, name) || node == "" {
		return StorageRemoved, fmt.Errorf("refusing to delete the data of volume %s: its annotations %s, %s and %s do not name the directory its source points at", pv.Name, wellknown.Node, wellknown.NodePath, wellknown.Directory)
	}
	if _, err := b.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return StorageRemoved, &lifecycle.NodeGoneError{Node: node, Dir: pv.Spec.HostPath.Path,
			Msg: fmt.Sprintf("node %s, which holds the directory of volume %s, is gone: remove %s from its disk if it comes back, then delete the volume", node, pv.Name, pv.Spec.HostPath.Path)}
	}
	if err := b.pods.Run(ctx, lifecycle.Job{Op: lifecycle.Delete, Node: node, Dir: nodePath, Volume: name, Templates: pv.Annotations[wellknown.LifecycleTemplates]}); err != nil {
		return StorageRemoved, err
	}
	klog.FromContext(ctx).V(2).Info("Deleted the directory of a local volume", "pv", pv.Name, "node", node)
	return StorageRemoved, nil
}
