package cluster

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/reclaimable/reclaimable/internal/ociimage"
	"github.com/reclaimable/reclaimable/internal/release"
)

// Images on the real node. Nothing pulls them: they are written as OCI
// archives from the project's own static programs and imported into the
// node's containerd at start. Pods that use them set imagePullPolicy Never
// (a tag other than latest would also do: the image is present).
const (
	// ConsumerImage runs e2e/cmd/consumer as /consumer.
	ConsumerImage = "reclaimable.local/consumer:e2e"
	// PauseImage holds each pod's namespaces (containerd's sandbox image).
	PauseImage = "reclaimable.local/pause:e2e"
)

// ReclaimableImage is the image make image writes, of VERSION
// (reclaimableVersion), as the manifests and the chart name it: the image
// of the lifecycle and scrub pods, which the node holds as a user's node
// holds it once loaded.
var (
	reclaimableVersion = repoVersion()
	ReclaimableImage   = release.Ref(reclaimableVersion)
)

// repoVersion is the repository's VERSION; the test bed cannot run without
// one.
func repoVersion() string {
	v, err := release.Version(RepoRoot())
	if err != nil {
		panic(fmt.Sprintf("the repository's version: %v", err))
	}
	return v
}

// RepoRoot is the root of the reclaimable module.
func RepoRoot() string { return filepath.Join(ToolsDir(), "..", "..") }

// imageArchive is an image's archive in the node cache, and the program
// that makes up its single layer.
type imageArchive struct {
	ref     string
	program string // the binary's name, its entrypoint /program
	pkg     string // its package in this module
	file    string // the archive's name
}

var nodeImages = []imageArchive{
	{ref: ConsumerImage, program: "consumer", pkg: "./e2e/cmd/consumer", file: "consumer-image.tar"},
	{ref: PauseImage, program: "pause", pkg: "./e2e/cmd/pause", file: "pause-image.tar"},
}

// reclaimableArchive is the archive of ReclaimableImage in the node cache.
const reclaimableArchive = "reclaimable-image.tar"

// writeImage writes an OCI image layout, as one tar file, whose single
// layer holds binary as /name and whose entrypoint runs it.
func writeImage(path, ref, name string, binary []byte) error {
	layout, err := ociimage.Build(ref, ociimage.Image{OS: "linux", Arch: runtime.GOARCH, Name: name, Program: binary})
	if err != nil {
		return err
	}
	return layout.WriteTar(path)
}
