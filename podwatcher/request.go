package podwatcher

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// Reasons of the Warning events for annotations that cannot be honoured. Each
// names one mistake, so that users (and alerts on the rejections metric) can
// tell them apart.
const (
	ReasonInvalidEnabled      = "InvalidEnabledAnnotation"
	ReasonMissingTemplate     = "MissingClaimTemplate"
	ReasonInvalidTemplate     = "InvalidClaimTemplate"
	ReasonNotAClaim           = "NotAPersistentVolumeClaim"
	ReasonMultipleDocuments   = "MultipleDocuments"
	ReasonVolumeNotFound      = "VolumeNotFound"
	ReasonVolumeNotAClaim     = "VolumeNotAClaim"
	ReasonDuplicateClaimName  = "DuplicateClaimName"
	ReasonForbiddenNamespace  = "ForbiddenNamespace"
	ReasonForbiddenVolumeName = "ForbiddenVolumeName"
	ReasonForbiddenDataSource = "ForbiddenDataSource"
	ReasonForbiddenAnnotation = "ForbiddenAnnotation"
	ReasonTooManyVolumes      = "TooManyVolumes"
)

const (
	// maxTemplateBytes bounds the parsing work per template; a claim
	// template is a few hundred bytes, and larger input is rejected before
	// any parsing. (All annotations of an object together are limited to
	// 256 KiB by the API server.)
	maxTemplateBytes = 64 * 1024
	// maxVolumes bounds the claims one owner can ask for, and so the work
	// and the events one object can cause.
	maxVolumes = 64
	// maxMessage keeps event messages readable; parser errors can quote
	// large parts of the input.
	maxMessage = 600
)

// claimRequest is one claim an owner asks for.
type claimRequest struct {
	// Volume is the name of the owner's volume that mounts the claim.
	Volume string
	// Template is the parsed template: only its labels, annotations and
	// spec are used.
	Template *corev1.PersistentVolumeClaim
	// ClaimName is the volume's persistentVolumeClaim.claimName.
	ClaimName string
	// Source is the template annotation as written, so that a template the
	// API server refused is not sent again until the user changes it.
	Source string
}

// rejection is an annotation that cannot be honoured.
type rejection struct {
	Volume, Reason, Message string
}

// parseRequests reads the claim annotations of an owner in namespace with
// the given volumes (a Pod's, or a Job's pod template's). It returns either
// the claims to create or, if any annotation is wrong, only the rejections:
// a workload that cannot get all its claims never gets some of them, so no
// volume is taken from the pool for a pod that cannot start.
//
// A volume takes part when its ".enabled" annotation is present; a ".pvc"
// annotation alone is ignored, and ".enabled: false" switches a volume off.
func parseRequests(namespace string, annotations map[string]string, volumes []corev1.Volume) ([]claimRequest, []rejection) {
	enabled := enabledVolumes(annotations)
	if len(enabled) == 0 {
		return nil, nil
	}
	if len(enabled) > maxVolumes {
		return nil, []rejection{{Reason: ReasonTooManyVolumes, Message: fmt.Sprintf(
			"%d volumes carry %q annotations; at most %d can ask for a claim: remove the annotations of the others",
			len(enabled), wellknown.ClaimPrefix+"<volume>"+wellknown.EnabledSuffix, maxVolumes)}}
	}

	byName := make(map[string]*corev1.Volume, len(volumes))
	for i := range volumes {
		if _, dup := byName[volumes[i].Name]; !dup {
			byName[volumes[i].Name] = &volumes[i]
		}
	}

	var (
		requests   []claimRequest
		rejections []rejection
		claimedBy  = map[string]string{} // claim name -> volume asking for it
	)
	for _, volume := range enabled {
		req, rej, on := parseRequest(namespace, volume, annotations, byName[volume])
		switch {
		case rej != nil:
			rejections = append(rejections, *rej)
			continue
		case !on:
			continue
		}
		if other, dup := claimedBy[req.ClaimName]; dup {
			rejections = append(rejections, rejection{volume, ReasonDuplicateClaimName, fmt.Sprintf(
				"volumes %q and %q both ask for claim %q: give each volume its own claimName, or annotate only one of them",
				other, volume, req.ClaimName)})
			continue
		}
		claimedBy[req.ClaimName] = volume
		requests = append(requests, req)
	}
	if len(rejections) > 0 {
		return nil, rejections
	}
	return requests, nil
}

// parseRequest reads the request of volume, whose annotations enable it,
// v being the pod's volume of that name (nil for none): on is false when
// its annotation turns it off, and a rejection says what is wrong.
func parseRequest(namespace, volume string, annotations map[string]string, v *corev1.Volume) (claimRequest, *rejection, bool) {
	enabledKey := wellknown.EnabledKey(volume)
	on, err := strconv.ParseBool(annotations[enabledKey])
	if err != nil {
		return claimRequest{}, &rejection{volume, ReasonInvalidEnabled, fmt.Sprintf(
			"annotation %s is %q, which is not a boolean: set it to \"true\" or \"false\"",
			enabledKey, truncate(annotations[enabledKey], 64))}, false
	}
	if !on {
		return claimRequest{}, nil, false
	}
	templateKey := wellknown.TemplateKey(volume)
	source, ok := annotations[templateKey]
	switch {
	case !ok:
		return claimRequest{}, &rejection{volume, ReasonMissingTemplate, fmt.Sprintf(
			"annotation %s is true but %s is missing: set it to a PersistentVolumeClaim in YAML or JSON",
			enabledKey, templateKey)}, true
	case v == nil:
		return claimRequest{}, &rejection{volume, ReasonVolumeNotFound, fmt.Sprintf(
			"annotation %s names volume %q, but spec.volumes has no volume of that name: add it with persistentVolumeClaim.claimName, or correct the annotation key",
			enabledKey, volume)}, true
	case v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName == "":
		return claimRequest{}, &rejection{volume, ReasonVolumeNotAClaim, fmt.Sprintf(
			"volume %q is not a persistentVolumeClaim volume: give it persistentVolumeClaim.claimName, the name of the claim to create",
			volume)}, true
	}
	template, rej := parseTemplate(templateKey, source)
	if rej == nil {
		rej = checkTemplate(namespace, template)
	}
	if rej != nil {
		rej.Volume = volume
		return claimRequest{}, rej, true
	}
	return claimRequest{Volume: volume, Template: template, ClaimName: v.PersistentVolumeClaim.ClaimName, Source: source}, nil, true
}

// enabledVolumes returns, sorted, the volumes that have an ".enabled"
// annotation, whatever its value.
func enabledVolumes(annotations map[string]string) []string {
	var volumes []string
	for key := range annotations {
		if volume, ok := enabledVolume(key); ok {
			volumes = append(volumes, volume)
		}
	}
	slices.Sort(volumes)
	return volumes
}

// enabledVolume returns the volume an ".enabled" annotation key is about.
func enabledVolume(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, wellknown.ClaimPrefix)
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, wellknown.EnabledSuffix)
}

// parseTemplate decodes one PersistentVolumeClaim from YAML or JSON, the way
// kubectl reads a manifest: documents are split at "---" lines, YAML is
// converted to JSON, and the JSON is decoded strictly (case-sensitive, no
// unknown or duplicate fields), so that a typo is reported instead of being
// silently dropped. apiVersion and kind may be left out; when present they
// must be "v1" and "PersistentVolumeClaim".
func parseTemplate(key, source string) (*corev1.PersistentVolumeClaim, *rejection) {
	invalid := func(format string, args ...any) *rejection {
		// Parser errors span lines; an event message reads better on one.
		detail := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
		return &rejection{Reason: ReasonInvalidTemplate, Message: truncate(fmt.Sprintf("annotation %s: %s", key, detail), maxMessage)}
	}
	if len(source) > maxTemplateBytes {
		return nil, invalid("the template is %d bytes, more than the %d a claim can need", len(source), maxTemplateBytes)
	}

	var doc []byte
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(source)))
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalid("not valid YAML or JSON: %v", err)
		}
		js, err := toJSON(chunk)
		if err != nil {
			return nil, invalid("not valid YAML or JSON: %v", err)
		}
		if isNull(js) { // only whitespace and comments
			continue
		}
		if doc != nil {
			return nil, &rejection{Reason: ReasonMultipleDocuments, Message: fmt.Sprintf(
				"annotation %s holds several YAML documents (separated by ---): it must hold exactly one PersistentVolumeClaim", key)}
		}
		doc = js
	}
	if doc == nil {
		return nil, invalid("the template is empty: write one PersistentVolumeClaim in YAML or JSON")
	}

	if doc[0] != '{' {
		return nil, &rejection{Reason: ReasonNotAClaim, Message: fmt.Sprintf(
			"annotation %s holds a %s, not an object: it must hold one PersistentVolumeClaim", key, jsonKind(doc[0]))}
	}
	var typeMeta metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(doc, &typeMeta); err != nil {
		return nil, invalid("%v", err)
	}
	if (typeMeta.Kind != "" && typeMeta.Kind != "PersistentVolumeClaim") || (typeMeta.APIVersion != "" && typeMeta.APIVersion != "v1") {
		return nil, &rejection{Reason: ReasonNotAClaim, Message: truncate(fmt.Sprintf(
			"annotation %s holds apiVersion %q kind %q: it must hold a PersistentVolumeClaim (apiVersion v1)",
			key, typeMeta.APIVersion, typeMeta.Kind), maxMessage)}
	}

	claim := &corev1.PersistentVolumeClaim{}
	strictErrs, err := sigsjson.UnmarshalStrict(doc, claim)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, 0, len(strictErrs))
		for _, e := range strictErrs {
			msgs = append(msgs, e.Error())
		}
		return nil, invalid("%s", strings.Join(msgs, "; "))
	}
	return claim, nil
}

// toJSON converts one YAML document to JSON; JSON passes through unchanged
// so that its errors read as JSON errors.
func toJSON(doc []byte) ([]byte, error) {
	doc = bytes.TrimSpace(doc)
	if utilyaml.IsJSONBuffer(doc) {
		return doc, nil
	}
	return yaml.YAMLToJSONStrict(doc)
}

func isNull(js []byte) bool {
	js = bytes.TrimSpace(js)
	return len(js) == 0 || string(js) == "null"
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "list"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	default:
		return "number"
	}
}

// checkTemplate refuses templates that would reach beyond the owner: into
// another namespace, onto a volume picked by name (which could hand out a
// volume holding someone else's data), onto fields that drive binding, or
// onto the outcome the podwatcher records.
func checkTemplate(namespace string, t *corev1.PersistentVolumeClaim) *rejection {
	if t.Namespace != "" && t.Namespace != namespace {
		return &rejection{Reason: ReasonForbiddenNamespace, Message: truncate(fmt.Sprintf(
			"the claim template sets metadata.namespace %q, but claims are created in the namespace of their owner, %q: remove metadata.namespace",
			t.Namespace, namespace), maxMessage)}
	}
	if t.Spec.VolumeName != "" {
		return &rejection{Reason: ReasonForbiddenVolumeName, Message: truncate(fmt.Sprintf(
			"the claim template sets spec.volumeName %q; claims may not pick a volume by name: remove spec.volumeName and choose volumes with storageClassName or spec.selector",
			t.Spec.VolumeName), maxMessage)}
	}
	if ref := t.Spec.DataSourceRef; ref != nil && ref.Namespace != nil && *ref.Namespace != "" && *ref.Namespace != namespace {
		return &rejection{Reason: ReasonForbiddenDataSource, Message: truncate(fmt.Sprintf(
			"the claim template's spec.dataSourceRef points into namespace %q; only the owner's namespace %q is allowed: remove dataSourceRef.namespace or use a source in %q",
			*ref.Namespace, namespace, namespace), maxMessage)}
	}
	if _, set := t.Annotations[wellknown.ConsumerOutcome]; set {
		// The releaser spares a volume its scrub by it: a template that
		// said Succeeded would hand a failed job's data on.
		return &rejection{Reason: ReasonForbiddenAnnotation, Message: truncate(fmt.Sprintf(
			"the claim template sets annotation %q, which the podwatcher alone writes, once the claim's Pod or Job ended: remove it", wellknown.ConsumerOutcome), maxMessage)}
	}
	for _, key := range slices.Sorted(maps.Keys(t.Annotations)) {
		for _, prefix := range wellknown.BindingAnnotationPrefixes {
			if strings.HasPrefix(key, prefix) {
				return &rejection{Reason: ReasonForbiddenAnnotation, Message: truncate(fmt.Sprintf(
					"the claim template sets annotation %q, which Kubernetes sets while binding the claim: remove it", key), maxMessage)}
			}
		}
	}
	return nil
}

// ownerAnnotation on a claim we create is "<Kind>/<name>" of its owner
// (Pod or Job). With the claimed-by label (the owner's UID) it identifies the
// owner even after the ownerReference is removed, as the garbage collector
// does when the owner is deleted with propagationPolicy Orphan: the claim is
// still cleaned up then.
const ownerAnnotation = wellknown.ClaimPrefix + "owner"

// owner names the Pod or Job a claim is created for.
type owner struct {
	APIVersion, Kind string
	Namespace, Name  string
	UID              types.UID
}

// buildClaim makes the claim for req. From the template only labels,
// annotations and spec are kept: name and namespace come from the owner,
// and fields such as ownerReferences, finalizers or generateName are
// dropped, so that a template can neither tie the claim to another object
// nor keep it from being deleted. The two labels of this controller win over
// the template's.
func buildClaim(req claimRequest, o owner, controllerID string) *corev1.PersistentVolumeClaim {
	labels := make(map[string]string, len(req.Template.Labels)+2)
	maps.Copy(labels, req.Template.Labels)
	labels[wellknown.ClaimManagedBy] = controllerID
	labels[wellknown.ClaimedBy] = string(o.UID)
	annotations := make(map[string]string, len(req.Template.Annotations)+1)
	maps.Copy(annotations, req.Template.Annotations)
	annotations[ownerAnnotation] = o.Kind + "/" + o.Name
	isController := true
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        req.ClaimName,
			Namespace:   o.Namespace,
			Labels:      labels,
			Annotations: annotations,
			// No blockOwnerDeletion: it needs update rights on the owner's
			// finalizers, and the owner need not wait for its claim, which
			// goes after it (by the garbage collector or the podwatcher).
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: o.APIVersion,
				Kind:       o.Kind,
				Name:       o.Name,
				UID:        o.UID,
				Controller: &isController,
			}},
		},
		Spec: *req.Template.Spec.DeepCopy(),
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the event stays valid UTF-8.
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
