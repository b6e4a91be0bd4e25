//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/e2e/framework"
	"github.com/reclaimable/reclaimable/internal/controller"
	"github.com/reclaimable/reclaimable/internal/keys"
)

// evictAfter removes the members no claim has had for that long, with
// their directories, least recently used first, and keeps minAvailable
// free ones: three consumers at once on the real node leave three
// members; once idle, the two used least recently go, the third stays
// with its data.
func TestNodeEvictAfterRemovesIdleMembers(t *testing.T) {
	const evictAfter = 5 * time.Second
	c := newDirectoryScrubCase(t, keys.OnReleaseKeep, nil, func(s *v1alpha1.VolumePoolSpec) {
		s.MaxVolumes, s.MinAvailable = ptr.To[int32](3), ptr.To[int32](1)
		s.ReuseScope, s.ReserveFor = keys.ReuseScopeCluster, &metav1.Duration{}
		s.EvictAfter = &metav1.Duration{Duration: evictAfter}
	})
	ctx := context.Background()
	client := framework.Client()
	consumers := []string{"a", "b", "c"}
	for _, name := range consumers {
		if _, err := client.CoreV1().Pods(c.ns).Create(ctx, nodePod(name, "cache-"+name, c.class, 1000, "fill", "/cache"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	volumes := map[string]*corev1.PersistentVolume{}
	for _, name := range consumers {
		waitSucceeded(t, c.ns, name)
		volumes[name] = boundVolume(t, c.ns, "cache-"+name)
	}
	for _, name := range consumers {
		deletePod(t, c.ns, name, "cache-"+name)
	}

	// The member used last: released last, by the second the releaser
	// records, then by name, as the pool manager orders them.
	var survivor *corev1.PersistentVolume
	released := map[string]time.Time{}
	for _, pv := range volumes {
		var at time.Time
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			at, err = time.Parse(time.RFC3339, got.Annotations[keys.ReleasedAt])
			return err == nil, nil
		}, fmt.Sprintf("volume %s to be back in the pool", pv.Name))
		released[pv.Name] = at
		if survivor == nil || at.After(released[survivor.Name]) || at.Equal(released[survivor.Name]) && pv.Name > survivor.Name {
			survivor = pv
		}
	}
	for _, pv := range volumes {
		if pv.Name == survivor.Name {
			continue
		}
		framework.Eventually(t, time.Minute, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}, fmt.Sprintf("idle member %s to be evicted", pv.Name))
		if _, err := os.Stat(pv.Spec.HostPath.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the directory of evicted member %s: %v, want it removed", pv.Name, err)
		}
		framework.WaitEvent(t, 30*time.Second, framework.EventQuery{Namespace: "default", Kind: "VolumePool", Name: c.pool, Reason: "MemberEvicted", Message: pv.Name})
	}

	// The last free member stays (minAvailable 1), watched until it has
	// been idle for evictAfter and two looks of the pool manager more.
	watch := time.Until(released[survivor.Name].Add(evictAfter + 3*time.Second))
	framework.Consistently(t, max(watch, time.Second), func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().PersistentVolumes().Get(ctx, survivor.Name, metav1.GetOptions{})
		return err == nil && !controller.Evicting(got) && got.DeletionTimestamp == nil, err
	}, fmt.Sprintf("the last free member %s to stay: minAvailable 1", survivor.Name))
	entries, err := os.ReadDir(survivor.Spec.HostPath.Path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "objects,readonly,top.txt" {
		t.Errorf("the member that stays holds %v, want its consumer's data", names)
	}
	c.inv.Check(t, 10*time.Second)
}
