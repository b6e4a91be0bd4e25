// The CSI driver the end-to-end tests run behind the real
// external-provisioner. A module of its own: the project's users never
// download gRPC or the CSI spec.
module github.com/reclaimable/reclaimable/e2e/csidriver

go 1.24.0

require (
	github.com/container-storage-interface/spec v1.9.0
	google.golang.org/grpc v1.72.1
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	golang.org/x/net v0.35.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/text v0.22.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250218202821-56aae31c358a // indirect
	google.golang.org/protobuf v1.36.5 // indirect
)
