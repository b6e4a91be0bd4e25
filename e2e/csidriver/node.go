package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The node service: a volume is a directory of the state directory, which
// NodePublishVolume bind-mounts where the kubelet asks. The driver runs on
// the machine of the real node, so its controller's directories are the
// node's. No staging: the kubelet publishes straight away.

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID, AccessibleTopology: d.nodeTopology()}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if !validID.MatchString(id) || !filepath.IsAbs(target) {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q, target %q", id, target)
	}
	source := d.dataDir(id)
	if _, err := os.Stat(source); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", id, err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "making %s: %v", target, err)
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "mounting volume %s on %s: %v", id, target, err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "making the mount of volume %s read-only: %v", id, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if !filepath.IsAbs(target) {
		return nil, status.Errorf(codes.InvalidArgument, "target %q", target)
	}
	if mounted(target) {
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmounting %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mounted reports whether path is a mount point, as /proc says.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	// The fifth field is the mount point, spaces and the like octal-escaped.
	escaped := strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`).Replace(path)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == escaped {
			return true
		}
	}
	return false
}

// serveRegistration tells the kubelet watching dir (its plugins_registry)
// about the driver, as node-driver-registrar does for other drivers.
func (d *driver) serveRegistration(dir, endpoint string) error {
	// The kubelet knows the plugin by what GetInfo says; the socket's name
	// only has to be unique, and short: a unix socket's path is at most
	// 107 bytes, and the kubelet's directory is deep already.
	socket := filepath.Join(dir, fmt.Sprintf("r%d.sock", os.Getpid()))
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	registration.RegisterRegistrationServer(srv, registrar{name: d.name, endpoint: endpoint})
	go func() {
		if err := srv.Serve(l); err != nil {
			log.Printf("registration server: %v", err)
		}
	}()
	return nil
}

type registrar struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
}

func (r registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	log.Printf("registered with the kubelet: %v %s", s.GetPluginRegistered(), s.GetError())
	return &registration.RegistrationStatusResponse{}, nil
}
