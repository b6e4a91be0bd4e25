package pools

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKeyValue bounds the value of a cache key as a volume remembers it
// (keys.LastKey): a longer one, which only an annotation can hold, is
// remembered by its SHA-256.
const MaxKeyValue = 253

// CacheKey is the cache key that an object's label name gives, else its
// annotation name: "<name>=<value>", so that a key remembered under
// another keyLabel never matches; "" when both are absent or empty. An
// annotation holds what no label value may (a Jenkins job's folder path,
// longer than 63 characters, with slashes; the pipeline that Buildkite
// writes as an annotation only).
func CacheKey(name string, labels, annotations map[string]string) string {
	v := labels[name]
	if v == "" {
		v = annotations[name]
	}
	if v == "" {
		return ""
	}
	if len(v) > MaxKeyValue {
		sum := sha256.Sum256([]byte(v))
		v = "sha256:" + hex.EncodeToString(sum[:])
	}
	return name + "=" + v
}
