package provisioner

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// The library records a ProvisioningFailed Warning for every error Provision
// returns, with Provision's message. Provision reports every failure itself,
// under a reason that says what to do (PoolExhausted, InvalidStorageClass-
// Parameters, ...), so each failed attempt would leave two Warnings with the
// same message. It also records a Provisioning notice before every attempt:
// a write to the API server for each claim that says nothing the result's
// event (IssuedFromPool, ProvisioningSucceeded, or the failure's) does not.
// The library takes no recorder of ours: it records through the client it
// is given, and libClient is that client with those events left out.

// libFailurePrefix starts the message of the library's event for an error
// from Provision. Should a new library version word it otherwise, its events
// come back as duplicates; none of ours is lost.
const libFailurePrefix = "failed to provision volume with StorageClass "

// libClient is the client the library works with: client itself, except
// that its events skip the library's copies of Provision's failures.
type libClient struct{ kubernetes.Interface }

func (c libClient) CoreV1() typedcorev1.CoreV1Interface { return libCoreV1{c.Interface.CoreV1()} }

type libCoreV1 struct{ typedcorev1.CoreV1Interface }

func (c libCoreV1) Events(ns string) typedcorev1.EventInterface {
	return libEvents{c.CoreV1Interface.Events(ns)}
}

// libEvents is what the library's event broadcaster writes to.
type libEvents struct{ typedcorev1.EventInterface }

func (e libEvents) CreateWithEventNamespace(ev *corev1.Event) (*corev1.Event, error) {
	if leftOut(ev) {
		return ev, nil
	}
	return e.EventInterface.CreateWithEventNamespace(ev)
}

func (e libEvents) UpdateWithEventNamespace(ev *corev1.Event) (*corev1.Event, error) {
	if leftOut(ev) {
		return ev, nil
	}
	return e.EventInterface.UpdateWithEventNamespace(ev)
}

func (e libEvents) PatchWithEventNamespace(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	if leftOut(ev) {
		return ev, nil
	}
	return e.EventInterface.PatchWithEventNamespace(ev, data)
}

// leftOutEvent sees each library event left out; tests wait on it.
var leftOutEvent = func(*corev1.Event) {}

// leftOut reports whether ev is one of the library's events that are not
// written: its copy of a failure Provision has reported already, or its
// notice that an attempt starts.
func leftOut(ev *corev1.Event) bool {
	out := ev.Type == corev1.EventTypeNormal && ev.Reason == "Provisioning" ||
		ev.Type == corev1.EventTypeWarning && ev.Reason == "ProvisioningFailed" && strings.HasPrefix(ev.Message, libFailurePrefix)
	if out {
		leftOutEvent(ev)
	}
	return out
}
