// Command release builds the reclaimable image without a container engine:
// one static binary, /reclaimable, run as user 65532 (the Kubernetes API
// server's CA comes from the pod's service account, so the image needs no
// other file).
//
//	make image:   go run ./hack/release --archive _output/image/reclaimable.tar
//	              the image of VERSION for this machine's platform, as one
//	              archive that docker load, kind load image-archive,
//	              k3s ctr images import, minikube image load and
//	              ctr images import all take
//	make release: go run ./hack/release --stamp --version vX.Y.Z --out DIR
//	              writes vX.Y.Z into VERSION, the manifests and the chart,
//	              then the image for linux/amd64 and linux/arm64 as an OCI
//	              image layout in DIR/image, as registries' tools push it
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"

	"github.com/reclaimable/reclaimable/internal/release"
)

// platforms a release's image is built for.
var platforms = []string{"amd64", "arm64"}

func main() {
	version := flag.String("version", "", "the version, vMAJOR.MINOR.PATCH[-PRERELEASE]: the binary's version and the image's tag; default VERSION's")
	stamp := flag.Bool("stamp", false, "first write --version into VERSION, the manifests and the chart")
	out := flag.String("out", "", "the directory the multi-platform image layout is written to, as image/")
	archive := flag.String("archive", "", "instead, the archive the image of this machine's platform is written to")
	flag.Parse()
	if (*out == "") == (*archive == "") {
		log.Fatal("usage: release [--version vX.Y.Z [--stamp]] --out DIR | --archive FILE")
	}
	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	if *stamp {
		if err := release.Stamp(root, *version); err != nil {
			log.Fatalf("stamping %s: %v", *version, err)
		}
	}
	if *version == "" {
		if *version, err = release.Version(root); err != nil {
			log.Fatal(err)
		}
	}
	if err := release.ValidVersion(*version); err != nil {
		log.Fatal(err)
	}
	ref := release.Ref(*version)
	ctx := context.Background()

	if *archive != "" {
		tmp, err := os.MkdirTemp("", "reclaimable-image-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		layout, err := release.BuildImage(ctx, root, *version, ref, []string{runtime.GOARCH}, tmp)
		if err != nil {
			log.Fatal(err)
		}
		if err := layout.WriteTar(*archive); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s for linux/%s\n", *archive, ref, runtime.GOARCH)
		return
	}
	layout, err := release.BuildImage(ctx, root, *version, ref, platforms, filepath.Join(*out, "bin"))
	if err != nil {
		log.Fatal(err)
	}
	dir := filepath.Join(*out, "image")
	if err := os.RemoveAll(dir); err != nil {
		log.Fatal(err)
	}
	if err := layout.WriteDir(dir); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: OCI image layout of %s for linux/%v\n", dir, ref, platforms)
}
