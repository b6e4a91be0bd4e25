// Package controllertest holds what the controllers' unit tests share.
package controllertest

import (
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// Events drains the events rec has recorded so far, each as
// "<type> <reason> <message>".
func Events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Actions lists the requests a fake clientset has received, each as
// "<verb> <resource>".
func Actions(client interface{ Actions() []k8stesting.Action }) []string {
	var out []string
	for _, a := range client.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}
