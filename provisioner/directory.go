package provisioner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// directories creates and removes the directories of the directory backend.
// Every path is resolved through an os.Root opened at the root directory, so
// neither "..", nor an absolute name, nor a symbolic link planted by a
// consumer inside a volume can lead anywhere outside it.
type directories struct {
	root string // --directory-root
}

// checkDirName accepts the name of a volume's directory. Names are PV names
// ("pvc-<claim UID>"), never strings a claim chose, and are checked again
// here: a DNS-1123 subdomain has no "/", no "..", no leading dot and no NUL.
func checkDirName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%q cannot name a volume directory: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// openBase opens baseDir (which must lie in the root) as a Root of its own.
func (d directories) openBase(baseDir string) (*os.Root, error) {
	if !filepath.IsAbs(d.root) || !isCleanAbs(baseDir, filepath.IsAbs, filepath.Clean) || !within(d.root, baseDir) {
		return nil, fmt.Errorf("base directory %q is not inside the directory root %q", baseDir, d.root)
	}
	root, err := os.OpenRoot(d.root)
	if err != nil {
		return nil, fmt.Errorf("opening the directory root: %w", err)
	}
	defer root.Close()
	rel, err := filepath.Rel(d.root, baseDir)
	if err != nil {
		return nil, err
	}
	base, err := root.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("opening base directory %q: %w", baseDir, err)
	}
	return base, nil
}

// create makes the directory name in baseDir with mode. It is idempotent: a
// directory left by an earlier attempt for the same volume is reused as it is.
func (d directories) create(baseDir, name string, mode fs.FileMode) error {
	if err := checkDirName(name); err != nil {
		return err
	}
	base, err := d.openBase(baseDir)
	if err != nil {
		return err
	}
	defer base.Close()

	err = base.Mkdir(name, mode.Perm())
	if errors.Is(err, fs.ErrExist) {
		fi, err := base.Lstat(name)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", filepath.Join(baseDir, name))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Join(baseDir, name), err)
	}
	// Mkdir's mode is filtered by the umask and has no setgid or sticky bit;
	// set the whole mode on the open directory, which cannot be swapped for
	// a link meanwhile.
	f, err := base.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("setting mode of %s: %w", filepath.Join(baseDir, name), err)
	}
	return nil
}

// remove deletes the directory name in baseDir and everything in it. A
// directory that is already gone is not an error; a base directory that
// cannot be opened is, since the share may just not be mounted.
func (d directories) remove(baseDir, name string) error {
	if err := checkDirName(name); err != nil {
		return err
	}
	base, err := d.openBase(baseDir)
	if err != nil {
		return err
	}
	defer base.Close()
	if err := base.RemoveAll(name); err != nil {
		return fmt.Errorf("removing %s: %w", filepath.Join(baseDir, name), err)
	}
	return nil
}

// volumeSource points a PersistentVolume at the directory name of p.
func (p *params) volumeSource(name string) corev1.PersistentVolumeSource {
	if p.source == sourceNFS {
		return corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{
			Server: p.nfsServer,
			Path:   path.Join(p.nfsPath, name),
		}}
	}
	// Directory, not DirectoryOrCreate: on a node where the share is not
	// mounted, the consumer must fail instead of writing to an empty stand-in.
	typ := corev1.HostPathDirectory
	return corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: path.Join(p.hostPath, name),
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
