package provisioner

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Keys this provisioner writes and reads, in addition to the shared ones in
// internal/keys.
const (
	// PoolLabel puts a PersistentVolume into the static pool of the
	// StorageClass it names (the PV's storageClassName must name it too).
	PoolLabel = "reclaimable.kubernetes.io/pool"

	// annBackend, annBaseDir and annDirectory record on a PersistentVolume
	// what the directory backend created, so that Delete needs neither the
	// StorageClass (which may be gone or changed by then) nor any guess.
	annBackend   = "reclaimable.kubernetes.io/backend"
	annBaseDir   = "reclaimable.kubernetes.io/base-dir"
	annDirectory = "reclaimable.kubernetes.io/directory"

	// annIssuedAt is the RFC 3339 time a volume was last issued to a claim.
	annIssuedAt = "reclaimable.kubernetes.io/issued-at"
)

// Names of the StorageClass parameters.
const (
	paramBackend       = "backend"
	paramSelectorKeys  = "selectorKeys"
	paramBaseDir       = "baseDir"
	paramSource        = "source"
	paramHostPath      = "hostPath"
	paramNFSServer     = "nfsServer"
	paramNFSPath       = "nfsPath"
	paramMaxVolumes    = "maxVolumes"
	paramMaxCapacity   = "maxCapacity"
	paramDirectoryMode = "directoryMode"
)

const (
	backendDirectory = "directory"
	backendStatic    = "static"

	sourceHostPath = "hostPath"
	sourceNFS      = "nfs"

	defaultDirectoryMode fs.FileMode = 0o777
)

// params is a validated StorageClass configuration.
type params struct {
	backend string
	// selectorKeys are the label keys a claim's selector may use.
	selectorKeys sets.Set[string]

	// The directory backend.
	baseDir       string // where the volumes' directories are, as the provisioner sees it
	source        string // sourceHostPath or sourceNFS
	hostPath      string // baseDir as nodes see it
	nfsServer     string
	nfsPath       string             // baseDir as the NFS server exports it
	maxVolumes    int                // 0: no limit
	maxCapacity   *resource.Quantity // nil: no limit beyond what a volume can hold
	directoryMode fs.FileMode
}

// allowedParams lists the parameters each backend understands.
var allowedParams = map[string][]string{
	backendStatic:    {paramBackend, paramSelectorKeys},
	backendDirectory: {paramBackend, paramSelectorKeys, paramBaseDir, paramSource, paramHostPath, paramNFSServer, paramNFSPath, paramMaxVolumes, paramMaxCapacity, paramDirectoryMode},
}

// parseParameters validates the parameters of class. directoryRoot is the
// directory every baseDir must lie in. All problems are reported at once, so
// that an administrator fixes a class in one go.
func parseParameters(class *storagev1.StorageClass, directoryRoot string) (*params, error) {
	in := class.Parameters
	p := &params{backend: in[paramBackend], selectorKeys: sets.New[string](), directoryMode: defaultDirectoryMode}
	allowed, ok := allowedParams[p.backend]
	if !ok {
		return nil, fmt.Errorf("parameter %q must be %q or %q, not %q", paramBackend, backendDirectory, backendStatic, p.backend)
	}

	var errs []error
	for _, name := range sortedKeys(in) {
		if !slices.Contains(allowed, name) {
			errs = append(errs, fmt.Errorf("unknown parameter %q for backend %q (known: %s)", name, p.backend, strings.Join(allowed, ", ")))
		}
	}
	if s, ok := in[paramSelectorKeys]; ok {
		for _, key := range strings.Split(s, ",") {
			key = strings.TrimSpace(key)
			if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a label key: %s", paramSelectorKeys, key, strings.Join(msgs, "; ")))
				continue
			}
			p.selectorKeys.Insert(key)
		}
	}
	if class.ReclaimPolicy != nil && *class.ReclaimPolicy == corev1.PersistentVolumeReclaimRecycle {
		errs = append(errs, errors.New("reclaimPolicy Recycle is not supported; use Retain to keep volumes in the pool or Delete to remove them"))
	}

	if p.backend == backendDirectory {
		errs = append(errs, p.parseDirectory(in, directoryRoot)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

func (p *params) parseDirectory(in map[string]string, directoryRoot string) []error {
	var errs []error
	p.baseDir = in[paramBaseDir]
	switch {
	case p.baseDir == "":
		errs = append(errs, fmt.Errorf("parameter %q is required", paramBaseDir))
	case !isCleanAbs(p.baseDir, filepath.IsAbs, filepath.Clean):
		errs = append(errs, fmt.Errorf("%s %q must be an absolute path in clean form", paramBaseDir, p.baseDir))
	case !within(directoryRoot, p.baseDir):
		errs = append(errs, fmt.Errorf("%s %q is outside the provisioner's --directory-root %q", paramBaseDir, p.baseDir, directoryRoot))
	}

	p.source = in[paramSource]
	switch p.source {
	case sourceHostPath:
		p.hostPath = in[paramHostPath]
		if !isCleanAbs(p.hostPath, path.IsAbs, path.Clean) {
			errs = append(errs, fmt.Errorf("parameter %q must be an absolute path in clean form with source %q, not %q", paramHostPath, sourceHostPath, p.hostPath))
		}
		for _, name := range []string{paramNFSServer, paramNFSPath} {
			if _, ok := in[name]; ok {
				errs = append(errs, fmt.Errorf("parameter %q is only valid with source %q", name, sourceNFS))
			}
		}
	case sourceNFS:
		p.nfsServer, p.nfsPath = in[paramNFSServer], in[paramNFSPath]
		if p.nfsServer == "" || strings.ContainsAny(p.nfsServer, "/ \t\n") {
			errs = append(errs, fmt.Errorf("parameter %q must be a host name or IP address with source %q, not %q", paramNFSServer, sourceNFS, p.nfsServer))
		}
		if !isCleanAbs(p.nfsPath, path.IsAbs, path.Clean) {
			errs = append(errs, fmt.Errorf("parameter %q must be an absolute path in clean form with source %q, not %q", paramNFSPath, sourceNFS, p.nfsPath))
		}
		if _, ok := in[paramHostPath]; ok {
			errs = append(errs, fmt.Errorf("parameter %q is only valid with source %q", paramHostPath, sourceHostPath))
		}
	default:
		errs = append(errs, fmt.Errorf("parameter %q must be %q or %q, not %q", paramSource, sourceHostPath, sourceNFS, p.source))
	}

	if s, ok := in[paramMaxVolumes]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("parameter %q must be a positive integer, not %q", paramMaxVolumes, s))
		}
		p.maxVolumes = n
	}
	if s, ok := in[paramMaxCapacity]; ok {
		q, err := resource.ParseQuantity(s)
		if err != nil || q.Sign() <= 0 || q.CmpInt64(math.MaxInt64) >= 0 {
			errs = append(errs, fmt.Errorf("parameter %q must be a positive size such as 100Gi, not %q", paramMaxCapacity, s))
		} else {
			p.maxCapacity = &q
		}
	}
	if s, ok := in[paramDirectoryMode]; ok {
		n, err := strconv.ParseUint(s, 8, 32)
		if err != nil || n > 0o7777 {
			errs = append(errs, fmt.Errorf("parameter %q must be an octal mode such as 0775, not %q", paramDirectoryMode, s))
		}
		p.directoryMode = fs.FileMode(n&0o777) | unixModeBits(n)
	}
	return errs
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

// nodeAffinity turns the class's allowedTopologies into the node affinity of
// a new volume: the nodes where the volume's path leads to the directory the
// provisioner made. The scheduler only picks such nodes for a claim that
// waits for its first consumer, so the volume fits the selected node.
func nodeAffinity(class *storagev1.StorageClass) *corev1.VolumeNodeAffinity {
	if len(class.AllowedTopologies) == 0 {
		return nil
	}
	terms := make([]corev1.NodeSelectorTerm, 0, len(class.AllowedTopologies))
	for _, t := range class.AllowedTopologies {
		var term corev1.NodeSelectorTerm
		for _, e := range t.MatchLabelExpressions {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
				Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(e.Values),
			})
		}
		terms = append(terms, term)
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
