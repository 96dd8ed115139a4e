package postgres

import (
	"context"
	"strconv"
	"strings"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// listPage is List with opts.After, opts.Limit or opts.ByName set: the
// rows after After in (kind, id) order (or (resource_name, id)), read LIMIT rows at a time from the primary
// key's index until Limit records have decoded (rows that cannot be
// decoded are noted and skipped, as List does) or the rows run out.
func (s *Store) listPage(ctx context.Context, opts engine.ListOptions) ([]*engine.Record, error) {
	return store.Paged(opts, func(after engine.RecordKey, want int, out *[]*engine.Record) (int, engine.RecordKey, bool, error) {
		query, args, none := pageQuery(opts, after, want)
		if none {
			return 0, engine.RecordKey{}, true, nil
		}
		n, last, err := s.queryPage(ctx, query, args, out)
		if err != nil {
			return 0, last, false, callErr(ctx, err)
		}
		return n, last, false, nil
	})
}

// pageQuery returns the query of the rows of opts after after, at most
// limit of them (all for 0), or none when no row can follow after. Each
// form is answered from an index, searched from after (EXPLAIN in
// TestListPagedPlans).
func pageQuery(opts engine.ListOptions, after engine.RecordKey, limit int) (query string, args []any, none bool) {
	var where []string
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if opts.Kind != "" {
		where = append(where, "kind = "+arg(string(opts.Kind)))
	}
	if opts.InstanceID != "" {
		where = append(where, "instance_id = "+arg(opts.InstanceID))
	}
	if opts.Unfinished {
		// A literal, as in List: the partial index records_unfinished.
		where = append(where, "op_state = "+quote(string(engine.OpInProgress)))
	}
	switch {
	case opts.ByName:
		// kind = $1 and the row value: an index scan of
		// records_resource_name from it.
		if after != (engine.RecordKey{}) {
			where = append(where, "(resource_name, id) > ("+arg(after.Name)+", "+arg(after.ID)+")")
		}
	case opts.Kind == "":
		where = append(where, "(kind, id) > ("+arg(string(after.Kind))+", "+arg(after.ID)+")")
	case after.Kind == opts.Kind:
		where = append(where, "id > "+arg(after.ID))
	case after.Kind > opts.Kind:
		return "", nil, true
	}
	query = "SELECT kind, id, instance_id, resource_name, version, data FROM records"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	if opts.ByName {
		query += " ORDER BY resource_name, id"
	} else {
		query += " ORDER BY kind, id"
	}
	if limit > 0 {
		query += " LIMIT " + arg(limit)
	}
	return query, args, false
}

// queryPage appends the records of one query's rows that decode to out,
// and returns how many rows it read and the key of the last.
func (s *Store) queryPage(ctx context.Context, query string, args []any, out *[]*engine.Record) (rows int, last engine.RecordKey, err error) {
	call, progress, cancel := whileAnswering(ctx)
	defer cancel()
	rs, err := s.pool.Query(call, query, args...)
	if err != nil {
		return 0, last, err
	}
	defer rs.Close()
	for rs.Next() {
		progress()
		var raw store.Raw
		var name string
		if err := rs.Scan(&raw.Kind, &raw.ID, &raw.InstanceID, &name, &raw.Version, &raw.Data); err != nil {
			return 0, last, err
		}
		rows++
		last = engine.RecordKey{Kind: raw.Kind, ID: raw.ID, Name: name}
		if r, ok := store.DecodeListed(&s.unreadable, raw); ok {
			*out = append(*out, r)
		}
	}
	return rows, last, rs.Err()
}
