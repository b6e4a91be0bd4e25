package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/internal/wellknown"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
)

// The directory backend makes each volume a directory in the class's baseDir
// (a share mounted into the provisioner) that consumers reach through a
// hostPath or NFS source. It removes a directory only for a volume with
// reclaim policy Delete: itself, or, where a consumer left what the
// provisioner's user may not remove, through a lifecycle pod.

// Parameters of the directory backend.
const (
	paramBaseDir       = "baseDir"
	paramSource        = "source"
	paramHostPath      = "hostPath"
	paramNFSServer     = "nfsServer"
	paramNFSPath       = "nfsPath"
	paramDirectoryMode = lifecycle.ModeParameter
)

const (
	sourceHostPath = "hostPath"
	sourceNFS      = "nfs"
)

const backendDirectory = "directory"

func init() {
	Register(backendDirectory, func(d Deps) Backend {
		return &directoryBackend{provisioner: d.Provisioner, dirs: lifecycle.Dirs{Root: d.DirectoryRoot}, pods: d.Pods}
	})
}

type directoryBackend struct {
	provisioner string
	dirs        lifecycle.Dirs
	// pods remove what the provisioner's own user may not.
	pods lifecycle.Pods
	// remove is dirs.remove; a test stands in for a user who may not.
	remove func(baseDir, name string) error
}

func (*directoryBackend) Parameters() []string {
	return []string{paramBaseDir, paramSource, paramHostPath, paramNFSServer, paramNFSPath, MaxVolumes, MaxCapacity, paramDirectoryMode, paramLifecycleTemplates}
}

// directoryClass is a validated directory-backend class.
type directoryClass struct {
	provisioner   string
	dirs          lifecycle.Dirs
	baseDir       string // where the volumes' directories are, as the provisioner sees it
	source        string // sourceHostPath or sourceNFS
	hostPath      string // baseDir as nodes see it
	nfsServer     string
	nfsPath       string // baseDir as the NFS server exports it
	directoryMode fs.FileMode
	templates     string // ConfigMap of lifecycle pod templates (scrub), "" for the built-in pods
}

func (b *directoryBackend) ForClass(class *storagev1.StorageClass) (Class, []error) {
	in := class.Parameters
	c := &directoryClass{provisioner: b.provisioner, dirs: b.dirs}
	var errs []error
	c.baseDir = in[paramBaseDir]
	var err error
	if c.templates, err = lifecycle.Templates(in); err != nil {
		errs = append(errs, err)
	}
	switch {
	case c.baseDir == "":
		errs = append(errs, fmt.Errorf("parameter %q is required", paramBaseDir))
	case !lifecycle.IsCleanAbs(c.baseDir, filepath.IsAbs, filepath.Clean):
		errs = append(errs, fmt.Errorf("%s %q must be an absolute path in clean form", paramBaseDir, c.baseDir))
	case !lifecycle.Within(b.dirs.Root, c.baseDir):
		errs = append(errs, fmt.Errorf("%s %q is outside the provisioner's --directory-root %q", paramBaseDir, c.baseDir, b.dirs.Root))
	}

	c.source = in[paramSource]
	switch c.source {
	case sourceHostPath:
		c.hostPath = in[paramHostPath]
		if !lifecycle.IsCleanAbs(c.hostPath, path.IsAbs, path.Clean) {
			errs = append(errs, fmt.Errorf("parameter %q must be an absolute path in clean form with source %q, not %q", paramHostPath, sourceHostPath, c.hostPath))
		}
		for _, name := range []string{paramNFSServer, paramNFSPath} {
			if _, ok := in[name]; ok {
				errs = append(errs, fmt.Errorf("parameter %q is only valid with source %q", name, sourceNFS))
			}
		}
	case sourceNFS:
		c.nfsServer, c.nfsPath = in[paramNFSServer], in[paramNFSPath]
		if c.nfsServer == "" || strings.ContainsAny(c.nfsServer, "/ \t\n") {
			errs = append(errs, fmt.Errorf("parameter %q must be a host name or IP address with source %q, not %q", paramNFSServer, sourceNFS, c.nfsServer))
		}
		if !lifecycle.IsCleanAbs(c.nfsPath, path.IsAbs, path.Clean) {
			errs = append(errs, fmt.Errorf("parameter %q must be an absolute path in clean form with source %q, not %q", paramNFSPath, sourceNFS, c.nfsPath))
		}
		if _, ok := in[paramHostPath]; ok {
			errs = append(errs, fmt.Errorf("parameter %q is only valid with source %q", paramHostPath, sourceHostPath))
		}
	default:
		errs = append(errs, fmt.Errorf("parameter %q must be %q or %q, not %q", paramSource, sourceHostPath, sourceNFS, c.source))
	}

	mode, err := lifecycle.Mode(in)
	if err != nil {
		errs = append(errs, err)
	}
	c.directoryMode = mode
	return c, errs
}

// isMember: a directory pool is what this provisioner created for the class.
func (c *directoryClass) IsMember(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[wellknown.ProvisionedBy] == c.provisioner
}

func (c *directoryClass) SelectorKeys() []string { return nil }

func (c *directoryClass) Maker() (Maker, string) { return c, "" }

func (c *directoryClass) BackingClass() *storagev1.StorageClass { return nil }
func (c *directoryClass) AheadPlacement() Placement             { return PlaceAnywhere }

func (*directoryBackend) Evicts() (EvictionKind, error) { return EvictRemoving, nil }

// usage walks the member's directory through the share the provisioner has
// mounted (measure.go).
func (b *directoryBackend) Usage(pv *corev1.PersistentVolume, deadline time.Time) (int64, bool, error) {
	return b.dirs.Usage(pv.Annotations[wellknown.BaseDir], pv.Annotations[wellknown.Directory], deadline)
}

func (*directoryBackend) Measures() bool { return true }

func (c *directoryClass) Refuse(claim *corev1.PersistentVolumeClaim) (string, error) {
	return refuseUnlessDirectory(backendDirectory, claim)
}

// refuseUnlessDirectory refuses, for a backend whose volumes are
// directories, a claim for a block volume or a volume attributes class.
func refuseUnlessDirectory(backend string, claim *corev1.PersistentVolumeClaim) (string, error) {
	if volumehelpers.CheckVolumeModeMismatches(&claim.Spec, &corev1.PersistentVolumeSpec{}) {
		return reasonUnsupportedVolumeMode, fmt.Errorf("the %s backend makes filesystem volumes only, and no free block volume fits", backend)
	}
	if ptr.Deref(claim.Spec.VolumeAttributesClassName, "") != "" {
		return reasonUnsupportedAttributes, fmt.Errorf("the %s backend has no volume attributes classes, and no free volume of that class fits", backend)
	}
	return "", nil
}

func (c *directoryClass) Create(_ context.Context, v NewVolume) (MadeVolume, error) {
	if err := c.dirs.Create(c.baseDir, v.Name, c.directoryMode); err != nil {
		return MadeVolume{}, err
	}
	return c.Plan(v)
}

func (c *directoryClass) Plan(v NewVolume) (MadeVolume, error) {
	return MadeVolume{Source: c.volumeSource(v.Name), Annotations: wellknown.Map(wellknown.BaseDir, c.baseDir, wellknown.Directory, v.Name)}, nil
}

// delete removes the directory of pv, after checking that the annotations
// and the source agree on which directory that is.
func (b *directoryBackend) Delete(ctx context.Context, pv *corev1.PersistentVolume) (Deletion, error) {
	name, baseDir := pv.Annotations[wellknown.Directory], pv.Annotations[wellknown.BaseDir]
	if name != pv.Name || sourceDirName(pv) != name {
		return StorageRemoved, fmt.Errorf("refusing to delete the data of volume %s: its %s annotation %q does not name the directory its source points at", pv.Name, wellknown.Directory, name)
	}
	remove := b.remove
	if remove == nil {
		remove = b.dirs.Remove
	}
	err := remove(baseDir, name)
	if errors.Is(err, fs.ErrPermission) {
		err = b.removeThroughPod(ctx, pv, baseDir, name, remove, err)
	}
	if err != nil {
		return StorageRemoved, err
	}
	klog.FromContext(ctx).V(2).Info("Deleted the directory of a volume", "pv", pv.Name, "baseDir", baseDir)
	return StorageRemoved, nil
}

// removeThroughPod removes the directory of pv through a delete pod on a
// node that reaches the share. The provisioner runs as a user of its own
// with no capabilities: it may not remove the subdirectories a consumer made
// as another user with the usual modes (0755), nor the files in them. The
// pod, as root, may. Its success is checked, not believed: the provisioner
// removes the directory again, which must then succeed.
func (b *directoryBackend) removeThroughPod(ctx context.Context, pv *corev1.PersistentVolume, baseDir, name string, remove func(string, string) error, denied error) error {
	if !b.pods.Runs() {
		return fmt.Errorf("%w: a consumer left files the provisioner's user may not remove, and without --lifecycle-image or --lifecycle-pod-template it starts no pod that may", denied)
	}
	job := lifecycle.Job{Op: lifecycle.Delete, Volume: name}
	switch {
	case pv.Spec.HostPath != nil:
		job.Dir = path.Dir(pv.Spec.HostPath.Path)
	case pv.Spec.NFS != nil:
		job.Dir, job.NFSServer = path.Dir(pv.Spec.NFS.Path), pv.Spec.NFS.Server
	}
	if pv.Spec.NodeAffinity != nil {
		job.Affinity = pv.Spec.NodeAffinity.Required
	}
	klog.FromContext(ctx).V(2).Info("Removing a volume's directory through a lifecycle pod", "pv", pv.Name, "err", denied)
	if err := b.pods.Run(ctx, job); err != nil {
		return fmt.Errorf("%w; removing it through a lifecycle pod: %w", denied, err)
	}
	if err := remove(baseDir, name); err != nil {
		return fmt.Errorf("the lifecycle pod that removed %s succeeded, yet: %w", filepath.Join(baseDir, name), err)
	}
	return nil
}

// volumeSource points a PersistentVolume at the directory name of c.
func (c *directoryClass) volumeSource(name string) corev1.PersistentVolumeSource {
	if c.source == sourceNFS {
		return corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{
			Server: c.nfsServer,
			Path:   path.Join(c.nfsPath, name),
		}}
	}
	// Directory, not DirectoryOrCreate: on a node where the share is not
	// mounted, the consumer must fail instead of writing to an empty stand-in.
	typ := corev1.HostPathDirectory
	return corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: path.Join(c.hostPath, name),
		Type: &typ,
	}}
}

// sourceDirName is the last element of the path a directory-backed PV points
// at, or "" for other sources.
func sourceDirName(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.HostPath != nil:
		return path.Base(pv.Spec.HostPath.Path)
	case pv.Spec.NFS != nil:
		return path.Base(pv.Spec.NFS.Path)
	}
	return ""
}
