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
	"github.com/reclaimable/reclaimable/provisioner"
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
		return lifecycle(args[1:], stdout, stderr)
	}

	cmd, args := args[0], args[1:]
	fs := pflag.NewFlagSet("reclaimable "+cmd, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of reclaimable %s:\n%s", cmd, fs.FlagUsages())
	}
	var (
		common      controller.Options
		pw          podwatcher.Config
		prov        provisioner.Config
		rel         releaser.Config
		showVersion bool
	)
	logging := logsapi.NewLoggingConfiguration()
	logFeatures := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(logFeatures); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	common.AddFlags(fs)
	fs.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	logsapi.AddFlags(logging, fs)
	logFeatures.AddFlag(fs)
	switch cmd {
	case "podwatcher":
		pw.AddFlags(fs)
	case "provisioner":
		prov.AddFlags(fs)
	case "releaser":
		rel.AddFlags(fs)
	case "all":
		pw.AddFlags(fs)
		prov.AddFlags(fs)
		rel.AddFlags(fs)
	default:
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

	logger := klog.Background().WithValues("controllerID", common.ControllerID)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "command", cmd, "version", version)

	env, controllers, err := build(cmd, common, pw, prov, rel)
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

// build makes the environment and the controllers of one subcommand; it
// starts nothing (env.Run does).
func build(cmd string, common controller.Options, pw podwatcher.Config, prov provisioner.Config, rel releaser.Config) (*controller.Env, []controller.Runnable, error) {
	// Process-wide settings of client-go, before any client, queue or
	// informer reads them: building a client reads its feature gates.
	controller.StreamInitialLists()
	env, err := controller.NewEnv(common, "reclaimable-"+cmd+"/"+version)
	if err != nil {
		return nil, nil, err
	}
	controller.ExportWorkqueueMetrics(env.Registry)
	constructors := map[string][]func() (controller.Runnable, error){
		"podwatcher":  {func() (controller.Runnable, error) { return podwatcher.New(env, pw) }},
		"provisioner": {func() (controller.Runnable, error) { return provisioner.New(env, prov) }},
		"releaser":    {func() (controller.Runnable, error) { return releaser.New(env, rel) }},
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

// lifecycle makes or removes a local volume's directory under the pod's
// mount of its node's directory of volumes; the pod's environment names it.
func lifecycle(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "usage: reclaimable lifecycle %s|%s (with %s and %s set)\n", provisioner.LifecycleCreate, provisioner.LifecycleDelete, provisioner.EnvVolumeName, provisioner.EnvVolumeMode)
		return 2
	}
	if err := provisioner.RunLifecycle(args[0], provisioner.LifecycleMount, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "lifecycle %s of %s: %v\n", args[0], os.Getenv(provisioner.EnvVolumePath), err)
		return 1
	}
	fmt.Fprintf(stdout, "lifecycle %s of %s: done\n", args[0], os.Getenv(provisioner.EnvVolumePath))
	return 0
}
