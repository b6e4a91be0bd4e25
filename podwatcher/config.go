package podwatcher

import (
	"errors"
	"time"

	"github.com/spf13/pflag"
)

// Config holds the flags of the podwatcher.
type Config struct {
	// Namespace limits the watched Pods, Jobs and claims to one namespace;
	// empty watches all.
	Namespace string
	// CleanupInterval is the period of the sweep that re-examines every
	// managed claim and every annotated owner.
	CleanupInterval time.Duration
	// Workers is the number of keys synced in parallel.
	Workers int
	// GarbageCollectionGrace is how long after its owner was found gone a
	// claim that still references the owner is left to the garbage
	// collector before the podwatcher deletes it itself.
	GarbageCollectionGrace time.Duration
}

// AddFlags registers the flags of the podwatcher on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Namespace, "namespace", "", "Watch Pods and Jobs (and manage claims) in this namespace only; empty watches all namespaces.")
	fs.DurationVar(&c.CleanupInterval, "cleanup-interval", time.Minute, "How often every managed claim is checked for an owner that is gone, and every annotated Pod and Job for a missing claim.")
	fs.IntVar(&c.Workers, "podwatcher-workers", 4, "Pods, Jobs and claims the podwatcher processes in parallel.")
	fs.DurationVar(&c.GarbageCollectionGrace, "garbage-collection-grace", 30*time.Second, "How long the claim of a Pod or Job found gone is left to the Kubernetes garbage collector, which its ownerReference lets delete it, before the podwatcher deletes it itself.")
}

func (c *Config) validate() error {
	var errs []error
	if c.CleanupInterval <= 0 {
		errs = append(errs, errors.New("--cleanup-interval must be positive"))
	}
	if c.Workers <= 0 {
		errs = append(errs, errors.New("--podwatcher-workers must be positive"))
	}
	if c.GarbageCollectionGrace <= 0 {
		errs = append(errs, errors.New("--garbage-collection-grace must be positive"))
	}
	return errors.Join(errs...)
}
