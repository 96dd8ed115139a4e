package sqlite

import (
	"context"
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
			return 0, last, false, err
		}
		return n, last, false, nil
	})
}

// pageQuery returns the query of the rows of opts after after, at most
// limit of them (all for 0), or none when no row can follow after. Each
// form is answered from an index, searched from after (EXPLAIN QUERY PLAN
// in TestListPagedPlans).
func pageQuery(opts engine.ListOptions, after engine.RecordKey, limit int) (query string, args []any, none bool) {
	var where []string
	if opts.Kind != "" {
		where = append(where, "kind = ?")
		args = append(args, opts.Kind)
	}
	if opts.InstanceID != "" {
		where = append(where, "instance_id = ?")
		args = append(args, opts.InstanceID)
	}
	if opts.Unfinished {
		where = append(where, "op_state = ?")
		args = append(args, engine.OpInProgress)
	}
	switch {
	case opts.ByName:
		// kind = ? and the row value: SQLite seeks records_resource_name
		// to it.
		if after != (engine.RecordKey{}) {
			where = append(where, "(resource_name, id) > (?, ?)")
			args = append(args, after.Name, after.ID)
		}
	case opts.Kind == "":
		// A row value: SQLite seeks the index to it.
		where = append(where, "(kind, id) > (?, ?)")
		args = append(args, after.Kind, after.ID)
	case after.Kind == opts.Kind:
		// kind = ? AND id > ?, not the row value, which SQLite would
		// search by kind alone, from the kind's first row.
		where = append(where, "id > ?")
		args = append(args, after.ID)
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
		query += " LIMIT ?"
		args = append(args, limit)
	}
	return query, args, false
}

// queryPage appends the records of one query's rows that decode to out,
// and returns how many rows it read and the key of the last.
func (s *Store) queryPage(ctx context.Context, query string, args []any, out *[]*engine.Record) (rows int, last engine.RecordKey, err error) {
	rs, err := s.readers.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, last, err
	}
	defer rs.Close()
	for rs.Next() {
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
