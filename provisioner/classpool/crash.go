package classpool

import (
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

// CrashAfterEnv names a step of the hand-over (grow.go) after whose write
// the provisioner kills itself with SIGKILL, as a crash or an OOM kill
// would: the end-to-end tests start it so, one step at a time, and check
// that a provisioner started afresh finishes the work with nothing leaked
// and nothing made twice. Unset, as everywhere else, it does nothing.
const CrashAfterEnv = "RECLAIMABLE_CRASH_AFTER"

// The steps CrashAfterEnv may name, in their order.
const (
	stepAsked      = "asked"       // the backing claim was created
	stepKept       = "kept"        // its volume was kept for the claim
	stepReleased   = "released"    // the backing claim was deleted
	stepHandedOver = "handed-over" // the volume was issued to the claim
)

var crashAfter = os.Getenv(CrashAfterEnv)

// crashPoint kills the process if CrashAfterEnv names step.
func crashPoint(step string) {
	if crashAfter != step {
		return
	}
	klog.InfoS("Crashing on purpose", "env", CrashAfterEnv, "step", step)
	klog.Flush()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
