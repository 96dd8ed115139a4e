package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// stdoutThroughLogger points file descriptor 1 at a pipe whose lines go to
// log, one record each, and returns a file on the real standard output.
//
// versitygw (the embedded server) prints lines of its own to standard
// output ("initializing standalone IAM ..."), with no option to silence
// them. Left there, they are the only lines of a process that does not log
// through log: not JSON, no level, no time. The swap works on the
// descriptor, as withStdoutOnStderr does, so that versitygw's goroutines
// need no synchronization with it; it lasts as long as the process,
// because versitygw prints again when it reconnects to its IAM API.
func stdoutThroughLogger(log *slog.Logger) (*os.File, error) {
	saved, err := unix.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("keep standard output: %w", err)
	}
	unix.CloseOnExec(saved)
	r, w, err := os.Pipe()
	if err != nil {
		unix.Close(saved)
		return nil, fmt.Errorf("route standard output to the log: %w", err)
	}
	if err := unix.Dup2(int(w.Fd()), 1); err != nil {
		unix.Close(saved)
		r.Close()
		w.Close()
		return nil, fmt.Errorf("route standard output to the log: %w", err)
	}
	w.Close() // descriptor 1 keeps the pipe open
	go func() {
		// A Reader, not a Scanner: a line longer than a Scanner's buffer
		// would stop the reading, and then every print would block.
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line = strings.TrimRight(line, "\r\n"); line != "" {
				log.Info("Embedded S3 server output", "line", line)
			}
			if err != nil {
				return
			}
		}
	}()
	return os.NewFile(uintptr(saved), "/dev/stdout"), nil
}
