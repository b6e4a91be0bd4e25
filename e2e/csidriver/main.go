// Command csidriver is a CSI driver for the end-to-end tests: its controller
// service makes and deletes volumes as entries of a state directory, so
// that a restarted driver still knows them, and records every CreateVolume
// and DeleteVolume it serves in a calls file that the tests count. It runs
// behind the real external-provisioner, as a cloud disk driver would. With
// --registration-dir it is also the node plugin of the real node: it
// registers with that node's kubelet and bind-mounts a volume's directory
// where the kubelet asks (node.go). With --zone its volumes are zonal, as a
// cloud disk is: each is reachable in the zone the external-provisioner
// asks for first, under the key topology.kubernetes.io/zone, and its node,
// if any, is in --zone. Its volumes' data is on this machine, whatever their zone:
// only the real node's pods reach it, fake nodes' pods never run.
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
	nodeID := flag.String("node-id", "", "the node the driver serves volumes on; with --registration-dir, its node service runs")
	registrationDir := flag.String("registration-dir", "", "the kubelet's plugins_registry directory, where the driver tells the kubelet of itself")
	zone := flag.String("zone", "", "given, its volumes are zonal: the zone of its node, and where a volume goes that the request puts nowhere")
	flag.Parse()
	if *endpoint == "" || *state == "" {
		log.Fatal("--endpoint and --state are required")
	}
	d := &driver{name: *name, dir: filepath.Join(*state, "volumes"), data: filepath.Join(*state, "data"), calls: filepath.Join(*state, "calls"), nodeID: *nodeID, zone: *zone}
	for _, dir := range []string{d.dir, d.data} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.Fatal(err)
		}
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
	if *registrationDir != "" {
		csi.RegisterNodeServer(srv, d)
		if err := d.serveRegistration(*registrationDir, *endpoint); err != nil {
			log.Fatal(err)
		}
	}
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
	csi.UnimplementedNodeServer
	name string
	// dir holds a file per volume, data a directory per volume: its data.
	dir, data string
	calls     string
	nodeID    string
	// zone is the node's zone; "" for volumes reachable from the node
	// alone (with a node) or from anywhere (without).
	zone string
	mu   sync.Mutex
}

func (d *driver) dataDir(id string) string { return filepath.Join(d.data, id) }

// volume is what the state directory holds of a volume, under its ID.
type volume struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
	// Zone is where a zonal volume is reachable.
	Zone string `json:"zone,omitempty"`
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "v1"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}
	if d.nodeID != "" || d.zone != "" {
		// Its volumes are reachable from its node, or its zone.
		caps = append(caps, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}},
		})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// zoneKey is the topology key of a zonal driver: the node label every
// cloud provider sets, so that a node's zone needs no label of the driver's.
const zoneKey = "topology.kubernetes.io/zone"

// nodeTopology is where the driver's node is: its zone, or with none, the
// node itself under the key <driver name>/node; nil for a driver without a
// node.
func (d *driver) nodeTopology() *csi.Topology {
	switch {
	case d.zone != "":
		return &csi.Topology{Segments: map[string]string{zoneKey: d.zone}}
	case d.nodeID != "":
		return &csi.Topology{Segments: map[string]string{d.name + "/node": d.nodeID}}
	}
	return nil
}

// zoneFor is the zone a new volume goes to: the first the request prefers
// (the selected node's, for a claim that waited for its consumer), else the
// first it allows; "" for a driver whose volumes are not zonal.
func (d *driver) zoneFor(req *csi.CreateVolumeRequest) (string, error) {
	if d.zone == "" {
		return "", nil
	}
	r := req.GetAccessibilityRequirements()
	for _, t := range append(r.GetPreferred(), r.GetRequisite()...) {
		if z := t.GetSegments()[zoneKey]; z != "" {
			return z, nil
		}
	}
	if r == nil {
		return d.zone, nil
	}
	return "", status.Errorf(codes.InvalidArgument, "volume %s: no zone among the accessibility requirements %v", req.GetName(), r)
}

// topology is where a volume in zone is reachable.
func (d *driver) topology(zone string) []*csi.Topology {
	if zone != "" {
		return []*csi.Topology{{Segments: map[string]string{zoneKey: zone}}}
	}
	if t := d.nodeTopology(); t != nil {
		return []*csi.Topology{t}
	}
	return nil
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
	zone, err := d.zoneFor(req)
	if err != nil {
		return nil, err
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
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: v.CapacityBytes, AccessibleTopology: d.topology(v.Zone)}}, nil
	}
	if err := os.MkdirAll(d.dataDir(req.GetName()), 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "making the data of volume %s: %v", req.GetName(), err)
	}
	// The consumers' user, whoever it is, writes there.
	if err := os.Chmod(d.dataDir(req.GetName()), 0o777); err != nil {
		return nil, status.Errorf(codes.Internal, "making the data of volume %s: %v", req.GetName(), err)
	}
	b, _ := json.Marshal(volume{Name: req.GetName(), CapacityBytes: size, Zone: zone})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, status.Errorf(codes.Internal, "writing volume %s: %v", req.GetName(), err)
	}
	if err := d.record("CreateVolume", req.GetName()); err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: size, AccessibleTopology: d.topology(zone)}}, nil
}

// DeleteVolume removes a volume; an unknown one is already gone.
func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if !validID.MatchString(req.GetVolumeId()) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid volume ID %q", req.GetVolumeId())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.RemoveAll(d.dataDir(req.GetVolumeId())); err != nil {
		return nil, status.Errorf(codes.Internal, "deleting the data of volume %s: %v", req.GetVolumeId(), err)
	}
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
