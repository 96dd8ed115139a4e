package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/store"
)

// TestOpenRefusesLostDatabase: an empty schema where the caller's evidence
// says that records were kept is refused with store.ErrLost, and no table
// is created; starting over on purpose creates the store, and a store that
// holds its schema opens whatever the evidence says.
func TestOpenRefusesLostDatabase(t *testing.T) {
	dsn, schema := freshSchema(t)
	earlier := errors.New("the data dir holds encryption.key from an earlier start")
	said := store.OpenOptions{Earlier: func() error { return earlier }}

	s, err := OpenWith(t.Context(), dsn, said)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open of an empty schema with evidence of records succeeded, want store.ErrLost")
	}
	if !errors.Is(err, store.ErrLost) || !strings.Contains(err.Error(), earlier.Error()) {
		t.Errorf("Open = %v, want store.ErrLost naming the evidence", err)
	}
	if tables := query(t, dsn, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, schema); len(tables) != 0 {
		t.Errorf("the refused Open left tables: %v", tables)
	}

	s, err = OpenWith(t.Context(), dsn, store.OpenOptions{StartOver: true, Earlier: said.Earlier})
	if err != nil {
		t.Fatalf("Open to start over: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenWith(t.Context(), dsn, said)
	if err != nil {
		t.Fatalf("Open of the store started over: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
