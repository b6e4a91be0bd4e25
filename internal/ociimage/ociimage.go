// Package ociimage writes container images as OCI image layouts, without a
// container engine: an image is one program, the single file of its single
// layer, built for one or more platforms. The end-to-end tests' node
// images and the release image (make release) are written with it.
package ociimage

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

// Image is the image of one platform: a program and how it runs.
type Image struct {
	// OS and Arch are the platform, as GOOS and GOARCH name it.
	OS, Arch string
	// Program is the executable, written as /Name and run as the
	// entrypoint.
	Name    string
	Program []byte
	// User the program runs as, "uid:gid"; "" for root.
	User string
}

// Layout is the files of an OCI image layout holding the images of ref,
// one manifest per platform under one index, by path.
type Layout []File

// File is one file of a layout.
type File struct {
	Path string
	Data []byte
}

// epoch is every file's time: the same program makes the same image.
var epoch = time.Unix(0, 0)

// DockerManifest is an entry of the manifest.json of docker save: the
// archive format docker load and the tools built on it read.
type DockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Build makes the layout of ref's images. The layout of a single image
// also holds the manifest.json of docker save, naming it ref, so that one
// archive loads into docker (and kind, minikube) as into containerd.
func Build(ref string, images ...Image) (Layout, error) {
	layout := Layout{{Path: "oci-layout", Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)}}
	var manifests []Descriptor
	var docker []DockerManifest
	for _, img := range images {
		var layer bytes.Buffer
		tw := tar.NewWriter(&layer)
		if err := tw.WriteHeader(&tar.Header{Name: img.Name, Mode: 0o755, Size: int64(len(img.Program)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(img.Program); err != nil {
			return nil, err
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
		runConfig := map[string]any{"Entrypoint": []string{"/" + img.Name}}
		if img.User != "" {
			runConfig["User"] = img.User
		}
		config, err := json.Marshal(map[string]any{
			"architecture": img.Arch,
			"os":           img.OS,
			"config":       runConfig,
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		})
		if err != nil {
			return nil, err
		}
		configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
		manifest, err := json.Marshal(map[string]any{
			"schemaVersion": 2,
			"mediaType":     "application/vnd.oci.image.manifest.v1+json",
			"config":        configDesc,
			"layers":        []Descriptor{layerDesc},
		})
		if err != nil {
			return nil, err
		}
		manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
		manifestDesc.Annotations = map[string]string{
			// containerd names an imported image after this annotation.
			"io.containerd.image.name":          ref,
			"org.opencontainers.image.ref.name": ref,
		}
		manifestDesc.Platform = map[string]string{"architecture": img.Arch, "os": img.OS}
		manifests = append(manifests, manifestDesc)
		layout = append(layout, File{blobPath(layerDesc.Digest), layer.Bytes()}, File{blobPath(configDesc.Digest), config}, File{blobPath(manifestDesc.Digest), manifest})
		docker = append(docker, DockerManifest{Config: blobPath(configDesc.Digest), RepoTags: []string{ref}, Layers: []string{blobPath(layerDesc.Digest)}})
	}
	if len(docker) == 1 {
		b, err := json.Marshal(docker)
		if err != nil {
			return nil, err
		}
		layout = append(layout, File{"manifest.json", b})
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     manifests,
	})
	if err != nil {
		return nil, err
	}
	return append(layout, File{"index.json", index}), nil
}

// WriteTar writes the layout as one tar file, as containerd imports it.
func (l Layout) WriteTar(path string) error {
	var out bytes.Buffer
	archive := tar.NewWriter(&out)
	for _, f := range l {
		if err := archive.WriteHeader(&tar.Header{Name: f.Path, Mode: 0o644, Size: int64(len(f.Data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := archive.Write(f.Data); err != nil {
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

// WriteDir writes the layout into dir, as registries' tools (crane,
// skopeo, oras) read it.
func (l Layout) WriteDir(dir string) error {
	for _, f := range l {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func descriptor(mediaType string, b []byte) Descriptor {
	sum := sha256.Sum256(b)
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)}
}

func blobPath(digest string) string {
	return fmt.Sprintf("blobs/sha256/%s", digest[len("sha256:"):])
}
