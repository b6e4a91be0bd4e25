package backend

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/reclaimable/reclaimable/internal/pools"
	"github.com/reclaimable/reclaimable/internal/wellknown"
)

// FuzzParseParameters feeds arbitrary StorageClass parameters to the parser.
// Whatever the input, it must not panic, and a configuration it accepts
// must keep every volume inside the directory root.
func FuzzParseParameters(f *testing.F) {
	const root = "/var/lib/reclaimable"
	for _, seed := range []string{
		"backend=directory\nbaseDir=/var/lib/reclaimable/caches\nsource=hostPath\nhostPath=/mnt/caches",
		"backend=directory\nbaseDir=/var/lib/reclaimable/../../etc\nsource=hostPath\nhostPath=/etc",
		"backend=directory\nbaseDir=/var/lib/reclaimable/x\nsource=nfs\nnfsServer=nfs.example.com\nnfsPath=/export\nmaxVolumes=50\ndirectoryMode=2775",
		"backend=static\nselectorKeys=cache, team",
		"backend=static\nreserveFor=10m",
		"backend=static\nreuseScope=cluster",
		"backend=directory\nbaseDir=/var/lib/reclaimable/x\nsource=hostPath\nhostPath=/x\nreuseScope=Namespace",
		"backend=directory\nbaseDir=/var/lib/reclaimable/x\nsource=hostPath\nhostPath=/x\nreserveFor=-5s",
		"backend=static\nbaseDir=/tmp",
		"backend=local\nnodePath=/var/lib/caches\ndirectoryMode=0775\nmaxVolumes=3\nmaxVolumesPerNode=1",
		"backend=local\nnodePath=/var/lib/../../etc",
		"backend=local\nnodePath=/",
		"backend=local\nnodePath=/x\nlifecycleTemplates=quota",
		"backend=directory\nmaxVolumes=-1\ndirectoryMode=99999999999999999999",
		"backend=\nselectorKeys=,,,",
		"backend=directory\nbaseDir=/var/lib/reclaimable\x00/x\nsource=hostPath\nhostPath=relative",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		in := fuzzParameters(input)
		// Every class binds on first use, which the local backend needs and
		// the others ignore.
		wffc := storagev1.VolumeBindingWaitForFirstConsumer
		p, err := ParseParameters(&storagev1.StorageClass{Parameters: in, VolumeBindingMode: &wffc}, paramsBackends(root))
		if err != nil {
			return
		}
		if p.MaxVolumes < 0 || p.MaxVolumesPerNode < 0 {
			t.Fatalf("accepted maxVolumes %d, maxVolumesPerNode %d", p.MaxVolumes, p.MaxVolumesPerNode)
		}
		if p.ReserveFor < 0 || p.ReserveFor > pools.MaxReserveFor {
			t.Fatalf("accepted reserveFor %s", p.ReserveFor)
		}
		// Only the exact word cluster shares a volume across namespaces.
		if scope := in[wellknown.ReuseScope]; p.Namespaced == (scope == wellknown.ReuseScopeCluster) || (scope != "" && scope != wellknown.ReuseScopeNamespace && scope != wellknown.ReuseScopeCluster) {
			t.Fatalf("accepted reuseScope %q as namespaced=%v", scope, p.Namespaced)
		}
	})
}
