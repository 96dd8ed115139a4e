package crashpoint

import (
	"fmt"
	"os"
	"strings"
)

// EnvVar names the points at which the process exits.
const EnvVar = "BUCKETBROKER_CRASH_AT"

// ExitCode is the status the process exits with at a crash point, the one a
// shell reports for SIGKILL.
const ExitCode = 137

var armed = parse(os.Getenv(EnvVar))

func parse(v string) map[string]bool {
	if v == "" {
		return nil
	}
	m := map[string]bool{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			m[p] = true
		}
	}
	return m
}

// Hit exits the process at once if name is armed.
func Hit(name string) {
	if armed == nil || !armed[name] {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: exiting at %s\n", name)
	os.Exit(ExitCode)
}

// Points lists every crash point the code has, for harnesses that iterate
// over them. Keep it in step with the Hit calls.
var Points = []string{
	"provision/record-written",
	"provision/bucket-created",
	"deprovision/record-written",
	"deprovision/bindings-revoked",
	"deprovision/bucket-deleted",
	"bind/record-written",
	"bind/key-created",
	"bind/key-recorded",
	"unbind/record-written",
	"unbind/user-revoked",
}
