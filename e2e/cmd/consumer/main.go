// Command consumer is the workload of the real node's tests: a static
// program, imported into the node's containerd as an image, that writes,
// reads and checks files in a volume and prints what it found, so that a
// test can tell from a pod's log what the pod saw.
//
//	consumer write  FILE TEXT          create FILE (not there before) holding TEXT
//	consumer append FILE TEXT          FILE must exist: print it, then append TEXT
//	consumer add    FILE TEXT          append TEXT, creating FILE if need be, then print FILE
//	consumer await  TRIGGER FILE TEXT  once TRIGGER exists, add TEXT to FILE
//	consumer read   FILE               print FILE
//	consumer expect FILE TEXT          FILE must hold exactly TEXT
//	consumer sleep  DURATION           wait, for pods that must stay running
//	consumer keep   FILE TEXT          FILE, if there, must hold exactly TEXT,
//	                                   else create it holding TEXT; then run
//	                                   until SIGTERM, as a replica of a
//	                                   StatefulSet that owns its volume does
//	consumer fill   DIR                leave in DIR what a build leaves in its
//	                                   cache, as the usual umask makes it: a
//	                                   file, a 0755 directory and a 0555
//	                                   directory, each with a file inside
//	consumer crash  DIR                fill DIR, then fail: a job that dies
//	                                   with its work half written
//	consumer bulk   FILE MIB           create FILE holding MIB MiB of random bytes
//
// A file it creates is writable by its group, as a cache shared by the
// pods of one team is. Every line it prints starts with the uid it runs
// as. It exits non-zero, with the reason on stderr and in the termination
// message, when a step fails; await gives up after ten minutes.
package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "uid=%d error: %v\n", os.Getuid(), err)
		_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
		os.Exit(1)
	}
}

// commands are the consumer's commands, each with the number of arguments
// it takes.
var commands = map[string]struct {
	args int
	run  func(args []string) error
}{
	"write":  {2, write},
	"append": {2, appendText},
	"add":    {2, func(args []string) error { return add(args[0], args[1]) }},
	"await":  {3, await},
	"read":   {1, read},
	"expect": {2, expect},
	"sleep":  {1, sleep},
	"keep":   {2, keep},
	"fill":   {1, func(args []string) error { return fill(args[0]) }},
	"crash":  {1, crash},
	"bulk":   {2, bulk},
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: consumer write|append|add|await|read|expect|sleep|keep|fill|crash|bulk ARGS")
	}
	cmd, args := args[0], args[1:]
	c, ok := commands[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q", cmd)
	}
	if len(args) != c.args {
		return fmt.Errorf("%s takes %d arguments, got %d", cmd, c.args, len(args))
	}
	return c.run(args)
}

// write creates FILE, not there before, holding TEXT.
func write(args []string) error {
	if err := writeTo(args[0], os.O_CREATE|os.O_EXCL, args[1]); err != nil {
		return err
	}
	report("wrote %s: %s", args[0], strconv.Quote(args[1]))
	return nil
}

// appendText prints FILE, which must exist, then appends TEXT to it.
func appendText(args []string) error {
	b, err := os.ReadFile(args[0])
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is not there: the volume came without its data", args[0])
	} else if err != nil {
		return err
	}
	report("read %s: %s", args[0], strconv.Quote(string(b)))
	if err := writeTo(args[0], os.O_APPEND, args[1]); err != nil {
		return err
	}
	report("appended %s: %s", args[0], strconv.Quote(args[1]))
	return nil
}

// await adds TEXT to FILE once TRIGGER exists, for ten minutes at most.
func await(args []string) error {
	report("waiting for %s", args[0])
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, err := os.Stat(args[0]); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in ten minutes", args[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	return add(args[1], args[2])
}

// read prints FILE.
func read(args []string) error {
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	report("read %s: %s", args[0], strconv.Quote(string(b)))
	return nil
}

// expect fails unless FILE holds exactly TEXT.
func expect(args []string) error {
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	if string(b) != args[1] {
		return fmt.Errorf("%s holds %q, want %q", args[0], b, args[1])
	}
	report("read %s as expected: %s", args[0], strconv.Quote(string(b)))
	return nil
}

// keep checks FILE holds TEXT, or creates it holding TEXT, then runs until
// SIGTERM.
func keep(args []string) error {
	b, err := os.ReadFile(args[0])
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeTo(args[0], os.O_CREATE|os.O_EXCL, args[1]); err != nil {
			return err
		}
		report("wrote %s: %s", args[0], strconv.Quote(args[1]))
	case err != nil:
		return err
	case string(b) != args[1]:
		return fmt.Errorf("%s holds %q, not %q: the volume is another's", args[0], b, args[1])
	default:
		report("found %s holding its own %s", args[0], strconv.Quote(args[1]))
	}
	// PID 1 of a container ignores a signal it has no handler for: the
	// handler lets the pod end at once when deleted.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	report("stopped")
	return nil
}

// bulk creates FILE holding MIB MiB of random bytes.
func bulk(args []string) error {
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 || n > 1024 {
		return fmt.Errorf("bulk takes a size in MiB from 1 to 1024, not %q", args[1])
	}
	// Random bytes: no filesystem compresses or dedupes them away.
	block := make([]byte, 1<<20)
	f, err := os.OpenFile(args[0], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o664)
	if err != nil {
		return err
	}
	for range n {
		if _, err := rand.Read(block); err != nil {
			return err
		}
		if _, err := f.Write(block); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	report("wrote %d MiB to %s", n, args[0])
	return nil
}

// crash fills DIR, then fails: a consumer that fails half way, its work
// left in DIR.
func crash(args []string) error {
	if err := fill(args[0]); err != nil {
		return err
	}
	return errors.New("crashed after filling " + args[0])
}

// sleep waits DURATION, for pods that must stay running.
func sleep(args []string) error {
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	report("sleeping %s", d)
	time.Sleep(d)
	return nil
}

// add appends text to path, creating it if need be, and prints the file as
// it is then.
func add(path, text string) error {
	if err := writeTo(path, os.O_CREATE|os.O_APPEND, text); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	report("added %s to %s, which now holds: %s", strconv.Quote(text), path, strconv.Quote(string(b)))
	return nil
}

// fill leaves in dir a file, a directory of mode 0755 and one of mode 0555,
// each holding a file: what only their owner, or root, may remove.
func fill(dir string) error {
	if err := os.WriteFile(dir+"/top.txt", []byte("top\n"), 0o644); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{"objects", 0o755}, {"readonly", 0o555}} {
		p := dir + "/" + d.name
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p+"/a.o", []byte("object\n"), 0o644); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		report("made %s (mode %04o) holding a.o", p, d.mode)
	}
	report("wrote %s/top.txt", dir)
	return nil
}

// writeTo opens path for writing with flag added and writes text. A file
// it creates is group-writable whatever the umask.
func writeTo(path string, flag int, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|flag, 0o664)
	if err != nil {
		return err
	}
	// Only the owner may change the mode: a file another pod created
	// keeps the mode it was given.
	if fi, err := f.Stat(); err == nil && flag&os.O_CREATE != 0 && fi.Sys().(*syscall.Stat_t).Uid == uint32(os.Getuid()) {
		if err := f.Chmod(0o664); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func report(format string, args ...any) {
	fmt.Printf("uid=%d %s\n", os.Getuid(), fmt.Sprintf(format, args...))
}
