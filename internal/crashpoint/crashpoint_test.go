package crashpoint

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestParse(t *testing.T) {
	m := parse(" a/b , ,c/d")
	if len(m) != 2 || !m["a/b"] || !m["c/d"] {
		t.Errorf("parse = %v, want a/b and c/d", m)
	}
	if parse("") != nil {
		t.Error("an empty variable must arm nothing")
	}
}

// TestHitExits runs this test binary again with a point armed and checks
// that it dies there with the kill -9 status, and that unarmed points are
// passed.
func TestHitExits(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") == "1" {
		Hit("not/armed")
		Hit("armed/point")
		os.Exit(0) // not reached when the point works
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitExits$")
	cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", EnvVar+"=armed/point")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitCode {
		t.Fatalf("child ended with %v, want exit code %d", err, ExitCode)
	}
}
