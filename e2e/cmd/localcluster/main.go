// Command localcluster starts and stops the local control plane the
// end-to-end tests use, with its real node, for people who want to explore
// it with kubectl.
//
//	localcluster up   [--dir DIR]   start it and print the KUBECONFIG to use
//	localcluster down [--dir DIR]   stop it; nothing is left running or mounted
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/reclaimable/reclaimable/e2e/cluster"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|down [--dir DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("localcluster "+os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "_output/cluster", "directory for the cluster's certificates, data, logs and kubeconfig")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	if os.Args[1] == "down" {
		if err := cluster.Down(abs, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("Local control plane stopped.")
		return
	}

	if _, err := os.Stat(filepath.Join(abs, "pids")); err == nil {
		if cluster.Running(abs) {
			fmt.Fprintf(os.Stderr, "a cluster is already running in %s; run 'make cluster-down' first\n", abs)
			os.Exit(1)
		}
		// An earlier start was killed: clean what it left first.
		if err := cluster.Down(abs, 10*time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "cleaning the killed cluster in %s: %v\n", abs, err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Dir: abs, Detach: true, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := cluster.NodeUnsupported(); err != nil {
		fmt.Fprintf(os.Stderr, "No real node: %v. Pods run on the fake node only.\n", err)
	} else if n, err := c.StartNode(ctx, "real-node"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		c.Stop()
		os.Exit(1)
	} else {
		fmt.Fprintf(os.Stderr, "Real node %s: taint %s:NoSchedule, images %s, %s and %s (present, never pulled), logs in %s\n",
			n.Name, cluster.RealNodeTaint, cluster.ConsumerImage, cluster.ReclaimableImage, cluster.PauseImage, filepath.Dir(n.LogPath(cluster.Kubelet)))
	}
	fmt.Printf("export KUBECONFIG=%s\nexport PATH=%s:$PATH   # kubectl %s\n", c.Kubeconfig, c.BinDir, cluster.KubernetesVersion)
}
