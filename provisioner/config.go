package provisioner

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Config holds the flags of the provisioner.
type Config struct {
	// DirectoryRoot is the directory every baseDir of the directory backend
	// must lie in: a StorageClass cannot make the provisioner write or
	// delete anywhere else.
	DirectoryRoot string
	// Workers is the number of claims provisioned, and of volumes deleted,
	// in parallel.
	Workers int
	// LifecycleNamespace, LifecycleImage, LifecyclePodTemplate and
	// LifecycleTimeout shape the pods that make and remove volume
	// directories where the provisioner cannot: on a local volume's node,
	// and in a share where a consumer left what the provisioner's user may
	// not remove.
	LifecycleNamespace   string
	LifecycleImage       string
	LifecyclePodTemplate string
	LifecycleTimeout     time.Duration
	// BackingClaimNamespace is where the claims through which class pools
	// grow are made; "" for the installation's namespace.
	BackingClaimNamespace string
	// MeasureTimeout bounds the walk that measures a member of a directory
	// class back in the pool.
	MeasureTimeout time.Duration
}

// AddFlags registers the flags of the provisioner on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.DirectoryRoot, "directory-root", "/var/lib/reclaimable",
		"Directory that every baseDir of a directory-backend StorageClass must lie in; the provisioner never creates or removes anything outside it.")
	fs.IntVar(&c.Workers, "provisioner-workers", 4, "Claims the provisioner provisions, and volumes it deletes, in parallel.")
	fs.StringVar(&c.LifecycleNamespace, "lifecycle-namespace", "reclaimable-lifecycle",
		"Namespace of the pods that make and remove volume directories where the provisioner cannot: on a local-backend volume's node, and in a directory-backend share where a consumer left what the provisioner's user may not remove; the provisioner creates and deletes pods there only.")
	fs.StringVar(&c.LifecycleImage, "lifecycle-image", "",
		"Image of those pods: the reclaimable image, whose lifecycle command they run. It overrides the image of --lifecycle-pod-template. Without either, classes of the local backend are refused, and a directory-backend volume whose consumer left such files cannot be deleted.")
	fs.StringVar(&c.LifecyclePodTemplate, "lifecycle-pod-template", "",
		"PodTemplate in --lifecycle-namespace, read for each pod, whose container \"lifecycle\" gives those pods their image and pull policy, and whose imagePullSecrets they get. The installation makes one (reclaimable-lifecycle) with the controllers' image.")
	fs.DurationVar(&c.LifecycleTimeout, "lifecycle-timeout", 2*time.Minute,
		"How long a lifecycle pod may take from creation to its end before the provisioner removes it and reports the claim's provisioning failed.")
	fs.StringVar(&c.BackingClaimNamespace, "backing-claim-namespace", "",
		"Namespace of the claims through which a pool of the class backend gets new volumes from its backing class, each deleted once its volume is handed over; the provisioner creates and deletes claims there only. Defaults to the installation's namespace (that of the Leases).")
	fs.DurationVar(&c.MeasureTimeout, "measure-timeout", 30*time.Second,
		"How long the walk that measures the bytes a directory-backend member holds, as it comes back to the pool, may take; a member it cannot finish is reported partial, its bytes a lower bound.")
}

func (c *Config) validate() error {
	var errs []error
	if !filepath.IsAbs(c.DirectoryRoot) || filepath.Clean(c.DirectoryRoot) != c.DirectoryRoot {
		errs = append(errs, fmt.Errorf("--directory-root %q must be an absolute path in clean form", c.DirectoryRoot))
	}
	if c.Workers < 1 {
		errs = append(errs, errors.New("--provisioner-workers must be at least 1"))
	}
	if c.LifecycleTimeout <= 0 {
		errs = append(errs, errors.New("--lifecycle-timeout must be positive"))
	}
	if c.MeasureTimeout <= 0 {
		errs = append(errs, errors.New("--measure-timeout must be positive"))
	}
	if msgs := validation.IsDNS1123Label(c.BackingClaimNamespace); c.BackingClaimNamespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--backing-claim-namespace %q: %s", c.BackingClaimNamespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(c.LifecycleNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lifecycle-namespace %q: %s", c.LifecycleNamespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(c.LifecyclePodTemplate); c.LifecyclePodTemplate != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lifecycle-pod-template %q: %s", c.LifecyclePodTemplate, strings.Join(msgs, "; ")))
	}
	return errors.Join(errs...)
}
