package s3gateway

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// testChild is this test binary run again in a process of its own, to run
// one test's child side (the test sees env set) until it is killed with
// SIGKILL, as a kill -9 does: at whatever point the child then is, with
// nothing of its shutdown run. The kill tests of the in-flight file and of
// the user store use it.
type testChild struct {
	cmd   *exec.Cmd
	lines chan string // the child's standard output, a line at a time
}

// startTestChild starts the child running the test named test, with env
// ("NAME=value") added to its environment. A child still running when t
// ends is killed then.
func startTestChild(t *testing.T, test, env string) *testChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &testChild{cmd: cmd, lines: make(chan string)}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.kill(t)
		}
	})
	go func() {
		defer close(c.lines)
		for s := bufio.NewScanner(out); s.Scan(); {
			c.lines <- s.Text()
		}
	}()
	return c
}

// waitFor returns the rest of the child's first line that starts with
// prefix (the child prints versitygw's lines too).
func (c *testChild) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	for line := range c.lines {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	t.Fatalf("the child exited before it printed %q", prefix)
	return ""
}

// kill kills the child with SIGKILL and waits for it.
func (c *testChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait() // "signal: killed"
	for range c.lines {
	}
}
