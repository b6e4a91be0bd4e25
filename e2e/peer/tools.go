//go:build tools

package peer

// agnhost is the image Kubernetes' tests run in many of their pods; the
// test bed builds it from this pinned source and loads it into the real
// node under its upstream name.
import _ "k8s.io/kubernetes/test/images/agnhost"
