package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// A layout of two platforms has an index naming a manifest per platform,
// each of a config that runs the program as its user, and every blob is
// stored under its digest.
func TestBuildMultiPlatform(t *testing.T) {
	layout, err := Build("example.com/app:v1",
		Image{OS: "linux", Arch: "amd64", Name: "app", Program: []byte("amd64 program"), User: "65532:65532"},
		Image{OS: "linux", Arch: "arm64", Name: "app", Program: []byte("arm64 program"), User: "65532:65532"})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range layout {
		files[f.Path] = f.Data
		if digest, ok := strings.CutPrefix(f.Path, "blobs/sha256/"); ok {
			sum := sha256.Sum256(f.Data)
			if hex.EncodeToString(sum[:]) != digest {
				t.Errorf("blob %s holds content of another digest", f.Path)
			}
		}
	}
	var index struct{ Manifests []Descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(index.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		m := index.Manifests[i]
		if m.Platform["architecture"] != arch || m.Platform["os"] != "linux" || m.Annotations["org.opencontainers.image.ref.name"] != "example.com/app:v1" {
			t.Errorf("manifest %d: platform %v, annotations %v", i, m.Platform, m.Annotations)
		}
		var manifest struct{ Config Descriptor }
		if err := json.Unmarshal(files[blobPath(m.Digest)], &manifest); err != nil {
			t.Fatal(err)
		}
		var config struct {
			Architecture string
			Config       struct {
				Entrypoint []string
				User       string
			}
		}
		if err := json.Unmarshal(files[blobPath(manifest.Config.Digest)], &config); err != nil {
			t.Fatal(err)
		}
		if config.Architecture != arch || strings.Join(config.Config.Entrypoint, " ") != "/app" || config.Config.User != "65532:65532" {
			t.Errorf("config of %s: %+v", arch, config)
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
}

// The layout of one image also holds docker save's manifest.json, naming
// the image and pointing at its config and layer; a multi-platform layout,
// which docker save cannot express, has none.
func TestBuildOnePlatformLoadsIntoDocker(t *testing.T) {
	layout, err := Build("example.com/app:v1", Image{OS: "linux", Arch: "amd64", Name: "app", Program: []byte("program")})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range layout {
		files[f.Path] = f.Data
	}
	var docker []DockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(docker) != 1 || strings.Join(docker[0].RepoTags, ",") != "example.com/app:v1" || len(docker[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v", docker)
	}
	var index struct{ Manifests []Descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %+v", err, index)
	}
	var manifest struct {
		Config Descriptor
		Layers []Descriptor
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &manifest); err != nil {
		t.Fatal(err)
	}
	// docker load and containerd read the same blobs.
	if docker[0].Config != blobPath(manifest.Config.Digest) || docker[0].Layers[0] != blobPath(manifest.Layers[0].Digest) {
		t.Errorf("manifest.json %+v and the OCI manifest %+v name different blobs", docker[0], manifest)
	}
	for _, p := range append([]string{docker[0].Config}, docker[0].Layers...) {
		if files[p] == nil {
			t.Errorf("manifest.json names %s, which the archive lacks", p)
		}
	}

	two, err := Build("example.com/app:v1", Image{OS: "linux", Arch: "amd64", Name: "app"}, Image{OS: "linux", Arch: "arm64", Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range two {
		if f.Path == "manifest.json" {
			t.Error("a multi-platform layout has a manifest.json")
		}
	}
}

// An image of several entries, a shell's tools say, has a layer holding
// its directories, files and links in order, and a config with its default
// command and environment and no entrypoint.
func TestBuildEntries(t *testing.T) {
	layout, err := Build("example.com/shell:v1", Image{OS: "linux", Arch: "amd64",
		Entries: []Entry{
			{Path: "bin", Mode: 0o755, Dir: true},
			{Path: "bin/busybox", Mode: 0o755, Data: []byte("tools")},
			{Path: "bin/sh", Mode: 0o777, Link: "busybox"},
			{Path: "tmp", Mode: 0o1777, Dir: true},
		},
		Cmd: []string{"sh"}, Env: []string{"PATH=/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range layout {
		files[f.Path] = f.Data
	}
	var docker []DockerManifest
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v, %s", err, files["manifest.json"])
	}
	var config struct {
		Config map[string][]string
	}
	if err := json.Unmarshal(files[docker[0].Config], &config); err != nil {
		t.Fatal(err)
	}
	if _, ok := config.Config["Entrypoint"]; ok || !slices.Equal(config.Config["Cmd"], []string{"sh"}) || !slices.Equal(config.Config["Env"], []string{"PATH=/bin"}) {
		t.Errorf("config = %v, want Cmd [sh], Env [PATH=/bin] and no entrypoint", config.Config)
	}
	var got []string
	r := tar.NewReader(bytes.NewReader(files[docker[0].Layers[0]]))
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r)
		got = append(got, fmt.Sprintf("%s %c %o %s %s", h.Name, h.Typeflag, h.Mode, h.Linkname, body))
	}
	want := []string{"bin/ 5 755  ", "bin/busybox 0 755  tools", "bin/sh 2 777 busybox ", "tmp/ 5 1777  "}
	if !slices.Equal(got, want) {
		t.Errorf("layer holds\n%q\nwant\n%q", got, want)
	}
}
