package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/e2e/process"
)

// manifestEnv is the environment each controller's Deployment in
// manifests/base gives its process and the bench can give a process: its
// container's memory limit as the downward API would (MEMORY_LIMIT, in
// bytes), which the binary turns into the Go runtime's soft limit.
func manifestEnv() (map[string][]string, error) {
	out := map[string][]string{}
	for _, name := range controllerNames {
		path := filepath.Join(process.RepoRoot(), "manifests", "base", name+".yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			return nil, fmt.Errorf("%s: want one container", path)
		}
		c := d.Spec.Template.Spec.Containers[0]
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
				continue
			}
			limit, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok {
				return nil, fmt.Errorf("%s: %s from limits.memory, and no memory limit", path, e.Name)
			}
			out[name] = append(out[name], e.Name+"="+strconv.FormatInt(limit.Value(), 10))
		}
	}
	return out, nil
}
