// The CSI driver the end-to-end tests run behind the real
// external-provisioner. A module of its own: the project's users never
// download gRPC or the CSI spec.
module github.com/reclaimable/reclaimable/e2e/csidriver

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.9.0
	golang.org/x/sys v0.50.0
	google.golang.org/grpc v1.72.1
	k8s.io/kubelet v0.34.10
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250303144028-a0af3efb3deb // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
