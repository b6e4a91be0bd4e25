package process

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes the test binary play reclaimable: the subcommand says how.
const fakeEnv = "CLUSTER_TEST_FAKE_RECLAIMABLE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(fakeReclaimable(os.Args[1], os.Args[2:]))
	}
	os.Exit(m.Run())
}

// fakeReclaimable serves /readyz on --health-addr until SIGTERM ("serve"),
// does the same but ignores SIGTERM ("stubborn"), or fails at once ("fail").
func fakeReclaimable(sub string, args []string) int {
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	health := fs.String("health-addr", "", "")
	fs.String("metrics-addr", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if sub == "fail" {
		fmt.Println("cannot start: no such backend")
		return 3
	}
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	go func() {
		fmt.Println("serving on", *health)
		_ = http.ListenAndServe(*health, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	}()
	for range terms {
		if sub != "stubborn" {
			return 0
		}
	}
	return 0
}

func newFake(t *testing.T, sub string) *Controller {
	t.Helper()
	c, err := NewController(os.Args[0], filepath.Join(t.TempDir(), "log"), sub)
	if err != nil {
		t.Fatal(err)
	}
	// The process gets no environment of this one's but the machine's.
	c.Env = []string{fakeEnv + "=1"}
	t.Cleanup(func() { c.Signal(syscall.SIGKILL, 10*time.Second) })
	return c
}

func TestControllerRestartsWithTheSameFlagsAndLog(t *testing.T) {
	c := newFake(t, "serve")
	if c.Running() {
		t.Fatal("Running before Start")
	}
	for run := 1; run <= 2; run++ {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err == nil {
			t.Fatal("a second Start of a running process succeeded")
		}
		d, err := c.WaitReady(context.Background(), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 {
			t.Errorf("run %d: ready %s after start", run, d)
		}
		c.Signal(syscall.SIGTERM, 30*time.Second)
		if exited, code := c.Exited(); !exited || code != 0 {
			t.Fatalf("run %d: after SIGTERM exited=%t code=%d, want a clean exit", run, exited, code)
		}
	}
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Count(string(b), "serving on "+c.HealthAddr+"\n"), 2; got != want {
		t.Errorf("log has %d runs on %s, want %d:\n%s", got, c.HealthAddr, want, b)
	}
}

func TestControllerWaitReadyReportsExitWithLog(t *testing.T) {
	c := newFake(t, "fail")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	_, err := c.WaitReady(context.Background(), 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited with code 3") || !strings.Contains(err.Error(), "no such backend") {
		t.Fatalf("WaitReady = %v, want the exit code and the log", err)
	}
}

func TestControllerSignalKillsAfterGrace(t *testing.T) {
	c := newFake(t, "stubborn")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Signal(syscall.SIGTERM, 100*time.Millisecond)
	if exited, code := c.Exited(); !exited || code != -1 {
		t.Fatalf("after SIGTERM and grace exited=%t code=%d, want killed by a signal", exited, code)
	}
}
