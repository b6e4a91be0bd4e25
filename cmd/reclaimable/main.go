// Command reclaimable runs the controllers that send PersistentVolumes round
// a cycle of reuse: podwatcher, provisioner and releaser, apart or together.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/podwatcher"
	"github.com/reclaimable/reclaimable/poolmanager"
	"github.com/reclaimable/reclaimable/provisioner"
	"github.com/reclaimable/reclaimable/provisioner/lifecycle"
	"github.com/reclaimable/reclaimable/releaser"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `reclaimable sends PersistentVolumes round a cycle of reuse.

Usage:
  reclaimable <command> [flags]

Commands:
  podwatcher    create the claims that annotated Pods and Jobs ask for, delete them when the owner is gone
  provisioner   issue volumes from the retained pool, grow it through a backend, delete what it created
  releaser      return Released volumes of this installation to the pool
  all           run the three controllers in one process
  lifecycle     create|delete: the work of a lifecycle pod of the local backend on its node (run by the provisioner, not by hand)

Run "reclaimable <command> --help" for the flags of a command.
`

// defaultGCPercent is the garbage collector's target unless GOGC says
// otherwise. The informer caches are most of the heap and change slowly, so
// collecting at half the default growth keeps memory near what the caches
// need for little CPU.
const defaultGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	klog.Flush()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}

	if args[0] == "lifecycle" {
		return runLifecycle(args[1:], stdout, stderr)
	}

	cmd, args := args[0], args[1:]
	fs := pflag.NewFlagSet("reclaimable "+cmd, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of reclaimable %s:\n%s", cmd, fs.FlagUsages())
	}
	var (
		cfg         configs
		showVersion bool
	)
	logging := logsapi.NewLoggingConfiguration()
	logFeatures := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(logFeatures); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg.common.AddFlags(fs)
	fs.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	logsapi.AddFlags(logging, fs)
	logFeatures.AddFlag(fs)
	if !cfg.addFlags(cmd, fs) {
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	if showVersion {
		fmt.Fprintln(stdout, version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %v\n", fs.Args())
		return 2
	}
	if err := logsapi.ValidateAndApply(logging, logFeatures); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	logger := klog.Background().WithValues("controllerID", cfg.common.ControllerID)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "command", cmd, "version", version)

	env, controllers, err := build(cmd, cfg)
	if err != nil {
		logger.Error(err, "Invalid configuration")
		return 1
	}
	if err := env.Run(ctx, controllers...); err != nil {
		logger.Error(err, "Stopped")
		return 1
	}
	logger.Info("Stopped")
	return 0
}

// setMemoryLimit gives the Go runtime the soft limit the container's
// memory limit implies (controller.SoftMemoryLimit), if any.
func setMemoryLimit(logger klog.Logger) error {
	limit, err := controller.SoftMemoryLimit(os.Getenv)
	if err != nil || limit == 0 {
		return err
	}
	debug.SetMemoryLimit(limit)
	logger.Info("Set the Go runtime's soft memory limit", "bytes", limit)
	return nil
}

// configs holds the flags of every controller a subcommand may run.
type configs struct {
	common controller.Options
	pw     podwatcher.Config
	prov   provisioner.Config
	pools  poolmanager.Config
	rel    releaser.Config
}

// addFlags registers on fs the flags of the controllers cmd runs; it
// reports false for an unknown cmd.
func (c *configs) addFlags(cmd string, fs *pflag.FlagSet) bool {
	switch cmd {
	case "podwatcher":
		c.pw.AddFlags(fs)
	case "provisioner":
		c.prov.AddFlags(fs)
		c.pools.AddFlags(fs)
	case "releaser":
		c.rel.AddFlags(fs)
	case "all":
		c.pw.AddFlags(fs)
		c.prov.AddFlags(fs)
		c.pools.AddFlags(fs)
		c.rel.AddFlags(fs)
	default:
		return false
	}
	return true
}

// build makes the environment and the controllers of one subcommand; it
// starts nothing (env.Run does).
func build(cmd string, cfg configs) (*controller.Env, []controller.Runnable, error) {
	// Process-wide settings of client-go, before any client, queue or
	// informer reads them: building a client reads its feature gates.
	controller.StreamInitialLists()
	if err := setMemoryLimit(klog.Background()); err != nil {
		return nil, nil, err
	}
	env, err := controller.NewEnv(cfg.common, "reclaimable-"+cmd+"/"+version)
	if err != nil {
		return nil, nil, err
	}
	controller.ExportWorkqueueMetrics(env.Registry)
	constructors := map[string][]func() (controller.Runnable, error){
		"podwatcher":  {func() (controller.Runnable, error) { return podwatcher.New(env, cfg.pw) }},
		"provisioner": {func() (controller.Runnable, error) { return newProvisioner(env, cfg.prov, cfg.pools) }},
		"releaser":    {func() (controller.Runnable, error) { return releaser.New(env, cfg.rel) }},
	}
	constructors["all"] = append(append(append([]func() (controller.Runnable, error){},
		constructors["podwatcher"]...), constructors["provisioner"]...), constructors["releaser"]...)
	var controllers []controller.Runnable
	for _, newController := range constructors[cmd] {
		c, err := newController()
		if err != nil {
			return nil, nil, err
		}
		controllers = append(controllers, c)
	}
	return env, controllers, nil
}

// newProvisioner builds the provisioner and the pool manager, which run
// together under the provisioner's Lease: the manager reads the claims that
// wait, which only the leading provisioner has, and the provisioner's loops
// carry out what the manager decides (evictions, members made ahead).
func newProvisioner(env *controller.Env, prov provisioner.Config, pools poolmanager.Config) (controller.Runnable, error) {
	p, err := provisioner.New(env, prov)
	if err != nil {
		return nil, err
	}
	m, err := poolmanager.New(env, p, pools)
	if err != nil {
		return nil, err
	}
	p.NotifyPools(m.Notify)
	return controller.Together(p, m), nil
}

// runLifecycle makes or removes a local volume's directory under the pod's
// mount of its node's directory of volumes; the pod's environment names it.
func runLifecycle(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "usage: reclaimable lifecycle %s|%s (with %s and %s set)\n", lifecycle.Create, lifecycle.Delete, lifecycle.EnvVolumeName, lifecycle.EnvVolumeMode)
		return 2
	}
	if err := lifecycle.Run(args[0], lifecycle.Mount, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "lifecycle %s of %s: %v\n", args[0], os.Getenv(lifecycle.EnvVolumePath), err)
		return 1
	}
	fmt.Fprintf(stdout, "lifecycle %s of %s: done\n", args[0], os.Getenv(lifecycle.EnvVolumePath))
	return 0
}
