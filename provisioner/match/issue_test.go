package match

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/reclaimable/reclaimable/internal/wellknown"
)

func TestIssuedNow(t *testing.T) {
	take := func(ns, name, uid string) func(*corev1.PersistentVolume) {
		return func(pv *corev1.PersistentVolume) {
			bound(ns, name, uid)(pv)
			pv.Annotations[wellknown.LastClaim] = ns + "/" + name // what a take writes
		}
	}
	for _, tt := range []struct {
		name     string
		old, cur *corev1.PersistentVolume
		want     IssueKind
		issued   bool
	}{
		{"reserved, its name came back", volume("a", "1Gi", reservedFor("ns", "job", t0())), volume("a", "1Gi", take("ns", "job", "u2")), IssueSameClaim, true},
		{"released to the pool, same name again", volume("a", "1Gi", returned("ns/job", t0())), volume("a", "1Gi", take("ns", "job", "u2")), IssueSameClaim, true},
		{"reserved, taken by another name", volume("a", "1Gi", reservedFor("ns", "job", t0())), volume("a", "1Gi", take("ns", "other", "u2")), IssueOtherMember, true},
		{"never used", volume("a", "1Gi"), volume("a", "1Gi", take("ns", "job", "u2")), IssueOtherMember, true},
		{"the same namespace's name elsewhere", volume("a", "1Gi", returned("other/job", t0())), volume("a", "1Gi", take("ns", "job", "u2")), IssueOtherMember, true},
		{"already bound: a status update", volume("a", "1Gi", bound("ns", "job", "u2")), volume("a", "1Gi", bound("ns", "job", "u2")), "", false},
		{"released, not issued", volume("a", "1Gi", bound("ns", "job", "u2")), volume("a", "1Gi", released("ns", "job", "u2", t0())), "", false},
		{"freed", volume("a", "1Gi", returned("ns/job", t0())), volume("a", "1Gi"), "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := IssuedNow(tt.old, tt.cur)
			if got != tt.want || ok != tt.issued {
				t.Errorf("IssuedNow = %q, %v; want %q, %v", got, ok, tt.want, tt.issued)
			}
		})
	}
}

func TestKeyResultOf(t *testing.T) {
	issuedTo := func(key string) *corev1.PersistentVolume {
		return volume("a", "1Gi", bound("ns", "job", "u2"), func(pv *corev1.PersistentVolume) {
			if key != "" {
				pv.Annotations[wellknown.LastKey] = key // what a take writes
			}
		})
	}
	for _, tt := range []struct {
		name string
		old  *corev1.PersistentVolume
		key  string
		want KeyResult
	}{
		{"its key's member", volume("a", "1Gi", returned("ns/x", t0()), keyed("ci=a")), "ci=a", KeyOwn},
		{"another key's member", volume("a", "1Gi", returned("ns/x", t0()), keyed("ci=b")), "ci=a", KeyOther},
		{"a member used without a key", volume("a", "1Gi", returned("ns/x", t0())), "ci=a", KeyOther},
		{"a member no claim had", volume("a", "1Gi"), "ci=a", KeyFresh},
		{"a member no claim had, to a claim without a key", volume("a", "1Gi"), "", KeyFresh},
		{"a used member, to a claim without a key", volume("a", "1Gi", returned("ns/x", t0()), keyed("ci=b")), "", KeyNone},
	} {
		if got := KeyResultOf(tt.old, issuedTo(tt.key)); got != tt.want {
			t.Errorf("%s: KeyResultOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}
