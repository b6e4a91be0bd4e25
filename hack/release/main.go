// Command release builds the reclaimable image of a version, for
// linux/amd64 and linux/arm64, as an OCI image layout, without a container
// engine (make release): one static binary, /reclaimable, run as user
// 65532. The Kubernetes API server's CA comes from the pod's service
// account, so the image needs no other file.
//
//	go run ./hack/release --version v1.2.3 --out _output/release/v1.2.3
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/reclaimable/reclaimable/internal/ociimage"
)

// platforms the image is built for.
var platforms = []string{"amd64", "arm64"}

// semver is a release version: vMAJOR.MINOR.PATCH, with an optional
// pre-release.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func main() {
	version := flag.String("version", "", "the release, vMAJOR.MINOR.PATCH: the binary's version and the image's tag")
	out := flag.String("out", "", "the directory the image layout is written to, as image/")
	repository := flag.String("image", "ghcr.io/reclaimable/reclaimable", "the image's repository")
	flag.Parse()
	if !semver.MatchString(*version) || *out == "" {
		log.Fatalf("usage: release --version vX.Y.Z --out DIR (version %q)", *version)
	}
	ref := *repository + ":" + *version
	var images []ociimage.Image
	for _, arch := range platforms {
		bin := filepath.Join(*out, "bin", "reclaimable-linux-"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+*version, "-o", bin, "./cmd/reclaimable")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("building for linux/%s: %v", arch, err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			log.Fatal(err)
		}
		images = append(images, ociimage.Image{OS: "linux", Arch: arch, Name: "reclaimable", Program: b, User: "65532:65532"})
	}
	layout, err := ociimage.Build(ref, images...)
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
