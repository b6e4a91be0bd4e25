//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/e2e/objects"
)

// claimsGatePolicy reads the claims-gate component's policy and binding.
func claimsGatePolicy(t *testing.T) (*admissionv1beta1.MutatingAdmissionPolicy, *admissionv1beta1.MutatingAdmissionPolicyBinding) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(manifestsDir(), "components", "claims-gate", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var policy *admissionv1beta1.MutatingAdmissionPolicy
	var binding *admissionv1beta1.MutatingAdmissionPolicyBinding
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *admissionv1beta1.MutatingAdmissionPolicy:
			policy = o
		case *admissionv1beta1.MutatingAdmissionPolicyBinding:
			binding = o
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("policy.yaml lacks the policy or its binding")
	}
	return policy, binding
}

// The claims-gate component's policy, bound to this test's namespace and
// podwatcher: an annotated pod gets the gate at creation while the
// podwatcher leads, and is released by it; a pod without annotations never
// gets it; once the podwatcher has stopped and given its Lease up, new pods
// are not gated, so that none waits for a podwatcher that is not there.
func TestGateAddedAtAdmissionWhileAPodwatcherLeads(t *testing.T) {
	t.Parallel()
	e := newPWTest(t)
	e.retainVolume()
	client := e.client
	lease := e.id + "-podwatcher"

	policy, binding := claimsGatePolicy(t)
	policy.Name = framework.Name("claims-gate")
	binding.Name = policy.Name
	binding.Spec.PolicyName = policy.Name
	binding.Spec.ParamRef.Name, binding.Spec.ParamRef.Namespace = lease, metav1.NamespaceDefault
	binding.Spec.MatchResources = &admissionv1beta1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns},
	}}
	if _, err := client.AdmissionregistrationV1beta1().MutatingAdmissionPolicies().Create(e.ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1beta1().MutatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	if _, err := client.AdmissionregistrationV1beta1().MutatingAdmissionPolicyBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1beta1().MutatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})

	annotations := pwAnnotations("cache", "true", e.template())
	// What admission makes of a pod, without creating it.
	admitted := func(ctx context.Context, annotations map[string]string) (*corev1.Pod, error) {
		return client.CoreV1().Pods(e.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: framework.Name("dry"), Annotations: annotations},
			Spec:       pwPodSpec(objects.ClaimVolume("cache", "dry-cache")),
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	p := e.startEventDriven()
	// The API server loads a new policy and its parameter within moments.
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pod, err := admitted(ctx, annotations)
		return err == nil && hasClaimsGate(pod), err
	}, "the policy to gate annotated pods while the podwatcher leads")

	pod := e.pod("admitted", "admitted-cache", annotations)
	if !hasClaimsGate(pod) {
		t.Fatalf("annotated pod created without the claims gate: %v", pod.Spec.SchedulingGates)
	}
	e.waitUngated(e.followPod(pod.Name, pod.ResourceVersion), pod)
	e.waitScheduled(pod.Name)
	if plain := e.pod("plain", "plain-cache", nil); len(plain.Spec.SchedulingGates) != 0 {
		t.Errorf("pod without claim annotations gated: %v", plain.Spec.SchedulingGates)
	}

	stopped := time.Now()
	p.Stop()
	framework.Eventually(t, 30*time.Second, func(ctx context.Context) (bool, error) {
		pod, err := admitted(ctx, annotations)
		return err == nil && !hasClaimsGate(pod), err
	}, "the policy to stop gating pods once the podwatcher has given its Lease up")
	t.Logf("new pods no longer gated %s after the podwatcher was told to stop", time.Since(stopped).Round(time.Millisecond))
	if late := e.pod("late", "late-cache", annotations); hasClaimsGate(late) {
		t.Errorf("pod created while no podwatcher runs was gated: %v", late.Spec.SchedulingGates)
	}
}
