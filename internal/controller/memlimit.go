package controller

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvMemoryLimit names the variable through which the manifests and the
// chart give each controller its container's memory limit, in bytes (the
// downward API's resourceFieldRef limits.memory).
const EnvMemoryLimit = "MEMORY_LIMIT"

// memoryLimitShare is the part of the container's limit the Go runtime is
// told it may use. Left alone, Go lets the heap grow to twice what it keeps
// before collecting, whatever the container allows: a controller holding 60
// MiB reaches 120 and more, and the kernel kills it at the limit with
// memory to spare. With a soft limit the collector works harder as the heap
// nears it instead. The tenth left over is for what the runtime does not
// count (thread stacks, cgo, the binary's own pages).
const memoryLimitShare = 0.9

// SoftMemoryLimit returns the soft limit for the Go runtime from the
// process's environment: 90% of EnvMemoryLimit. It returns 0 when there
// is none to set: the variable is unset, or GOMEMLIMIT is set, which the
// runtime has already applied and which an administrator set on purpose.
// A value that is not a positive number of bytes is an error: the process
// would otherwise run with no limit and be killed by the kernel instead.
func SoftMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(EnvMemoryLimit))
	if v == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit as a positive number of bytes (resourceFieldRef limits.memory)", EnvMemoryLimit, v)
	}
	return int64(float64(limit) * memoryLimitShare), nil
}
