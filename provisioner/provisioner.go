// Package provisioner is a controller of reclaimable.
package provisioner

import (
	"context"
	"flag"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// Config holds the flags of the provisioner.
type Config struct{}

// AddFlags registers the flags of the provisioner on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {}

// Controller is the provisioner.
type Controller struct{}

// New builds the provisioner on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) { return &Controller{}, nil }

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "provisioner" }

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context) error { <-ctx.Done(); return nil }
