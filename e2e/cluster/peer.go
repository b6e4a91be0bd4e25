package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/reclaimable/reclaimable/internal/ociimage"
)

// The images Kubernetes' own storage tests run, under their upstream names
// (k8s.io/kubernetes/test/utils/image of KubernetesVersion), which the peer
// suite's pods name with imagePullPolicy IfNotPresent: present on the real
// node, they are never pulled.
const (
	PeerBusyBoxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	PeerAgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	// The nginx and jessie-dnsutils images only run shell commands in the
	// storage tests: busybox serves under their names.
	PeerNginxImage          = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
	PeerJessieDnsutilsImage = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7"
	PeerPauseImage          = "registry.k8s.io/pause:3.10.1"
)

// busybox is Debian's static busybox, pinned: one program and a link per
// applet. The package is fetched once with apt-get into the cache and
// checked against its digest.
const (
	busyboxPackage = "busybox-static=1:1.35.0-4+deb12u1+b1"
	busyboxDeb     = "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb"
	busyboxSHA256  = "3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744"
)

// PeerDir is the peer suite's module (e2e/peer), which pins Kubernetes'
// tests and agnhost.
func PeerDir() string { return filepath.Join(ToolsDir(), "..", "peer") }

// ImportPeerImages writes the images of Kubernetes' storage tests and
// imports them into the node: busybox (under its own name, nginx's and
// jessie-dnsutils'), agnhost built from the peer module, and the pause
// program under the upstream pause image's name.
func (n *Node) ImportPeerImages(ctx context.Context, log io.Writer) error {
	dir := n.path("images", "peer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	busybox, err := busyboxImage(ctx, log)
	if err != nil {
		return err
	}
	if err := n.importLayouts(ctx, dir, busybox, PeerBusyBoxImage, PeerNginxImage, PeerJessieDnsutilsImage); err != nil {
		return err
	}

	agnhost := filepath.Join(dir, "agnhost")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", agnhost, "k8s.io/kubernetes/test/images/agnhost")
	build.Dir = PeerDir()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building agnhost: %w\n%s", err, out)
	}
	// agnhost's own image has a shell and the usual tools beside it: the
	// tests' host-side checks run nsenter and sh in it.
	b, err := os.ReadFile(agnhost)
	if err != nil {
		return err
	}
	withTools := busybox
	withTools.Name, withTools.Program, withTools.Cmd = "agnhost", b, nil
	if err := n.importLayout(ctx, dir, PeerAgnhostImage, withTools); err != nil {
		return err
	}
	b, err = os.ReadFile(n.path("images", "pause"))
	if err != nil {
		return err
	}
	return n.importLayout(ctx, dir, PeerPauseImage, ociimage.Image{OS: "linux", Arch: runtime.GOARCH, Name: "pause", Program: b})
}

// ImportBusyBox imports the busybox of the peer images into the node under
// refs too, such as the docker.io/library/busybox:<tag> that the
// examples' pods name, which no registry here serves.
func (n *Node) ImportBusyBox(ctx context.Context, log io.Writer, refs ...string) error {
	dir := n.path("images", "busybox")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	busybox, err := busyboxImage(ctx, log)
	if err != nil {
		return err
	}
	return n.importLayouts(ctx, dir, busybox, refs...)
}

// importLayouts imports img under each of refs (importLayout).
func (n *Node) importLayouts(ctx context.Context, dir string, img ociimage.Image, refs ...string) error {
	for _, ref := range refs {
		if err := n.importLayout(ctx, dir, ref, img); err != nil {
			return err
		}
	}
	return nil
}

// importLayout writes img as ref into dir and imports it.
func (n *Node) importLayout(ctx context.Context, dir, ref string, img ociimage.Image) error {
	layout, err := ociimage.Build(ref, img)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := layout.WriteTar(file); err != nil {
		return err
	}
	if err := n.ImportImage(ctx, file); err != nil {
		return fmt.Errorf("importing %s: %w", ref, err)
	}
	return nil
}

// busyboxImage is the image of Debian's static busybox: /bin/busybox and a
// link for each applet where busybox --list-full puts it, sh its command.
func busyboxImage(ctx context.Context, log io.Writer) (ociimage.Image, error) {
	if runtime.GOARCH != "amd64" {
		return ociimage.Image{}, fmt.Errorf("the busybox image is Debian's busybox for amd64, not %s", runtime.GOARCH)
	}
	img := ociimage.Image{OS: "linux", Arch: runtime.GOARCH, Cmd: []string{"sh"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	program, err := busyboxProgram(ctx, log)
	if err != nil {
		return img, err
	}
	tmp, err := os.MkdirTemp("", "busybox-")
	if err != nil {
		return img, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "busybox")
	if err := os.WriteFile(bin, program, 0o755); err != nil {
		return img, err
	}
	list, err := exec.CommandContext(ctx, bin, "--list-full").Output()
	if err != nil {
		return img, fmt.Errorf("listing busybox's applets: %w", err)
	}
	dirs := map[string]bool{}
	addDir := func(d string) {
		for _, p := range []string{filepath.Dir(d), d} {
			if p != "." && !dirs[p] {
				dirs[p] = true
				img.Entries = append(img.Entries, ociimage.Entry{Path: p, Mode: 0o755, Dir: true})
			}
		}
	}
	addDir("bin")
	img.Entries = append(img.Entries, ociimage.Entry{Path: "bin/busybox", Mode: 0o755, Data: program})
	for _, d := range []string{"etc", "root", "usr", "var"} {
		addDir(d)
	}
	img.Entries = append(img.Entries, ociimage.Entry{Path: "tmp", Mode: 0o1777, Dir: true})
	scanner := bufio.NewScanner(bytes.NewReader(list))
	for scanner.Scan() {
		applet := strings.TrimSpace(scanner.Text())
		if applet == "" || applet == "bin/busybox" {
			continue
		}
		addDir(filepath.Dir(applet))
		img.Entries = append(img.Entries, ociimage.Entry{Path: applet, Mode: 0o777, Link: "/bin/busybox"})
	}
	return img, scanner.Err()
}

// busyboxProgram is /bin/busybox of the pinned package, fetched into the
// cache on first use.
func busyboxProgram(ctx context.Context, log io.Writer) ([]byte, error) {
	dir, err := cacheDir("peer")
	if err != nil {
		return nil, err
	}
	deb := filepath.Join(dir, busyboxDeb)
	if _, err := os.Stat(deb); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(log, "Fetching %s (busybox for Kubernetes' storage tests) into %s\n", busyboxPackage, dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		get := exec.CommandContext(ctx, "apt-get", "download", busyboxPackage)
		get.Dir = dir
		if out, err := get.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %w\n%s", busyboxPackage, err, out)
		}
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != busyboxSHA256 {
		return nil, fmt.Errorf("%s has digest %x, want %s", deb, sum, busyboxSHA256)
	}
	extract := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	tarball, err := extract.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	return fileOfTar(tarball, "./bin/busybox")
}

// fileOfTar is the content of the regular file name in the tar archive.
func fileOfTar(archive []byte, name string) ([]byte, error) {
	r := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := r.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("no %s in the archive", name)
		} else if err != nil {
			return nil, err
		}
		if h.Name == name && h.Typeflag == tar.TypeReg {
			return io.ReadAll(r)
		}
	}
}
