package ahead

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLeastServedZone(t *testing.T) {
	a, b := zoneNode("a-1", "zone-a"), zoneNode("b-1", "zone-b")
	nodes := map[string][]*corev1.Node{"zone-a": {a}, "zone-b": {b}}
	for _, tt := range []struct {
		name  string
		zones []string
		free  map[string]int
		want  string
	}{
		{"none free: the first named", []string{"zone-b", "zone-a"}, nil, "zone-b"},
		{"the fewest free", []string{"zone-a", "zone-b"}, map[string]int{"zone-a": 2, "zone-b": 1}, "zone-b"},
		{"a tie: the first named", []string{"zone-a", "zone-b"}, map[string]int{"zone-a": 1, "zone-b": 1}, "zone-a"},
		{"a zone without a node is passed over", []string{"zone-c", "zone-a"}, nil, "zone-a"},
		{"no zone with a node", []string{"zone-c"}, nil, ""},
	} {
		zone, node, ok := leastServedZone(tt.zones, tt.free, nodes)
		if zone != tt.want || ok != (tt.want != "") || ok && node != nodes[zone][0] {
			t.Errorf("%s: leastServedZone = %q, %v, %v; want %q", tt.name, zone, node, ok, tt.want)
		}
	}
}

func zoneNode(name, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
}
