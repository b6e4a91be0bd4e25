// Command etcd is the etcd server, built from the same version that the
// Kubernetes release under test pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
