package releaser

import (
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Config holds the flags of the releaser.
type Config struct {
	// ReleaseInterval is the period of the sweep that queues every volume
	// that may need association or release, in case an event was missed.
	ReleaseInterval time.Duration
	// DisableAutomaticAssociation turns off association through a claim
	// labelled by this installation's podwatcher.
	DisableAutomaticAssociation bool
	// Workers is the number of volumes handled in parallel.
	Workers int
}

// AddFlags registers the flags of the releaser on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.ReleaseInterval, "release-interval", time.Minute,
		"How often the releaser checks every volume of this controller ID, besides reacting to events.")
	fs.BoolVar(&c.DisableAutomaticAssociation, "disable-automatic-association", false,
		"Do not associate a volume because its claim is labelled "+wellknown.ClaimManagedBy+"=<controller-id>; the StorageClass annotation and the provisioner still associate.")
	fs.IntVar(&c.Workers, "releaser-workers", 4, "Volumes the releaser handles in parallel.")
}

func (c *Config) validate() error {
	var errs []error
	if c.ReleaseInterval <= 0 {
		errs = append(errs, errors.New("--release-interval must be positive"))
	}
	if c.Workers <= 0 {
		errs = append(errs, errors.New("--releaser-workers must be positive"))
	}
	return errors.Join(errs...)
}
