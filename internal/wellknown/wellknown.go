// Package wellknown holds the well-known names: the labels and annotations
// that the controllers of one installation use to recognise each other's
// objects. They are part of the product's interface: users write some of
// them by hand.
//
// The names this project introduced live under its own domain (Domain):
// Kubernetes reserves kubernetes.io and k8s.io for its own components. The
// names of the system this project replaces (ClaimPrefix, VolumeManagedBy,
// ClassControllerID) are its interface and stay as they are.
package wellknown

// Domain prefixes the names this project introduced.
const Domain = "reclaimable.github.io"

// Map returns a map of the key and value pairs kv.
func Map(kv ...string) map[string]string {
	m := make(map[string]string, len(kv))
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

const (
	// ClaimPrefix starts every key the podwatcher reads on a Pod or Job:
	// "<ClaimPrefix><volume>.enabled" and "<ClaimPrefix><volume>.pvc".
	ClaimPrefix = "dynamic-pvc-provisioner.kubernetes.io/"

	// EnabledSuffix and TemplateSuffix end the per-volume annotation keys.
	EnabledSuffix  = ".enabled"
	TemplateSuffix = ".pvc"

	// ClaimManagedBy labels a claim created by the podwatcher with the
	// controller ID of its installation.
	ClaimManagedBy = ClaimPrefix + "managed-by"

	// ClaimedBy labels a claim created by the podwatcher with the UID of the
	// Pod or Job it was created for.
	ClaimedBy = ClaimPrefix + "claimed-by"

	// VolumeManagedBy labels a PersistentVolume associated with the releaser
	// of one installation (the value is its controller ID).
	VolumeManagedBy = "reclaimable-pv-releaser.kubernetes.io/managed-by"

	// ClassControllerID on a StorageClass associates every PersistentVolume of
	// that class with the releaser of the installation it names.
	ClassControllerID = "reclaimable-pv-releaser.kubernetes.io/controller-id"

	// ProvisionedBy is set on a PersistentVolume by the provisioner library to
	// the name of the provisioner that created it.
	ProvisionedBy = "pv.kubernetes.io/provisioned-by"

	// LastClaim on a PersistentVolume is "<namespace>/<name>" of the claim the
	// volume was most recently issued to. The releaser writes it in the same
	// update that returns the volume to the pool; the provisioner writes it
	// when it issues a pool member, and prefers members whose last claim had
	// the namespace and name of the claim it serves.
	LastClaim = Domain + "/last-claim"

	// MaxVolumes and MaxVolumesPerNode are the StorageClass parameters that
	// bound a class's volumes, in all and on one node. The provisioner reads
	// them; a VolumePool may set them over the class.
	MaxVolumes        = "maxVolumes"
	MaxVolumesPerNode = "maxVolumesPerNode"

	// MaxVolumesPerNamespace is the StorageClass parameter that bounds the
	// members one namespace may have, bound or held for it, so that one
	// busy namespace cannot take a shared pool. It needs reuseScope
	// namespace: under cluster, the PV controller binds a free member to a
	// claim of any namespace without the provisioner.
	MaxVolumesPerNamespace = "maxVolumesPerNamespace"

	// ReserveFor is the StorageClass parameter (a duration) for which a
	// released volume of the class stays reserved for its last claim's
	// namespace and name. The provisioner validates it; the releaser acts on
	// it.
	ReserveFor = "reserveFor"

	// ReservedUntil on a PersistentVolume is the RFC 3339 time, in UTC with
	// milliseconds (ReservedUntilFormat), until which the releaser keeps it
	// reserved (spec.claimRef naming its last claim by namespace and name,
	// without UID) for that claim to come back.
	ReservedUntil = Domain + "/reserved-until"

	// ReservedUntilFormat writes ReservedUntil: RFC 3339 with milliseconds,
	// so that reservations made within one second keep their order.
	ReservedUntilFormat = "2006-01-02T15:04:05.000Z07:00"

	// ReuseScope is the StorageClass parameter that says which claims a
	// volume of the class may be issued to after its first binding:
	// ReuseScopeNamespace (the default), claims of the namespace it was last
	// bound in, or ReuseScopeCluster, any claim.
	ReuseScope          = "reuseScope"
	ReuseScopeNamespace = "namespace"
	ReuseScopeCluster   = "cluster"

	// HeldForNamespace on a PersistentVolume names the namespace whose claims
	// alone may have it. The releaser sets it, with spec.claimRef naming the
	// last claim by namespace and name and without UID, when it returns a
	// volume of a namespace-scoped class to the pool: the PV controller binds
	// such a volume to no claim but the one named, and the provisioner issues
	// it to claims of that namespace only.
	HeldForNamespace = Domain + "/held-for-namespace"

	// ClaimsGate is the scheduling gate that holds a Pod until every claim
	// it asks for by annotation exists. The podwatcher removes it, and only
	// it; a pod created without it is scheduled as any other.
	ClaimsGate = Domain + "/claims"

	// ReleasedAt on a PersistentVolume is the RFC 3339 time the releaser last
	// returned it to the pool.
	ReleasedAt = Domain + "/released-at"

	// MadeAhead on a PersistentVolume names the VolumePool it was made ahead
	// for (minAvailable), before any claim asked. Until a claim has it, its
	// spec.claimRef names a claim that never exists, MadeAheadClaim of its
	// name, without UID: the PV controller binds it to no claim, and only
	// the provisioner issues it. New in this release: one name only.
	MadeAhead = Domain + "/made-ahead"

	// StoragePending on a volume made ahead says its storage is not made
	// yet: the volume object comes first, so that a provisioner stopped
	// at any point finds what it started. Such a volume is issued to no one.
	StoragePending = Domain + "/storage-pending"
)

// OnRelease is the class parameter (and VolumePool field) that says what
// becomes of a volume's data when its claim goes: OnReleaseKeep (the
// default) hands it on to the next claim, OnReleaseScrub empties the
// volume first, OnReleaseScrubUnlessSucceeded empties it unless the
// claim's consumer is known to have succeeded (ConsumerOutcome).
const (
	OnRelease                     = "onRelease"
	OnReleaseKeep                 = "Keep"
	OnReleaseScrub                = "Scrub"
	OnReleaseScrubUnlessSucceeded = "ScrubUnlessSucceeded"
)

// ConsumerOutcome on a claim the podwatcher made says how the Pod or Job it
// was made for ended: OutcomeSucceeded or OutcomeFailed. The podwatcher
// writes it once, when it sees the owner end; a claim without it has no
// known outcome. New in this release: one name only.
const (
	ConsumerOutcome  = Domain + "/consumer-outcome"
	OutcomeSucceeded = "Succeeded"
	OutcomeFailed    = "Failed"
)

// Scrub on a PersistentVolume says it is being emptied, and how far: the
// releaser sets ScrubRequested when it hands a released volume of a Scrub
// pool over (or an administrator sets it to empty one member), the
// provisioner's scrubber sets ScrubRunning once the volume is pre-bound to
// its scrub claim and ScrubDone once the scrub pod succeeded; it removes
// the annotation when it returns the volume to the pool, empty. No claim
// but the scrub claim is given a volume that carries it. New in this
// release: one name only.
const (
	Scrub          = Domain + "/scrub"
	ScrubRequested = "requested"
	ScrubRunning   = "running"
	ScrubDone      = "done"
	// ScrubFailed on a volume holds why its last scrub failed, until one
	// succeeds.
	ScrubFailed = Domain + "/scrub-failed"
)

// ScrubAcrossNamespaces is the class parameter (and VolumePool field)
// that lets a claim which finds no free member take, under reuseScope
// namespace, a volume held for another namespace once it is emptied.
const ScrubAcrossNamespaces = "scrubAcrossNamespaces"

// KeyLabel is the class parameter (and VolumePool field) that names the
// label, or else annotation, whose value is a claim's cache key: the
// claim's own, else that of the Pod that owns the claim (an ephemeral
// volume's claim carries nothing of its pod; pools.CacheKey). KeyPolicy says what a claim may have:
// KeyPolicyPrefer (the default) ranks the members last used under its key
// first and falls back to any other; KeyPolicyRequire gives it a member
// last used under its key or never used, or none. New in this release:
// one name only.
const (
	KeyLabel         = "keyLabel"
	KeyPolicy        = "keyPolicy"
	KeyPolicyPrefer  = "Prefer"
	KeyPolicyRequire = "Require"
	// LastKey on a PersistentVolume is the cache key of the claim it was
	// last issued to, "<keyLabel>=<value>"; absent when that claim had
	// none. Whoever issues the volume writes it in the same update (the
	// provisioner, or its making for the claim); a scrub removes it with
	// the data.
	LastKey = Domain + "/last-key"
	// CacheKeyLabel is a label (or annotation) of the project's own for a
	// cache key where the CI system sets none that fits (Jenkins' pods name
	// the build, not the job): a pod or claim template sets it, and the
	// pool names it as its keyLabel.
	CacheKeyLabel = Domain + "/cache-key"
)

// HeldClaim is the name in the claimRef of volume pv while the releaser
// holds it under keyPolicy Require: a name no claim is given, so that the
// PV controller binds the volume to no claim, not even a new one of its
// last claim's name, which may carry another key. The provisioner issues
// it, by key.
func HeldClaim(pv string) string { return "held-" + pv }

// ScrubClaim is the name of the claim, in the lifecycle namespace, through
// which the scrub pod of volume pv mounts it.
func ScrubClaim(pv string) string { return "scrub-" + pv }

// MadeAheadClaim is the name in the claimRef of volume pv, made ahead of
// any claim, until a claim has it.
func MadeAheadClaim(pv string) string { return "made-ahead-" + pv }

// EnabledKey returns the annotation that switches claim creation on for a volume.
func EnabledKey(volume string) string { return ClaimPrefix + volume + EnabledSuffix }

// TemplateKey returns the annotation that holds the claim template for a volume.
func TemplateKey(volume string) string { return ClaimPrefix + volume + TemplateSuffix }

// Evicting on a PersistentVolume says it is being removed from its pool,
// with its data, and why: EvictIdle (evictAfter), EvictAboveMaximum
// (shrinkToMaximum), EvictForClaim (evictForClaims), EvictAboveBytes, or
// EvictNotMade: a member made ahead whose storage was not made in time.
// The provisioner writes it with EvictFinalizer in one write, then deletes
// the volume (no claim is given a volume being deleted), removes its
// storage, and last the finalizer: a provisioner stopped at any point
// finds what it started. New in this release: one name only.
const (
	Evicting          = Domain + "/evicting"
	EvictFinalizer    = Domain + "/evict"
	EvictIdle         = "idle"
	EvictAboveMaximum = "above-maximum"
	EvictForClaim     = "for-claim"
	EvictAboveBytes   = "above-bytes"
	EvictNotMade      = "not-made"
)

// The provisioner's own keys, on the volumes it makes and the objects it
// makes them with.
const (
	// Backend records on a PersistentVolume the backend that made it, so
	// that Delete needs neither the StorageClass (which may be gone or
	// changed by then) nor any guess. The backend adds what it needs.
	Backend = Domain + "/backend"
	// IssuedAt is the RFC 3339 time a volume was last issued to a claim.
	IssuedAt = Domain + "/issued-at"
	// BaseDir and Directory record where a directory volume's directory
	// is, for delete.
	BaseDir   = Domain + "/base-dir"
	Directory = Domain + "/directory"
	// Node records the node that holds a local volume's directory, and
	// NodePath the class's nodePath, for delete.
	Node     = Domain + "/node"
	NodePath = Domain + "/node-path"
	// LifecycleTemplates records the class's lifecycleTemplates, so that
	// the class's own delete pod removes the volume's directory.
	LifecycleTemplates = Domain + "/lifecycle-templates"
	// Lifecycle labels lifecycle pods with their operation.
	Lifecycle = Domain + "/lifecycle"
	// Pool labels a PersistentVolume into the static pool of the
	// StorageClass it names (the PV's storageClassName must name it too).
	Pool = Domain + "/pool"

	// BackingClaimOf labels the backing claims of a class pool's
	// installation, with its controller ID.
	BackingClaimOf = Domain + "/backing-claim-of"
	// BackingFor names the claim a backing claim, or a volume kept for it,
	// is for, "<namespace>/<name>"; BackingForUID its UID.
	BackingFor    = Domain + "/backing-for"
	BackingForUID = Domain + "/backing-for-uid"
	// PoolClass names the pool class they grow.
	PoolClass = Domain + "/pool-class"
	// KeptBy names the provisioner that kept a volume for a claim: the one
	// that finishes the hand-over. Installations side by side see each
	// other's volumes.
	KeptBy = Domain + "/kept-by"
	// BackingClass and BackingProvisioner record the class, and its
	// provisioner, that made a class pool's member, which goes back to it
	// to be deleted.
	BackingClass       = Domain + "/backing-class"
	BackingProvisioner = Domain + "/backing-provisioner"
)

// BindingAnnotationPrefixes start the annotations the PV controller, the
// scheduler and provisioners write on claims and volumes to drive binding:
// a claim template must not set them.
var BindingAnnotationPrefixes = []string{"pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/"}
