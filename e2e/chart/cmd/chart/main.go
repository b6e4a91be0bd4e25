// Command chart installs, upgrades and uninstalls a release of
// charts/reclaimable on a cluster with the Helm SDK, as helm install,
// upgrade and uninstall do: the end-to-end tests install the chart with it.
// It also packages the chart of a version, as helm package does (make
// release).
//
//	chart install|upgrade|uninstall --kubeconfig K --chart DIR --release R --values FILE
//	chart template --chart DIR --values FILE
//	chart package --chart DIR --version X.Y.Z --app-version vX.Y.Z --out DIR
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"sigs.k8s.io/yaml"

	"github.com/reclaimable/reclaimable/e2e/chart"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: chart install|upgrade|uninstall|template|package [flags]")
	}
	verb := os.Args[1]
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the cluster's kubeconfig")
	dir := fs.String("chart", "", "the chart's directory")
	release := fs.String("release", "reclaimable", "the release's name")
	namespace := fs.String("namespace", "default", "the namespace of the release's record")
	valuesFile := fs.String("values", "", "a values file")
	version := fs.String("version", "", "package: the chart's version")
	appVersion := fs.String("app-version", "", "package: its appVersion, the image tag it installs")
	out := fs.String("out", ".", "package: where the chart's archive goes")
	_ = fs.Parse(os.Args[2:])
	if verb == "template" {
		if err := template(*dir, *valuesFile); err != nil {
			log.Fatalf("template: %v", err)
		}
		return
	}
	if verb == "package" {
		if err := pack(*dir, *version, *appVersion, *out); err != nil {
			log.Fatalf("package: %v", err)
		}
		return
	}
	if err := run(verb, *kubeconfig, *dir, *release, *namespace, *valuesFile); err != nil {
		log.Fatalf("%s: %v", verb, err)
	}
}

func run(verb, kubeconfig, dir, release, namespace, valuesFile string) error {
	cfg := &action.Configuration{}
	if err := cfg.Init(kube.GetConfig(kubeconfig, "", namespace), namespace, "secret", log.Printf); err != nil {
		return err
	}
	if verb == "uninstall" {
		u := action.NewUninstall(cfg)
		u.Wait = true
		u.Timeout = 2 * time.Minute
		res, err := u.Run(release)
		if err == nil && res.Info != "" {
			fmt.Println(res.Info)
		}
		return err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return err
	}
	values, err := readValues(valuesFile)
	if err != nil {
		return err
	}
	switch verb {
	case "install":
		i := action.NewInstall(cfg)
		i.ReleaseName, i.Namespace = release, namespace
		rel, err := i.Run(ch, values)
		if err != nil {
			return err
		}
		fmt.Printf("release %s installed, revision %d\n", rel.Name, rel.Version)
	case "upgrade":
		u := action.NewUpgrade(cfg)
		u.Namespace = namespace
		rel, err := u.Run(release, ch, values)
		if err != nil {
			return err
		}
		fmt.Printf("release %s upgraded, revision %d\n", rel.Name, rel.Version)
	default:
		return fmt.Errorf("unknown verb %q", verb)
	}
	return nil
}

// readValues reads a values file; none for "".
func readValues(path string) (map[string]any, error) {
	if path == "" {
		return map[string]any{}, nil
	}
	return chartutil.ReadValuesFile(path)
}

// template writes the objects the chart in dir renders with the values of
// valuesFile to standard output, as helm template does: what an install
// with the same values creates.
func template(dir, valuesFile string) error {
	values, err := readValues(valuesFile)
	if err != nil {
		return err
	}
	objs, err := chart.Render(dir, values)
	if err != nil {
		return err
	}
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		fmt.Printf("---\n%s", b)
	}
	return nil
}

// pack writes the chart in dir as an archive of version and appVersion
// into out, its metadata validated as helm package does.
func pack(dir, version, appVersion, out string) error {
	if version == "" || appVersion == "" {
		return fmt.Errorf("--version and --app-version are required")
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, appVersion
	if err := ch.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path, err := chartutil.Save(ch, out)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
