package sqlite

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// pagedOptions are the forms of a paged List, each after a record of the
// kind it selects and after one of another kind.
var pagedOptions = []engine.ListOptions{
	{Limit: 1000},
	{Kind: engine.KindBinding, Limit: 1000},
	{Unfinished: true, Limit: 1000},
	{InstanceID: "i1", Limit: 1000},
	{Kind: engine.KindBinding, InstanceID: "i1", Limit: 1000},
	{Kind: engine.KindInstance, Unfinished: true, Limit: 1000},
	{Kind: engine.KindInstance, ByName: true, Limit: 1000},
	{Kind: engine.KindBinding, ByName: true, Limit: 1000},
}

// TestListPagedPlans: every paged query seeks an index to its cursor and
// reads in the index's order, never scanning the table nor sorting, so
// that a page costs its own rows whatever the page's place.
func TestListPagedPlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "records.db"))
	for _, opts := range pagedOptions {
		for _, after := range []engine.RecordKey{{}, {Kind: engine.KindBinding, ID: "b1", Name: "bb-u"}, {Kind: engine.KindInstance, ID: "i1", Name: "bb-i"}} {
			query, args, none := pageQuery(opts, after, opts.Limit)
			if none {
				continue
			}
			rows, err := s.readers.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
			if err != nil {
				t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			_ = rows.Close()
			p := strings.Join(plan, "; ")
			// A cursor inside the listing must bound the search, not only
			// the kind (which would read from the kind's first row); one
			// of a kind before opts.Kind lists the whole kind.
			inside := after != (engine.RecordKey{}) && (opts.Kind == "" || opts.Kind == after.Kind || opts.ByName)
			bounded := strings.Contains(p, "(kind,id)>(?,?)") || strings.Contains(p, "id>?") || strings.Contains(p, "(resource_name,id)>(?,?)")
			if !strings.HasPrefix(p, "SEARCH records USING") || strings.Contains(p, "TEMP B-TREE") || (inside && !bounded) {
				t.Errorf("List(%+v) after %+v: plan %q, want an index searched from the cursor, no sort", opts, after, p)
			}
		}
	}
}
