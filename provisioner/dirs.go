package provisioner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// directories creates, removes and measures volume directories: the
// directory backend's in its shares, the lifecycle pods' on a node's disk.
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

// errOutOfTime stops a walk at its deadline.
var errOutOfTime = errors.New("out of time")

// usage adds up the bytes the files of the directory name in baseDir
// take (their allocated blocks, as du counts them), never following a
// link, until deadline; partial says it stopped there or at what it could
// not read.
func (d directories) usage(baseDir, name string, deadline time.Time) (int64, bool, error) {
	if err := checkDirName(name); err != nil {
		return 0, false, err
	}
	base, err := d.openBase(baseDir)
	if err != nil {
		return 0, false, err
	}
	defer base.Close()
	dir, err := base.OpenRoot(name)
	if err != nil {
		return 0, false, err
	}
	defer dir.Close()
	var total int64
	partial := false
	err = fs.WalkDir(dir.FS(), ".", func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			partial = true
			return nil // an unreadable subtree: count what can be read
		}
		if time.Now().After(deadline) {
			return errOutOfTime
		}
		info, err := e.Info()
		if err != nil {
			partial = true
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	if errors.Is(err, errOutOfTime) {
		return total, true, nil
	}
	return total, partial, err
}

// isCleanAbs reports whether p is absolute and already in the form clean
// gives, so that what an administrator reads in a class is what is used.
func isCleanAbs(p string, isAbs func(string) bool, clean func(string) string) bool {
	return p != "" && isAbs(p) && clean(p) == p && !strings.ContainsRune(p, 0)
}

// within reports whether the clean absolute path p is dir or lies below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}
