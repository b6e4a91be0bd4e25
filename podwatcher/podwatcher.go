// Package podwatcher is a controller of reclaimable.
package podwatcher

import (
	"context"
	"flag"

	"github.com/reclaimable/reclaimable/internal/controller"
)

// Config holds the flags of the podwatcher.
type Config struct{}

// AddFlags registers the flags of the podwatcher on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {}

// Controller is the podwatcher.
type Controller struct{}

// New builds the podwatcher on env's informers.
func New(env *controller.Env, cfg Config) (*Controller, error) { return &Controller{}, nil }

// Name names the controller's lease and logs.
func (c *Controller) Name() string { return "podwatcher" }

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context) error { <-ctx.Done(); return nil }
