package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
)

// namedUpstream is an upstream that New only asks for its name and
// services (its operations are internal/upstream's, tested there against a
// real broker process).
type namedUpstream struct {
	engine.Backend
	name string
	ids  []string
}

func (u namedUpstream) Name() string         { return u.name }
func (u namedUpstream) ServiceIDs() []string { return u.ids }

func TestNewChecksUpstreams(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	svc := json.RawMessage(`{"id":"u-svc","name":"db","description":"d","bindable":true,"plans":[{"id":"u-plan","name":"p","description":"d"}]}`)
	upOnly, err := catalog.Merge(nil, catalog.Source{Upstream: "db", Services: []json.RawMessage{svc}})
	if err != nil {
		t.Fatal(err)
	}
	both, err := catalog.Merge(catalog.Default(), catalog.Source{Upstream: "db", Services: []json.RawMessage{svc}})
	if err != nil {
		t.Fatal(err)
	}
	db := namedUpstream{name: "db", ids: []string{"u-svc"}}
	for name, tc := range map[string]struct {
		cat  *catalog.Catalog
		ups  []engine.Backend
		want string // "" accepts
	}{
		"upstream only, no driver":       {cat: upOnly, ups: []engine.Backend{db}},
		"bucket service without driver":  {cat: both, ups: []engine.Backend{db}, want: "driver"},
		"service not in the catalog":     {cat: upOnly, ups: []engine.Backend{db, namedUpstream{name: "q", ids: []string{"nope"}}}, want: `"nope" of backend "q" is not in the catalog`},
		"a service of two upstreams":     {cat: upOnly, ups: []engine.Backend{db, namedUpstream{name: "db2", ids: []string{"u-svc"}}}, want: `backends "db" and "db2" both serve`},
		"two upstreams of one name":      {cat: upOnly, ups: []engine.Backend{db, namedUpstream{name: "db"}}, want: `two backends are named "db"`},
		"no upstream serves the service": {cat: upOnly, want: "driver"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := engine.New(engine.Options{Store: st, Catalog: tc.cat, Box: box, Backends: tc.ups})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// A bucket record left unfinished, resumed by a process that serves only
// upstreams (no driver), fails saying why instead of crashing the process.
func TestBucketRecordWithoutTheBucketService(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box, err := secretbox.New(make([]byte, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := &engine.Record{Kind: engine.KindInstance, ID: "old", Phase: engine.PhaseDeprovisioning, Backend: "bucket",
		Bucket:    &engine.BucketState{Bucket: "bb-old", Owner: "instance/old"},
		Op:        engine.Operation{ID: "op1", Type: engine.OpDeprovision, State: engine.OpInProgress, StartedAt: now, Deadline: now.Add(time.Hour)},
		CreatedAt: now, UpdatedAt: now}
	if err := st.Insert(ctx, rec); err != nil {
		t.Fatal(err)
	}
	svc := json.RawMessage(`{"id":"u-svc","name":"db","description":"d","bindable":true,"plans":[{"id":"u-plan","name":"p","description":"d"}]}`)
	cat, err := catalog.Merge(nil, catalog.Source{Upstream: "db", Services: []json.RawMessage{svc}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: st, Catalog: cat, Box: box, Backends: []engine.Backend{namedUpstream{name: "db", ids: []string{"u-svc"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Shutdown(ctx) }()
	for {
		lo, err := e.InstanceLastOperation(ctx, "old", "op1")
		if err != nil {
			t.Fatal(err)
		}
		if lo.State != engine.OpInProgress {
			if lo.State != engine.OpFailed || !strings.Contains(lo.Description, "bucket service is not served") {
				t.Fatalf("operation ended %+v", lo)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
