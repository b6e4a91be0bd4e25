// Command csidriver is a CSI driver for the end-to-end tests: its controller
// service makes and deletes volumes as entries of a state directory, so
// that a restarted driver still knows them, and records every CreateVolume
// and DeleteVolume it serves in a calls file that the tests count. It runs
// behind the real external-provisioner, as a cloud disk driver would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve on")
	name := flag.String("name", "csi.e2e.reclaimable.io", "the driver's name")
	state := flag.String("state", "", "directory holding the volumes and the calls file")
	flag.Parse()
	if *endpoint == "" || *state == "" {
		log.Fatal("--endpoint and --state are required")
	}
	d := &driver{name: *name, dir: filepath.Join(*state, "volumes"), calls: filepath.Join(*state, "calls")}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(*endpoint)
	l, err := net.Listen("unix", *endpoint)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		log.Printf("%s: %v", info.FullMethod, err)
		return resp, err
	}))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; srv.Stop() }()
	log.Printf("serving %s on %s", *name, *endpoint)
	if err := srv.Serve(l); err != nil {
		log.Fatal(err)
	}
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	name  string
	dir   string
	calls string
	mu    sync.Mutex
}

// volume is what the state directory holds of a volume, under its ID.
type volume struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "v1"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}}, nil
}

// maxBytes is the largest volume the driver makes: 1 TiB.
const maxBytes = 1 << 40

// validID keeps IDs to names a file may have.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,252}$`)

// CreateVolume makes a volume whose ID is its name: a retry of a create
// finds what the first made, as the CSI spec asks.
func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if !validID.MatchString(req.GetName()) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid volume name %q", req.GetName())
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size > maxBytes {
		// As a cloud disk's size limit: what the tests see refused.
		return nil, status.Errorf(codes.OutOfRange, "volume %s: %d bytes asked, this driver makes at most %d", req.GetName(), size, maxBytes)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	path := filepath.Join(d.dir, req.GetName())
	if b, err := os.ReadFile(path); err == nil {
		var v volume
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, status.Errorf(codes.Internal, "reading volume %s: %v", req.GetName(), err)
		}
		if v.CapacityBytes < size {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", req.GetName(), v.CapacityBytes)
		}
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: v.CapacityBytes}}, nil
	}
	b, _ := json.Marshal(volume{Name: req.GetName(), CapacityBytes: size})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, status.Errorf(codes.Internal, "writing volume %s: %v", req.GetName(), err)
	}
	if err := d.record("CreateVolume", req.GetName()); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: size}}, nil
}

// DeleteVolume removes a volume; an unknown one is already gone.
func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if !validID.MatchString(req.GetVolumeId()) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid volume ID %q", req.GetVolumeId())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch err := os.Remove(filepath.Join(d.dir, req.GetVolumeId())); {
	case errors.Is(err, os.ErrNotExist):
		return &csi.DeleteVolumeResponse{}, nil
	case err != nil:
		return nil, status.Errorf(codes.Internal, "deleting volume %s: %v", req.GetVolumeId(), err)
	}
	if err := d.record("DeleteVolume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := os.Stat(filepath.Join(d.dir, req.GetVolumeId())); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}

// record appends a line "<call> <volume>" to the calls file, for each
// volume made or removed (not for retries that found it so).
func (d *driver) record(call, volume string) error {
	f, err := os.OpenFile(d.calls, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %s\n", call, volume)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return status.Errorf(codes.Internal, "recording %s of %s: %v", call, volume, err)
	}
	return nil
}
