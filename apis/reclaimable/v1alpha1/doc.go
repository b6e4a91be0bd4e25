// Package v1alpha1 is version v1alpha1 of the API group reclaimable.github.io:
// the VolumePool, the pool of a StorageClass as an object an administrator
// edits and reads.
//
// +k8s:deepcopy-gen=package
// +groupName=reclaimable.github.io
package v1alpha1
