package s3iam

import (
	"context"
	"net/http"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestAtomicUserMarks: the driver says a new user is created with its mark
// in one write only once a CreateUser answer showed it so. Before any
// answer it does not know; on the embedded server (which keeps CreateUser's
// tags) the first new user teaches it; an answer without the mark (a
// server that ignores CreateUser's tags, simulated by the transport) makes
// it false for good, a later answer with the mark notwithstanding.
func TestAtomicUserMarks(t *testing.T) {
	ctx := context.Background()
	g := newGate("", "")
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: g}
	d := newDriver(t, cfg)
	create := func() {
		t.Helper()
		spec := driver.CredentialSpec{
			UserName: "bbtest-marks-" + randomHex(4), Owner: driver.OwnerMark("binding", randomHex(4)),
			Bucket: "bbtest-marks", Access: driver.AccessReadOnly,
		}
		t.Cleanup(func() { _ = d.RevokeCredential(ctx, spec.UserName, spec.Owner) })
		if _, err := d.EnsureCredential(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Observe(ctx, driver.ObserveRequest{UserName: "bbtest-marks-none"}); err != nil {
		t.Fatal(err)
	}
	if d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks before any CreateUser = true, want false (not known yet)")
	}
	create()
	if !d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks after the embedded server kept CreateUser's tags = false, want true")
	}
	g.untagged = true
	create()
	if d.AtomicUserMarks() {
		t.Fatal("AtomicUserMarks after a CreateUser answer without the mark = true, want false")
	}
	g.untagged = false
	create()
	if d.AtomicUserMarks() {
		t.Error("AtomicUserMarks after the mark was dropped once, then kept = true, want false for good")
	}
}
