package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Pid returns the running broker's process id, or 0 when it is stopped.
func (b *Broker) Pid() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Memory is a process's resident memory as Linux reports it in
// /proc/PID/status, in bytes.
type Memory struct {
	RSS, PeakRSS int64 // VmRSS and VmHWM
}

// ProcMemory reads pid's resident memory from /proc (Linux only).
func ProcMemory(pid int) (Memory, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, fmt.Errorf("read process status: %w", err)
	}
	var m Memory
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("read process status: %s line %q", name, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("read process status: %s: %w", name, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.PeakRSS = kb << 10
		}
	}
	return m, nil
}

// auditPoll is how often AuditMeasured reads the audit's high-water mark:
// what it can miss is the growth of its last auditPoll.
const auditPoll = 20 * time.Millisecond

// AuditRun is one `bucketbroker admin audit` run: its exit status, output,
// wall time and the largest resident memory the process had.
type AuditRun struct {
	Code    int
	Output  string
	Took    time.Duration
	PeakRSS int64
}

// AuditMeasured is Audit that also reports the audit's wall time and peak
// resident memory. The peak is the process's own high-water mark (VmHWM),
// read while it runs, every auditPoll: not the rusage of its exit, whose
// ru_maxrss also counts the memory of the process that forked it (Go's
// os/exec forks sharing its parent's memory, and exec keeps that
// high-water mark), so it reported this test process's size.
func (b *Broker) AuditMeasured() (AuditRun, error) {
	if b.cmd != nil {
		return AuditRun{Code: 1}, fmt.Errorf("audit: stop the broker first (the audit starts the embedded server on its addresses)")
	}
	cmd := exec.Command(b.binary, "admin", "audit", "--output", "json", "--data-dir", b.DataDir)
	if b.embedded {
		cmd.Args = append(cmd.Args, "--s3-listen", b.s3Ad, "--iam-listen", b.iamAdr)
	}
	cmd.Args = append(cmd.Args, b.Args...)
	cmd.Env = append(os.Environ(), "BUCKETBROKER_S3_ROOT_ACCESS_KEY="+RootAK, "BUCKETBROKER_S3_ROOT_SECRET_KEY="+RootSK)
	cmd.Env = append(cmd.Env, b.Env...)
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return AuditRun{Code: 1}, fmt.Errorf("run audit: %w", err)
	}
	var peak atomic.Int64
	done := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(auditPoll)
		defer t.Stop()
		for {
			if m, err := ProcMemory(cmd.Process.Pid); err == nil && m.PeakRSS > peak.Load() {
				peak.Store(m.PeakRSS)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-polled
	r := AuditRun{Output: out.String(), Took: time.Since(start), PeakRSS: peak.Load()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		r.Code = 1
		return r, fmt.Errorf("run audit: %w", err)
	}
	return r, nil
}

// errExitedCleanly stands for the nil that exec.Cmd.Wait returns for a
// process that exited with status 0, so that messages about an unexpected
// exit wrap an error either way.
var errExitedCleanly = errors.New("exit status 0")

// exitErr is Wait's error, or errExitedCleanly for nil.
func exitErr(err error) error {
	if err == nil {
		return errExitedCleanly
	}
	return err
}

// noteExit writes how a process the harness stopped or killed ended to its
// log, after the harness's own "=== start" and "=== kill -9" lines.
func noteExit(log *LockedBuffer, err error) {
	fmt.Fprintf(log, "=== exited: %v\n", exitErr(err))
}
