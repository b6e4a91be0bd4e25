package framework

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// EventQuery says which event WaitEvent waits for. Empty fields match any.
type EventQuery struct {
	// Namespace holds the object's events: a cluster-scoped object's are in
	// "default".
	Namespace          string
	Kind, Name, Reason string
	// Type is Normal or Warning.
	Type string
	// Message is a part of the message.
	Message string
	// Component is the source that reported it.
	Component string
}

func (q EventQuery) String() string {
	s := fmt.Sprintf("a %s event %s on %s %s/%s", q.Type, q.Reason, q.Kind, q.Namespace, q.Name)
	if q.Message != "" {
		s += fmt.Sprintf(" saying %q", q.Message)
	}
	if q.Component != "" {
		s += " from " + q.Component
	}
	return strings.Join(strings.Fields(s), " ")
}

func (q EventQuery) matches(e corev1.Event) bool {
	return (q.Type == "" || e.Type == q.Type) &&
		strings.Contains(e.Message, q.Message) &&
		(q.Component == "" || e.Source.Component == q.Component || e.ReportingController == q.Component)
}

// WaitEvent waits up to timeout for an event that q matches and returns it.
func WaitEvent(t testing.TB, timeout time.Duration, q EventQuery) corev1.Event {
	t.Helper()
	selector := fields.Set{}
	for field, value := range map[string]string{"involvedObject.kind": q.Kind, "involvedObject.name": q.Name, "reason": q.Reason} {
		if value != "" {
			selector[field] = value
		}
	}
	var found corev1.Event
	Eventually(t, timeout, func(ctx context.Context) (bool, error) {
		events, err := Client().CoreV1().Events(q.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if q.matches(e) {
				found = e
				return true, nil
			}
		}
		return false, nil
	}, q.String())
	return found
}
