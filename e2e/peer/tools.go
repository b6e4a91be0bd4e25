//go:build tools

package peer

// agnhost is the image Kubernetes' tests run in many of their pods; the
// test bed builds it from this pinned source and loads it into the real
// node under its upstream name. ginkgo runs the suite's tests in parallel
// processes, as Kubernetes' own jobs do.
import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
