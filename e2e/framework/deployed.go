package framework

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The controllers run in the tests as the manifests run them
// (manifests/base/*.yaml, held to these by TestInstallDeploymentsAreHardened):
// as user and group 65532, the distroless image's nonroot user, with no
// capability. A process whose user is not root has none: the kernel clears
// them when it leaves root. So whatever a controller reads or writes must
// be its user's, as in its pod: its kubeconfig (a Secret there), its share
// (fsGroup there). What only root could do on a real installation fails
// here too.
const (
	DeployedUID = 65532
	DeployedGID = 65532
)

// deployedCredential is the credential controller processes start with, or
// nil where the tests do not run as root and cannot take another user's.
func deployedCredential() *syscall.Credential {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.Credential{Uid: DeployedUID, Gid: DeployedGID, Groups: []uint32{DeployedGID}}
}

// ForControllers gives path to the controllers' user, as a Kubernetes
// volume with fsGroup gives a pod its share.
func ForControllers(t testing.TB, path string) {
	t.Helper()
	if err := giveToControllers(path); err != nil {
		t.Fatal(err)
	}
}

// giveToControllers makes path the controllers' user's, where the tests
// run as root and can.
func giveToControllers(path string) error {
	if deployedCredential() == nil {
		return nil
	}
	return os.Chown(path, DeployedUID, DeployedGID)
}

// ControllerDir returns a new directory that the controllers' user owns,
// for a share (--directory-root) or a controller's files; elem names
// directories to make in it, also theirs, and the last of them is
// returned. Everything in it is removed at the end of the test, whoever
// wrote it.
func ControllerDir(t testing.TB, elem ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "reclaimable-share-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ForControllers(t, dir)
	for _, e := range elem {
		dir = filepath.Join(dir, e)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ForControllers(t, dir)
	}
	return dir
}

// WriteControllerKubeconfig writes cfg, its certificates and keys embedded,
// to a file of the controllers' user in dir, and returns its path.
func WriteControllerKubeconfig(t testing.TB, cfg *clientcmdapi.Config, dir, name string) string {
	t.Helper()
	path, err := writeKubeconfigFor(cfg, dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// writeControllerKubeconfig writes the administrator's kubeconfig for the
// controllers' user into dir, made theirs, and returns its path.
func writeControllerKubeconfig(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if err := giveToControllers(dir); err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(current.Kubeconfig)
	if err != nil {
		return "", err
	}
	return writeKubeconfigFor(cfg, dir, "admin.kubeconfig")
}

func writeKubeconfigFor(cfg *clientcmdapi.Config, dir, name string) (string, error) {
	cfg = cfg.DeepCopy()
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	if err := giveToControllers(path); err != nil {
		return "", err
	}
	return path, nil
}
