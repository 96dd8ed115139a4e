package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// TestListPagedPlans: every paged query can be answered from an index
// searched from its cursor, in the index's order (no sort): with
// sequential scans and sorts priced out, as a large table prices them,
// the planner picks such an index for each form.
func TestListPagedPlans(t *testing.T) {
	dsn, _ := freshSchema(t)
	open(t, dsn) // the schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := connect(ctx, t, dsn)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off"); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []engine.ListOptions{
		{Limit: 1000},
		{Kind: engine.KindBinding, Limit: 1000},
		{Unfinished: true, Limit: 1000},
		{InstanceID: "i1", Limit: 1000},
		{Kind: engine.KindBinding, InstanceID: "i1", Limit: 1000},
		{Kind: engine.KindInstance, Unfinished: true, Limit: 1000},
		{Kind: engine.KindInstance, ByName: true, Limit: 1000},
		{Kind: engine.KindBinding, ByName: true, Limit: 1000},
	} {
		for _, after := range []engine.RecordKey{{}, {Kind: engine.KindBinding, ID: "b1", Name: "bb-u"}, {Kind: engine.KindInstance, ID: "i1", Name: "bb-i"}} {
			query, args, none := pageQuery(opts, after, opts.Limit)
			if none {
				continue
			}
			rows, err := conn.Query(ctx, "EXPLAIN "+query, args...)
			if err != nil {
				t.Fatalf("EXPLAIN %s: %v", query, err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, strings.TrimSpace(line))
			}
			rows.Close()
			p := strings.Join(plan, "; ")
			t.Logf("%+v after %+v: %s", opts, after, p)
			// A cursor inside the listing must be an index condition.
			inside := after != (engine.RecordKey{}) && (opts.Kind == "" || opts.Kind == after.Kind || opts.ByName)
			bounded := strings.Contains(p, "Index Cond: ") && (strings.Contains(p, "ROW(kind, id) > ROW(") || strings.Contains(p, "(id > ") ||
				strings.Contains(p, "ROW(resource_name, id) > ROW("))
			if !strings.Contains(p, "Index Scan using") || strings.Contains(p, "Sort") || strings.Contains(p, "Seq Scan") || (inside && !bounded) {
				t.Errorf("List(%+v) after %+v: plan %q, want an index searched from the cursor, no sort", opts, after, p)
			}
		}
	}
}
