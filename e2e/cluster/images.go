package cluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
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
	// ReclaimableImage runs cmd/reclaimable as /reclaimable: the image of
	// the local backend's lifecycle pods.
	ReclaimableImage = "reclaimable.local/reclaimable:e2e"
)

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
	{ref: ReclaimableImage, program: "reclaimable", pkg: "./cmd/reclaimable", file: "reclaimable-image.tar"},
}

// writeImage writes an OCI image layout, as one tar file, whose single
// uncompressed layer holds binary as /name and whose entrypoint runs it.
func writeImage(path, ref, name string, binary []byte) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(binary)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(binary); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/" + name}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{
		// containerd names the imported image after this annotation.
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []ociDescriptor{manifestDesc},
	})
	if err != nil {
		return err
	}

	var out bytes.Buffer
	archive := tar.NewWriter(&out)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc.Digest), layer.Bytes()},
		{blobPath(configDesc.Digest), config},
		{blobPath(manifestDesc.Digest), manifest},
	}
	for _, f := range files {
		if err := archive.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := archive.Write(f.data); err != nil {
			return err
		}
	}
	if err := archive.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func descriptor(mediaType string, b []byte) ociDescriptor {
	sum := sha256.Sum256(b)
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)}
}

func blobPath(digest string) string {
	return fmt.Sprintf("blobs/sha256/%s", digest[len("sha256:"):])
}
