// Package lifecycletest plays the kubelet for lifecycle pods in unit tests.
package lifecycletest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Finish plays the kubelet: once the lifecycle pod exists, it ends it in
// phase with message.
func Finish(t *testing.T, client *fake.Clientset, name string, phase corev1.PodPhase, message string) {
	t.Helper()
	go func() {
		ctx := context.Background()
		for {
			p, err := client.CoreV1().Pods("lifecycle").Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				p.Status.Phase = phase
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "lifecycle", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: message},
				}}}
				if _, err := client.CoreV1().Pods("lifecycle").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err == nil {
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
}
