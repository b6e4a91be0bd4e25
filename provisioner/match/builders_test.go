package match

import "github.com/reclaimable/reclaimable/provisioner/provisionertest"

// The builders the tests share with those of the provisioner
// (provisionertest), by their short names here.
var (
	volume      = provisionertest.Volume
	released    = provisionertest.Released
	returned    = provisionertest.Returned
	keyed       = provisionertest.Keyed
	reservedFor = provisionertest.ReservedFor
	bound       = provisionertest.Bound
	claimFor    = provisionertest.ClaimFor
	t0          = provisionertest.T0
)
