package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VolumePool is the pool of one StorageClass as an object: the settings an
// administrator edits (a StorageClass's parameters cannot be changed once it
// exists) and the state of its members. Deleting a pool deletes no volume:
// its class goes back to its own parameters.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vpool,categories=reclaimable
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.storageClassName`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Held",type=integer,JSONPath=`.status.held`
// +kubebuilder:printcolumn:name="Bound",type=integer,JSONPath=`.status.bound`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.status.maxVolumes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Exhausted",type=string,JSONPath=`.status.conditions[?(@.type=="Exhausted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VolumePoolSpec `json:"spec"`
	// +optional
	Status VolumePoolStatus `json:"status,omitempty"`
}

// VolumePoolSpec is what an administrator says of a pool. A field left out
// falls back to the class's parameter of the same name, then to its default.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minAvailable) || self.minAvailable == 0 || (has(self.maxVolumes) && self.minAvailable <= self.maxVolumes)",message="minAvailable needs maxVolumes, at least as large: members made ahead count against it"
// +kubebuilder:validation:XValidation:rule="!has(self.keyPolicy) || self.keyPolicy != 'Require' || (has(self.keyLabel) && has(self.reuseScope) && self.reuseScope == 'namespace')",message="keyPolicy Require needs keyLabel and reuseScope namespace set in the pool: under reuseScope cluster the PV controller may bind a free member to a claim of any key"
// +kubebuilder:validation:XValidation:rule="!has(self.maxVolumesPerNamespace) || (has(self.reuseScope) && self.reuseScope == 'namespace')",message="maxVolumesPerNamespace needs reuseScope namespace set in the pool: under reuseScope cluster the PV controller may bind a free member to a claim of any namespace"
// +kubebuilder:validation:XValidation:rule="has(self.evictAboveBytes) == has(self.evictDownToBytes)",message="evictAboveBytes and evictDownToBytes go together: set both watermarks, or neither"
type VolumePoolSpec struct {
	// StorageClassName is the class whose volumes form the pool; its
	// provisioner must be this one. One pool per class: a second pool for
	// the same class has no effect, and a condition names the first.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storageClassName cannot be changed: make another pool for another class"
	StorageClassName string `json:"storageClassName"`

	// MaxVolumes is the most volumes the class may have, whatever their
	// reclaim policy.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxVolumes *int32 `json:"maxVolumes,omitempty"`

	// MaxVolumesPerNode is the most volumes of the class on one node
	// (node-local backends).
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxVolumesPerNode *int32 `json:"maxVolumesPerNode,omitempty"`

	// MaxVolumesPerNamespace is the most members one namespace may have,
	// bound to its claims or held for it, so that one namespace cannot
	// take a pool many share. A claim of a namespace at it may have only
	// a member held for its namespace; else it waits, and no member is
	// made or evicted for it. Needs reuseScope namespace in the pool.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxVolumesPerNamespace *int32 `json:"maxVolumesPerNamespace,omitempty"`

	// ReserveFor is how long a volume returned to the pool stays reserved
	// for the next claim of its last claim's namespace and name, from 0
	// (no reservation; 0s too, as the class parameter takes it) to 168h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('168h')",message="reserveFor must be 0 or a duration up to 168h, such as 10m"
	ReserveFor *metav1.Duration `json:"reserveFor,omitempty"`

	// ReuseScope says who may have a volume next: claims of the namespace
	// it was last bound in (namespace), or any claim of the class
	// (cluster), data included.
	// +optional
	// +kubebuilder:validation:Enum=namespace;cluster
	ReuseScope string `json:"reuseScope,omitempty"`

	// OnRelease says what becomes of a member's data when its claim goes:
	// Keep (the default) hands it on to the next claim; Scrub empties the
	// volume, through a pod that mounts it, before any claim may have it;
	// ScrubUnlessSucceeded empties it unless the Pod or Job its claim was
	// made for is known to have succeeded.
	// +optional
	// +kubebuilder:validation:Enum=Keep;Scrub;ScrubUnlessSucceeded
	OnRelease string `json:"onRelease,omitempty"`

	// ScrubAcrossNamespaces, under reuseScope namespace, lets a claim that
	// finds no free member and cannot grow the pool take a volume held for
	// another namespace once it has been emptied (as onRelease Scrub
	// empties one), instead of waiting: isolation kept, disks shared.
	// +optional
	ScrubAcrossNamespaces *bool `json:"scrubAcrossNamespaces,omitempty"`

	// KeyLabel names the label whose value is a claim's cache key, or,
	// where no label holds it, the annotation of that name (a value longer
	// than 253 characters counts by its SHA-256): the claim's own, else
	// that of the Pod that owns the claim (the claim of an ephemeral volume
	// carries nothing of its pod), such as tekton.dev/pipeline,
	// actions.github.com/scale-set-name or the annotation
	// buildkite.com/pipeline-slug. A member
	// remembers the key it was last issued under; a claim gets, in order,
	// a member last used by a claim of its namespace and name, one last
	// used under its key, one of its namespace, then any other the scope
	// allows.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="keyLabel must be a label key, such as example.com/cache or team"
	KeyLabel string `json:"keyLabel,omitempty"`

	// KeyPolicy says what a claim may have when no member of its key is
	// free: Prefer (the default), any member the scope allows; Require,
	// only one never used, else a new volume (or it waits at maxVolumes).
	// Require needs keyLabel and reuseScope namespace in the pool: under
	// reuseScope cluster a free member carries no claimRef and the PV
	// controller may bind it to any claim, whatever its key.
	// +optional
	// +kubebuilder:validation:Enum=Prefer;Require
	KeyPolicy string `json:"keyPolicy,omitempty"`

	// MinAvailable is how many free members (no claim named, not held or
	// reserved) the pool keeps ready: the provisioner makes them ahead of
	// any claim, shaped by Template, within maxVolumes, which it needs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinAvailable *int32 `json:"minAvailable,omitempty"`

	// Template shapes the members made ahead for MinAvailable. A claim
	// that fits one takes it; any other grows the pool as before.
	// +optional
	Template *VolumePoolTemplate `json:"template,omitempty"`

	// EvictAfter removes a free or held member, with its data, once no
	// claim has had it for this long (since its last release, or since it
	// was made if no claim ever had it), least recently used first, never
	// below minAvailable free members. From 1s to 8760h; unset: members
	// are never removed for idleness.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="evictAfter must be a duration from 1s to 8760h, such as 168h"
	EvictAfter *metav1.Duration `json:"evictAfter,omitempty"`

	// ShrinkToMaximum removes free and held members, with their data,
	// while the pool has more members than maxVolumes (the maximum was
	// lowered): the largest first, then the least recently used; never a
	// bound, reserved, released or scrubbing one. Unset: the members
	// above the maximum stay, counted in status.surplus, and new claims
	// wait until members are freed below it.
	// +optional
	ShrinkToMaximum bool `json:"shrinkToMaximum,omitempty"`

	// EvictForClaims, at maxVolumes, removes the least recently used
	// member, with its data, for a claim that no free member fits, so that
	// one that fits can be made: a free member first; one held for another
	// namespace or reserved for another claim's name only when no free
	// one can go. Unset: such a claim waits (Exhausted).
	// +optional
	EvictForClaims bool `json:"evictForClaims,omitempty"`

	// EvictAboveBytes is the high watermark of the bytes the pool's free,
	// held and reserved members hold, each measured as it came back to the
	// pool (status.usedBytes): above it, free and held members go, with
	// their data, least recently used first, until the sum is at most
	// EvictAboveBytes, and on while removing the next would leave at least
	// EvictDownToBytes. Set both or neither. Only the directory backend
	// measures its members; node-local ones count for nothing.
	// +optional
	EvictAboveBytes *resource.Quantity `json:"evictAboveBytes,omitempty"`
	// EvictDownToBytes is the low watermark: see EvictAboveBytes. At most
	// as large.
	// +optional
	EvictDownToBytes *resource.Quantity `json:"evictDownToBytes,omitempty"`
}

// VolumePoolTemplate is the shape of a member made ahead.
type VolumePoolTemplate struct {
	// Capacity of each member made ahead. Default: 1Gi.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// AccessModes of each member made ahead. Default: ReadWriteOnce.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`

	// NodeSelector, for a class of the local backend, names the nodes
	// members are made ahead on, within the class's allowedTopologies:
	// each goes to the Ready, schedulable node among them with the fewest
	// free members of the pool. Default: every such node. For a class of
	// the class backend, it narrows the nodes of Zones.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Zones, for a class of the class backend that binds on first consumer
	// (WaitForFirstConsumer), names the zones members are made ahead in:
	// values of the nodes' topology.kubernetes.io/zone label. Each member
	// goes to the zone among them with the fewest free members of the
	// pool, made for a Ready, schedulable node of that zone, as if a pod
	// there had asked. Required for such a pool with minAvailable.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Zones []string `json:"zones,omitempty"`
}

// VolumePoolStatus is the state of a pool's members, counted from what the
// volumes show.
type VolumePoolStatus struct {
	// ObservedGeneration is the generation of the spec this status is of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ReuseScope is the reuseScope in force: the pool's, else its class's
	// parameter, else namespace. It is kept so that a change from
	// namespace to cluster, which lets held volumes go to any namespace
	// with their data, is reported once, by whichever replica sees it.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ReuseScope string `json:"reuseScope,omitempty"`

	// Free members: Available, no claim named.
	// +optional
	Free int32 `json:"free"`
	// Held members: free for the claims of one namespace only.
	// +optional
	Held int32 `json:"held"`
	// Reserved members: kept for one claim's namespace and name.
	// +optional
	Reserved int32 `json:"reserved"`
	// Bound members.
	// +optional
	Bound int32 `json:"bound"`
	// Released members: their claim is gone, not yet back in the pool.
	// +optional
	Released int32 `json:"released"`
	// Scrubbing members: released under onRelease Scrub (or marked by an
	// administrator) and not yet emptied; no claim may have them.
	// +optional
	Scrubbing int32 `json:"scrubbing"`
	// ScrubFailed members: scrubbing, and their last scrub failed; it is
	// retried with back-off, and their events say why.
	// +optional
	ScrubFailed int32 `json:"scrubFailed"`
	// Evicting members: being removed from the pool with their data
	// (evictAfter, shrinkToMaximum); no claim may have them.
	// +optional
	Evicting int32 `json:"evicting"`
	// Surplus is how many members the pool has above maxVolumes, those
	// being evicted aside: members shrinkToMaximum removes, or that stay
	// without it.
	// +optional
	Surplus int32 `json:"surplus"`
	// Total members, in every state.
	// +optional
	Total int32 `json:"total"`
	// MaxVolumes is the maximum in force: the pool's, else its class's
	// parameter; unset when the pool has none.
	// +optional
	MaxVolumes *int32 `json:"maxVolumes,omitempty"`
	// MadeAhead members: free members made ahead for minAvailable that no
	// claim has had yet, and those being made.
	// +optional
	MadeAhead int32 `json:"madeAhead"`

	// Capacity is the capacity of every member together.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	// UsedBytes is what the free, held and reserved members measured as
	// they came back to the pool hold together: what evictAboveBytes is
	// compared with.
	// +optional
	UsedBytes *resource.Quantity `json:"usedBytes,omitempty"`
	// Measured counts the members UsedBytes sums.
	// +optional
	Measured int32 `json:"measured,omitempty"`
	// Usage is the bytes of such members, measured when each last came
	// back to the pool (its data does not change until a claim has it):
	// of at most 1000 members, those that hold the most, so that the
	// status stays small whatever the size of the pool.
	// +optional
	// +listType=map
	// +listMapKey=volume
	// +kubebuilder:validation:MaxItems=1000
	Usage []MemberUsage `json:"usage,omitempty"`

	// LastIssued is when a member was last issued to a claim.
	// +optional
	LastIssued *metav1.Time `json:"lastIssued,omitempty"`
	// LastReleased is when a member was last returned to the pool.
	// +optional
	LastReleased *metav1.Time `json:"lastReleased,omitempty"`

	// Conditions: Ready, and Exhausted while a claim waits at the maximum.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberUsage is what one member held when it last came back to the pool.
type MemberUsage struct {
	// Volume is the member's PersistentVolume.
	// +kubebuilder:validation:MaxLength=253
	Volume string `json:"volume"`
	// Bytes its files take on their filesystem.
	Bytes int64 `json:"bytes"`
	// Returned is the time of the return the measure is of (the
	// releaser's released-at; empty for a member never issued).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Returned string `json:"returned,omitempty"`
	// Partial: the measure stopped at its time budget or at what it could
	// not read, and Bytes is a lower bound.
	// +optional
	Partial bool `json:"partial,omitempty"`
}

// VolumePoolList is a list of VolumePools.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VolumePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []VolumePool `json:"items"`
}
