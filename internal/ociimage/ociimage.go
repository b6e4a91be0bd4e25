// Package ociimage writes container images as OCI image layouts, without a
// container engine: an image is one program, the single file of its single
// layer, built for one or more platforms, or a few files, directories and
// links (a shell and its tools). The end-to-end tests' node images and the
// release image (make release) are written with it.
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
	// entrypoint; nil for an image of Entries only, whose Cmd says what
	// runs.
	Name    string
	Program []byte
	// Entries are more of the layer's contents, after the program, in
	// order: a directory must come before what it holds.
	Entries []Entry
	// Cmd and Env are the image's default command and environment.
	Cmd, Env []string
	// User the program runs as, "uid:gid"; "" for root.
	User string
}

// Entry is one directory, file or symbolic link of an image's layer, by
// its path without the leading slash.
type Entry struct {
	Path string
	// Mode is the permission bits; a directory's too.
	Mode int64
	// Dir makes the entry a directory; Link, a symbolic link to Link;
	// else it is a regular file holding Data.
	Dir  bool
	Link string
	Data []byte
}

// header is the entry's tar header.
func (e Entry) header() *tar.Header {
	h := &tar.Header{Name: e.Path, Mode: e.Mode, ModTime: epoch, Typeflag: tar.TypeReg, Size: int64(len(e.Data))}
	switch {
	case e.Dir:
		h.Name, h.Typeflag, h.Size = e.Path+"/", tar.TypeDir, 0
	case e.Link != "":
		h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.Link, 0
	}
	return h
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
		layer, err := img.layer()
		if err != nil {
			return nil, err
		}
		layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer)
		config, err := json.Marshal(map[string]any{
			"architecture": img.Arch,
			"os":           img.OS,
			"config":       img.runConfig(),
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
		layout = append(layout, File{blobPath(layerDesc.Digest), layer}, File{blobPath(configDesc.Digest), config}, File{blobPath(manifestDesc.Digest), manifest})
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

// entries are the files of img's one layer: its program first, if any.
func (img Image) entries() []Entry {
	if img.Program == nil {
		return img.Entries
	}
	return append([]Entry{{Path: img.Name, Mode: 0o755, Data: img.Program}}, img.Entries...)
}

// layer is the tar of img's entries.
func (img Image) layer() ([]byte, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, e := range img.entries() {
		if err := tw.WriteHeader(e.header()); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layer.Bytes(), nil
}

// runConfig is the config a runtime starts img's container with.
func (img Image) runConfig() map[string]any {
	runConfig := map[string]any{}
	if img.Program != nil {
		runConfig["Entrypoint"] = []string{"/" + img.Name}
	}
	if img.User != "" {
		runConfig["User"] = img.User
	}
	if img.Cmd != nil {
		runConfig["Cmd"] = img.Cmd
	}
	if img.Env != nil {
		runConfig["Env"] = img.Env
	}
	return runConfig
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
