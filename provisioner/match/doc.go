// Package match holds the pool rules: which pool member a claim may take,
// and in what order it tries them. Which volumes form a class's pool
// (IsMember), which of them are free to the claim (AvailabilityOf), which
// fit it (Misfit), how they rank and how the pool stands (Candidates,
// State), which selectors the provisioner understands (ClaimSelector,
// LabelsFor), and what a member issued was to its claim, for the metrics
// (IssuedNow, KeyResultOf).
//
// The rules read only the objects they are given, never the API server nor
// a cache. The provisioner asks them with what its caches show, and again
// with a fresher copy just before it writes, so a claim is judged the same
// way whether it is provisioned, handed a member early or retried after a
// conflict; and each rule is tested in a table, volume by volume, without
// a cluster.
package match
