// Package lifecycle makes, removes and empties volume directories: in a
// pod on the node or share that holds them (Pods, and Run, the command the
// pods run), or in the provisioner's own process (Dirs).
package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Dirs creates, removes and measures volume directories: the
// directory backend's in its shares, the lifecycle pods' on a node's disk.
// Every path is resolved through an os.Root opened at the root directory, so
// neither "..", nor an absolute name, nor a symbolic link planted by a
// consumer inside a volume can lead anywhere outside it.
type Dirs struct {
	Root string // --directory-root
}

// CheckDirName accepts the name of a volume's directory. Names are PV names
// ("pvc-<claim UID>"), never strings a claim chose, and are checked again
// here: a DNS-1123 subdomain has no "/", no "..", no leading dot and no NUL.
func CheckDirName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%q cannot name a volume directory: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// openBase opens baseDir (which must lie in the root) as a Root of its own.
func (d Dirs) openBase(baseDir string) (*os.Root, error) {
	if !filepath.IsAbs(d.Root) || !IsCleanAbs(baseDir, filepath.IsAbs, filepath.Clean) || !Within(d.Root, baseDir) {
		return nil, fmt.Errorf("base directory %q is not inside the directory root %q", baseDir, d.Root)
	}
	root, err := os.OpenRoot(d.Root)
	if err != nil {
		return nil, fmt.Errorf("opening the directory root: %w", err)
	}
	defer root.Close()
	rel, err := filepath.Rel(d.Root, baseDir)
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
func (d Dirs) Create(baseDir, name string, mode fs.FileMode) error {
	if err := CheckDirName(name); err != nil {
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
func (d Dirs) Remove(baseDir, name string) error {
	if err := CheckDirName(name); err != nil {
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
func (d Dirs) Usage(baseDir, name string, deadline time.Time) (int64, bool, error) {
	if err := CheckDirName(name); err != nil {
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

// IsCleanAbs reports whether p is absolute and already in the form clean
// gives, so that what an administrator reads in a class is what is used.
func IsCleanAbs(p string, isAbs func(string) bool, clean func(string) string) bool {
	return p != "" && isAbs(p) && clean(p) == p && !strings.ContainsRune(p, 0)
}

// within reports whether the clean absolute path p is dir or lies below it.
func Within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// ModeParameter is the class parameter of the mode of new volume
// directories (the directory and local backends').
const ModeParameter = "directoryMode"

// DefaultMode is the mode of a new volume directory unless a class says.
const DefaultMode fs.FileMode = 0o777

// Mode is the mode of new volume directories that in (a class's
// parameters) sets, or the default.
func Mode(in map[string]string) (fs.FileMode, error) {
	s, ok := in[ModeParameter]
	if !ok {
		return DefaultMode, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return DefaultMode, fmt.Errorf("parameter %q must be an octal mode such as 0775, not %q", ModeParameter, s)
	}
	return fs.FileMode(n&0o777) | unixModeBits(n), nil
}

// unixModeBits turns the setuid, setgid and sticky bits of an octal mode into
// their fs.FileMode flags.
func unixModeBits(n uint64) fs.FileMode {
	var m fs.FileMode
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
