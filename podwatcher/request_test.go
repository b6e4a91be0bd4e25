package podwatcher

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

const validYAML = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  labels:
    team: build
  annotations:
    note: cache
spec:
  storageClassName: reclaimable
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`

const validJSON = `{"apiVersion":"v1","kind":"PersistentVolumeClaim",
	"spec":{"storageClassName":"reclaimable","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func ask(volume, enabled, template string) map[string]string {
	a := map[string]string{wellknown.EnabledKey(volume): enabled}
	if template != "" {
		a[wellknown.TemplateKey(volume)] = template
	}
	return a
}

func TestParseRequests(t *testing.T) {
	cache := []corev1.Volume{claimVolume("cache", "cache-claim")}
	tests := []struct {
		name        string
		annotations map[string]string
		volumes     []corev1.Volume
		wantClaims  []string // claim names, in order
		wantReasons []string // rejection reasons, in order
		wantInMsg   string   // text every rejection message must contain
	}{
		{name: "no annotations", annotations: nil, volumes: cache},
		{name: "valid YAML", annotations: ask("cache", "true", validYAML), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "valid JSON", annotations: ask("cache", "true", validJSON), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "JSON with tabs and a trailing newline", annotations: ask("cache", "true", "{\t\"spec\": {}}\n"), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "apiVersion and kind may be omitted", annotations: ask("cache", "true", "spec:\n  storageClassName: x\n"), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "leading separator and comments are one document", annotations: ask("cache", "true", "# cache\n---\n"+validYAML+"---\n# end\n"), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "enabled accepts Go booleans", annotations: ask("cache", "True", validYAML), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "same namespace in template is allowed", annotations: ask("cache", "true", "metadata:\n  namespace: ns\nspec: {}\n"), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "dataSourceRef in own namespace is allowed", annotations: ask("cache", "true", `{"spec":{"dataSourceRef":{"kind":"PersistentVolumeClaim","name":"src","namespace":"ns"}}}`), volumes: cache, wantClaims: []string{"cache-claim"}},
		{name: "enabled false is ignored even with a bad template", annotations: ask("cache", "false", "{{{"), volumes: cache},
		{name: "template without enabled is ignored", annotations: map[string]string{wellknown.TemplateKey("cache"): "{{{"}, volumes: cache},
		{name: "unrelated annotation under the prefix is ignored", annotations: map[string]string{wellknown.ClaimPrefix + "something": "x"}, volumes: cache},
		{
			name:        "two volumes, sorted",
			annotations: merge(ask("b", "true", validYAML), ask("a", "true", validJSON)),
			volumes:     []corev1.Volume{claimVolume("b", "claim-b"), claimVolume("a", "claim-a")},
			wantClaims:  []string{"claim-a", "claim-b"},
		},

		{name: "bad bool", annotations: ask("cache", "yes", validYAML), volumes: cache, wantReasons: []string{ReasonInvalidEnabled}, wantInMsg: `"yes"`},
		{name: "empty bool", annotations: ask("cache", "", validYAML), volumes: cache, wantReasons: []string{ReasonInvalidEnabled}},
		{name: "enabled without template", annotations: ask("cache", "true", ""), volumes: cache, wantReasons: []string{ReasonMissingTemplate}, wantInMsg: wellknown.TemplateKey("cache")},
		{name: "bad YAML", annotations: ask("cache", "true", "spec: [unclosed\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "bad JSON", annotations: ask("cache", "true", `{"spec": {`), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "two JSON objects without separator", annotations: ask("cache", "true", `{"spec":{}}{"spec":{}}`), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "empty template", annotations: ask("cache", "true", "  \n# nothing\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}, wantInMsg: "empty"},
		{name: "unknown field", annotations: ask("cache", "true", "spec:\n  storageClass: x\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}, wantInMsg: "storageClass"},
		{name: "field with wrong case", annotations: ask("cache", "true", "Spec: {}\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "duplicate YAML key", annotations: ask("cache", "true", "spec: {}\nspec: {}\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "bad quantity", annotations: ask("cache", "true", "spec:\n  resources:\n    requests:\n      storage: lots\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "bad document separator", annotations: ask("cache", "true", "--- spec: {}\n"), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}},
		{name: "oversized template", annotations: ask("cache", "true", "spec: {}\n#"+strings.Repeat("x", maxTemplateBytes)), volumes: cache, wantReasons: []string{ReasonInvalidTemplate}, wantInMsg: "bytes"},
		{name: "not a PVC: kind", annotations: ask("cache", "true", "apiVersion: v1\nkind: Pod\nspec: {}\n"), volumes: cache, wantReasons: []string{ReasonNotAClaim}, wantInMsg: `"Pod"`},
		{name: "not a PVC: apiVersion", annotations: ask("cache", "true", "apiVersion: apps/v1\nkind: PersistentVolumeClaim\n"), volumes: cache, wantReasons: []string{ReasonNotAClaim}},
		{name: "not a PVC: a list", annotations: ask("cache", "true", "- a\n- b\n"), volumes: cache, wantReasons: []string{ReasonNotAClaim}, wantInMsg: "list"},
		{name: "not a PVC: a string", annotations: ask("cache", "true", "hello"), volumes: cache, wantReasons: []string{ReasonNotAClaim}, wantInMsg: "string"},
		{name: "several documents", annotations: ask("cache", "true", validYAML+"---\n"+validYAML), volumes: cache, wantReasons: []string{ReasonMultipleDocuments}, wantInMsg: "several YAML documents"},
		{name: "several JSON documents", annotations: ask("cache", "true", validJSON+"\n---\n"+validJSON), volumes: cache, wantReasons: []string{ReasonMultipleDocuments}},
		{name: "missing volume", annotations: ask("data", "true", validYAML), volumes: cache, wantReasons: []string{ReasonVolumeNotFound}, wantInMsg: `"data"`},
		{name: "no volumes at all", annotations: ask("cache", "true", validYAML), wantReasons: []string{ReasonVolumeNotFound}},
		{
			name:        "volume not a PVC",
			annotations: ask("cache", "true", validYAML),
			volumes:     []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			wantReasons: []string{ReasonVolumeNotAClaim},
		},
		{name: "template sets another namespace", annotations: ask("cache", "true", "metadata:\n  namespace: other\nspec: {}\n"), volumes: cache, wantReasons: []string{ReasonForbiddenNamespace}, wantInMsg: `"other"`},
		{name: "template sets volumeName", annotations: ask("cache", "true", "spec:\n  volumeName: pv-1\n"), volumes: cache, wantReasons: []string{ReasonForbiddenVolumeName}, wantInMsg: `"pv-1"`},
		{
			name:        "dataSourceRef into another namespace",
			annotations: ask("cache", "true", `{"spec":{"dataSourceRef":{"kind":"PersistentVolumeClaim","name":"src","namespace":"other"}}}`),
			volumes:     cache, wantReasons: []string{ReasonForbiddenDataSource}, wantInMsg: `"other"`,
		},
		{name: "binding annotation in template", annotations: ask("cache", "true", "metadata:\n  annotations:\n    volume.kubernetes.io/selected-node: n1\n"), volumes: cache, wantReasons: []string{ReasonForbiddenAnnotation}},
		// The outcome the releaser reads to spare a volume its scrub: only
		// the podwatcher writes it, once the owner ended.
		{name: "consumer outcome in template", annotations: ask("cache", "true", "metadata:\n  annotations:\n    reclaimable.github.io/consumer-outcome: Succeeded\n"), volumes: cache, wantReasons: []string{ReasonForbiddenAnnotation}},
		{
			name:        "two volumes ask for one claim",
			annotations: merge(ask("a", "true", validYAML), ask("b", "true", validYAML)),
			volumes:     []corev1.Volume{claimVolume("a", "same"), claimVolume("b", "same")},
			wantReasons: []string{ReasonDuplicateClaimName},
		},
		{
			name:        "one bad volume stops the good one too",
			annotations: merge(ask("a", "true", validYAML), ask("b", "maybe", validYAML)),
			volumes:     []corev1.Volume{claimVolume("a", "claim-a"), claimVolume("b", "claim-b")},
			wantReasons: []string{ReasonInvalidEnabled},
		},
		{
			name:        "every bad volume is reported",
			annotations: merge(ask("a", "nope", validYAML), ask("b", "true", "kind: Pod\n")),
			volumes:     []corev1.Volume{claimVolume("a", "claim-a"), claimVolume("b", "claim-b")},
			wantReasons: []string{ReasonInvalidEnabled, ReasonNotAClaim},
		},
		{name: "too many volumes", annotations: manyVolumes(maxVolumes + 1), volumes: cache, wantReasons: []string{ReasonTooManyVolumes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requests, rejections := parseRequests("ns", tt.annotations, tt.volumes)
			var gotClaims, gotReasons []string
			for _, r := range requests {
				gotClaims = append(gotClaims, r.ClaimName)
				if r.Template == nil {
					t.Errorf("request for %s has no template", r.ClaimName)
				}
			}
			for _, r := range rejections {
				gotReasons = append(gotReasons, r.Reason)
				if r.Message == "" || len(r.Message) > maxMessage+100 || !utf8.ValidString(r.Message) {
					t.Errorf("rejection %s: unusable message %q", r.Reason, r.Message)
				}
				if !strings.Contains(r.Message, tt.wantInMsg) {
					t.Errorf("rejection %s: message %q does not mention %q", r.Reason, r.Message, tt.wantInMsg)
				}
			}
			if strings.Join(gotClaims, ",") != strings.Join(tt.wantClaims, ",") {
				t.Errorf("claims = %v, want %v", gotClaims, tt.wantClaims)
			}
			if strings.Join(gotReasons, ",") != strings.Join(tt.wantReasons, ",") {
				t.Errorf("rejections = %v (%v), want %v", gotReasons, rejections, tt.wantReasons)
			}
		})
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func manyVolumes(n int) map[string]string {
	out := map[string]string{}
	for i := range n {
		out[wellknown.EnabledKey("v"+strings.Repeat("x", i))] = "true"
	}
	return out
}

func TestParseTemplateKeepsFields(t *testing.T) {
	requests, rejections := parseRequests("ns", ask("cache", "true", validYAML), []corev1.Volume{claimVolume("cache", "c")})
	if len(rejections) > 0 || len(requests) != 1 {
		t.Fatalf("got %v, %v", requests, rejections)
	}
	tmpl := requests[0].Template
	if got := tmpl.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("storage = %s, want 1Gi", got.String())
	}
	if tmpl.Spec.StorageClassName == nil || *tmpl.Spec.StorageClassName != "reclaimable" {
		t.Errorf("storageClassName = %v", tmpl.Spec.StorageClassName)
	}
	if len(tmpl.Spec.AccessModes) != 1 || tmpl.Spec.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("accessModes = %v", tmpl.Spec.AccessModes)
	}
}

func TestBuildClaim(t *testing.T) {
	template := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "ignored",
			GenerateName:    "ignored-",
			Namespace:       "ns",
			Labels:          map[string]string{"team": "build", wellknown.ClaimManagedBy: "someone-else", wellknown.ClaimedBy: "forged"},
			Annotations:     map[string]string{"note": "cache", ownerAnnotation: "Job/forged"},
			Finalizers:      []string{"example.com/hold"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}},
		},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}},
	}
	longName := strings.Repeat("p", 253)
	o := owner{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: longName, UID: "0b3c9a2e-5b8f-4f0e-9a53-2c1d6b7e8f90"}
	claim := buildClaim(claimRequest{Volume: "cache", ClaimName: "cache-claim", Template: template}, o, "my-id")

	if claim.Name != "cache-claim" || claim.Namespace != "ns" || claim.GenerateName != "" {
		t.Errorf("name/namespace = %q/%q generateName %q", claim.Namespace, claim.Name, claim.GenerateName)
	}
	wantLabels := map[string]string{"team": "build", wellknown.ClaimManagedBy: "my-id", wellknown.ClaimedBy: string(o.UID)}
	if len(claim.Labels) != len(wantLabels) {
		t.Errorf("labels = %v, want %v", claim.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if claim.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, claim.Labels[k], v)
		}
		if msgs := validation.IsValidLabelValue(claim.Labels[k]); len(msgs) > 0 {
			t.Errorf("label %s is not a valid label value: %v", k, msgs)
		}
	}
	if claim.Annotations["note"] != "cache" || claim.Annotations[ownerAnnotation] != "Pod/"+longName {
		t.Errorf("annotations = %v", claim.Annotations)
	}
	if len(claim.Finalizers) != 0 {
		t.Errorf("finalizers from the template were kept: %v", claim.Finalizers)
	}
	if len(claim.OwnerReferences) != 1 {
		t.Fatalf("ownerReferences = %v", claim.OwnerReferences)
	}
	ref := claim.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name != longName || ref.UID != o.UID ||
		ref.Controller == nil || !*ref.Controller || ref.BlockOwnerDeletion != nil {
		t.Errorf("ownerReference = %+v", ref)
	}
	if len(claim.Spec.AccessModes) != 1 || claim.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("spec not copied: %+v", claim.Spec)
	}
	// The claim must not share maps with the template, which lives in the cache.
	claim.Annotations["note"] = "changed"
	if template.Annotations["note"] != "cache" {
		t.Error("buildClaim shares the template's annotations")
	}
}

func TestTruncate(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := truncate(s, 5)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || len(got) > 5+3 {
		t.Errorf("truncate = %q", got)
	}
	if truncate("short", 10) != "short" {
		t.Error("short strings must be kept")
	}
}

// FuzzParseRequests checks that no annotation value can make the parser
// panic, and that it always answers with claims or rejections, never both.
func FuzzParseRequests(f *testing.F) {
	for _, seed := range []string{
		validYAML, validJSON, "", "---", "--- x", "- a", "null", "{", "[1,2]", "\"s\"", "123",
		validYAML + "---\n" + validYAML,
		"a: &a [*a, *a]\nb: *a\n",
		"x: &a [a,a,a,a,a,a,a,a,a]\ny: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nz: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n",
		"metadata:\n  namespace: other\n", "spec:\n  volumeName: x\n", "kind: Pod\n",
		`{"spec":{"dataSourceRef":{"namespace":"x","name":"y","kind":"z"}}}`,
		"spec:\n  resources:\n    requests:\n      storage: 1e999999\n",
	} {
		f.Add("true", seed)
	}
	f.Add("maybe", validYAML)
	volumes := []corev1.Volume{claimVolume("cache", "cache-claim")}
	f.Fuzz(func(t *testing.T, enabled, template string) {
		requests, rejections := parseRequests("ns", ask("cache", enabled, template), volumes)
		if len(requests) > 0 && len(rejections) > 0 {
			t.Fatalf("both claims and rejections: %v %v", requests, rejections)
		}
		for _, r := range rejections {
			if r.Reason == "" || r.Message == "" || !utf8.ValidString(r.Message) && utf8.ValidString(template) {
				t.Fatalf("unusable rejection %+v", r)
			}
		}
		for _, r := range requests {
			claim := buildClaim(r, owner{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p", UID: "u"}, "id")
			if claim.Namespace != "ns" || claim.Spec.VolumeName != "" || claim.Name != "cache-claim" {
				t.Fatalf("claim escapes its owner: %+v", claim.ObjectMeta)
			}
		}
	})
}
