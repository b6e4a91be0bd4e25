package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// envRunMain makes the test binary run main with the arguments in
// envArgs instead of the tests: a process of its own, as logging
// configuration is process-wide.
const (
	envRunMain = "RECLAIMABLE_TEST_RUN_MAIN"
	envArgs    = "RECLAIMABLE_TEST_ARGS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		os.Args = append([]string{"reclaimable"}, strings.Fields(os.Getenv(envArgs))...)
		main()
		return
	}
	os.Exit(m.Run())
}

// runMain runs reclaimable with args in a process of its own and returns
// its exit code and everything it wrote.
func runMain(t *testing.T, args ...string) (int, []byte) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRunMain+"=1", envArgs+"="+strings.Join(args, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.Bytes()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.Bytes()
	}
	t.Fatal(err)
	return 0, nil
}

// With --logging-format=json every line is a JSON object a log pipeline can
// read, the structured values as fields of their own.
func TestLoggingFormatJSON(t *testing.T) {
	code, out := runMain(t, "releaser", "--logging-format=json", "--controller-id=json-test", "--kubeconfig=/nonexistent/kubeconfig")
	if code != 1 {
		t.Fatalf("exit code %d, want 1 (no kubeconfig); output:\n%s", code, out)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		msg, _ := entry["msg"].(string)
		msgs = append(msgs, msg)
		if msg == "Starting" && (entry["controllerID"] != "json-test" || entry["command"] != "releaser") {
			t.Errorf("the Starting line lacks its values as fields: %s", line)
		}
	}
	if len(msgs) < 2 || msgs[0] != "Starting" || msgs[len(msgs)-1] != "Invalid configuration" {
		t.Errorf("messages %q, want Starting first and Invalid configuration last", msgs)
	}
}

// Text stays the default, klog's lines.
func TestLoggingFormatTextByDefault(t *testing.T) {
	code, out := runMain(t, "releaser", "--kubeconfig=/nonexistent/kubeconfig")
	if code != 1 || !bytes.Contains(out, []byte(`] "Starting" controllerID="reclaimable" command="releaser"`)) {
		t.Errorf("exit code %d, output:\n%s\nwant klog's text line for Starting", code, out)
	}
}

func TestLoggingFormatUnknownIsRefused(t *testing.T) {
	code, out := runMain(t, "releaser", "--logging-format=yaml")
	if code != 2 || !bytes.Contains(out, []byte("yaml")) {
		t.Errorf("exit code %d, output:\n%s\nwant 2 and an error naming the format", code, out)
	}
}
