// Package releaser is a controller of reclaimable.
package releaser

import (
	"context"
	"flag"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// Config holds the flags of the releaser.
type Config struct{}

// AddFlags registers the flags of the releaser on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {}

// Controller is the releaser.
type Controller struct{}

// New builds the releaser on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) { return &Controller{}, nil }

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "releaser" }

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context) error { <-ctx.Done(); return nil }
