// Command pause is the sandbox image of the real node: it holds a pod's
// namespaces until the runtime stops it. It is built static and imported
// into the node's containerd, so that no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			return
		}
		// As PID 1 of a pod that shares its process namespace, reap the
		// orphans handed to it.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
