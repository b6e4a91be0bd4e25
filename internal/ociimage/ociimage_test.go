package ociimage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
