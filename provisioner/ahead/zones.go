package ahead

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/reclaimable/reclaimable/apis/reclaimable/v1alpha1"
	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/provisioner/backend"
)

// This file holds where a class pool that binds on first consumer makes
// its members ahead of claims: in the zones its pool names (template
// zones), each member for a node of the zone with the fewest free members,
// so that a claim in any of them finds one. The driver makes the volume
// where that node is, as it does for a pod's claim.

// templateZones is the pool's template zones, nil for none.
func templateZones(pool *v1alpha1.VolumePool) []string {
	if t := pool.Spec.Template; t != nil {
		return t.Zones
	}
	return nil
}

// zoneNodes lists by zone the Ready, schedulable nodes of the pool's
// template zones that its nodeSelector names, by name; a zone without
// such a node is left out.
func (m *Members) zoneNodes(pool *v1alpha1.VolumePool) map[string][]*corev1.Node {
	zones := templateZones(pool)
	if m.cfg.Nodes == nil || len(zones) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(templateNodes(pool))
	in, err := labels.NewRequirement(corev1.LabelTopologyZone, selection.In, zones)
	if err != nil {
		return nil
	}
	all, err := m.cfg.Nodes.List(sel.Add(*in))
	if err != nil {
		return nil
	}
	out := map[string][]*corev1.Node{}
	for _, n := range all {
		if !n.Spec.Unschedulable && nodeReady(n) {
			z := n.Labels[corev1.LabelTopologyZone]
			out[z] = append(out[z], n)
		}
	}
	for _, nodes := range out {
		slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// freeByZone counts the free members of class, and those on their way
// ahead of claims, by zone of nodes: a member counts in each zone one of
// whose nodes its node affinity admits (every zone, for a member without
// affinity); a backing claim on its way, in the zone of the node it was
// asked for.
func (m *Members) freeByZone(class string, nodes map[string][]*corev1.Node) map[string]int {
	out := map[string]int{}
	objs, _ := m.cfg.Volumes.ByIndex(pools.VolumesByClass, class)
	for _, o := range objs {
		pv, ok := o.(*corev1.PersistentVolume)
		if !ok || pools.StateOf(pv) != pools.StateFree {
			continue
		}
		for zone, ns := range nodes {
			if slices.ContainsFunc(ns, func(n *corev1.Node) bool { return pools.FitsNode(pv, n) }) {
				out[zone]++
			}
		}
	}
	for _, v := range m.cfg.Classes.InFlight(class) {
		if !v.Ahead || v.Node == "" {
			continue
		}
		if n, err := m.nodeNamed(v.Node); err == nil {
			out[n.Labels[corev1.LabelTopologyZone]]++
		}
	}
	return out
}

// leastServedZone is the zone, of zones in their order, that has a node
// and the fewest of free; and the node a member made ahead there is made
// for, the first by name. It reports false when no zone has a node.
func leastServedZone(zones []string, free map[string]int, nodes map[string][]*corev1.Node) (string, *corev1.Node, bool) {
	best := ""
	for _, z := range zones {
		if len(nodes[z]) > 0 && (best == "" || free[z] < free[best]) {
			best = z
		}
	}
	if best == "" {
		return "", nil, false
	}
	return best, nodes[best][0], true
}

// zonePlacer returns, for a class that binds on first consumer, what names
// the node each next member made ahead for pool is asked for: one of the
// least served of the pool's zones (leastServedZone), counted as served
// from then on. Other classes place nothing: nil.
func (m *Members) zonePlacer(class *storagev1.StorageClass, pool *v1alpha1.VolumePool) func() (string, error) {
	if backend.BindingMode(class) != storagev1.VolumeBindingWaitForFirstConsumer {
		return nil
	}
	nodes := m.zoneNodes(pool)
	free := m.freeByZone(class.Name, nodes)
	return func() (string, error) {
		zone, node, ok := leastServedZone(templateZones(pool), free, nodes)
		if !ok {
			return "", fmt.Errorf("no Ready, schedulable node of the zones %v matches the template's nodeSelector %v", templateZones(pool), templateNodes(pool))
		}
		free[zone]++
		return node.Name, nil
	}
}
