package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// listPageSize is how many records a listing reads from the store at a
// time: the listing holds one page of records, never the whole store.
const listPageSize = 1000

// defaultStuckAfter is --stuck-after's default: several sweeps of a broker
// with the default lease (60 s; the sweep resumes an operation no replica
// drives every 15 s), so that a short gap between two replicas is not
// taken for a stuck operation.
const defaultStuckAfter = 10 * time.Minute

// listing is what `admin instances`, `admin bindings` and `admin
// operations` share: the store, the filters and the output.
type listing struct {
	store, dataDir string
	output         string
	states         []string
	service, plan  string
	backend        string
	instance       string
	olderThan      time.Duration
	newerThan      time.Duration
	stuck          bool
	stuckAfter     time.Duration
	limit          int
	after          string
	// ops lists operations (admin operations): its states are operation
	// states, and its age is the operation's.
	ops bool
}

const stuckHelp = `An operation is stuck (--stuck, and the STUCK column of -o wide) when it
is in progress and either
  - its deadline has passed: the engine fails an operation at its deadline
    (once the backend call in flight then returns), so one still in
    progress after it is not being driven; or
  - no replica holds its lease, and none has for longer than --stuck-after
    (counted from the end of its last lease, or from its start when it never
    had one): every replica resumes such an operation within a sweep
    (a quarter of the lease), so one left longer is not moving.
An operation that a replica drives and retries is not stuck before its
deadline: its description then says what it retries and why.`

func (l *listing) bind(cmd *cobra.Command, kind string) {
	f := cmd.Flags()
	bindStoreFlag(f, &l.store)
	bindDataDirFlag(f, &l.dataDir)
	f.StringVarP(&l.output, "output", "o", "", "output format: empty for the table, wide for the table with more columns, json for one JSON list")
	stateHelp := "list only records in these phases (comma-separated: provisioning, ready, updating, deprovisioning, failed, deleted); deleted records are listed only when named"
	if l.ops {
		stateHelp = "list only operations in these states (comma-separated: in-progress, succeeded, failed; default in-progress)"
	}
	f.StringSliceVar(&l.states, "state", nil, stateHelp)
	f.StringVar(&l.service, "service", "", "list only records of this service id")
	f.StringVar(&l.plan, "plan", "", "list only records of this plan id")
	f.StringVar(&l.backend, "backend", "", "list only records of this backend: bucket, or an upstream's name (serve's --upstream-config)")
	age := "created"
	if l.ops {
		age = "whose operation started"
	}
	f.DurationVar(&l.olderThan, "older-than", 0, "list only records "+age+" more than this long ago (e.g. 1h)")
	f.DurationVar(&l.newerThan, "newer-than", 0, "list only records "+age+" less than this long ago")
	f.BoolVar(&l.stuck, "stuck", false, "list only records whose operation is stuck (see above)")
	f.DurationVar(&l.stuckAfter, "stuck-after", defaultStuckAfter, "how long an in-progress operation may go without a replica holding its lease before it counts as stuck")
	f.IntVar(&l.limit, "limit", 0, "print at most this many rows (0: all); standard error says when more match")
	if !l.ops {
		f.StringVar(&l.after, "after", "", "list only "+kind+"s after this id (in id order): the next page after a --limit")
	}
}

// check refuses bad flags before the store is opened.
func (l *listing) check() error {
	if l.output != "" && l.output != "wide" && l.output != "json" {
		return fmt.Errorf("--output %q: want wide or json (or none for the table)", l.output)
	}
	for _, s := range l.states {
		if _, ok := l.stateOf(s); !ok {
			want := "provisioning, ready, updating, deprovisioning, failed or deleted"
			if l.ops {
				want = "in-progress, succeeded or failed"
			}
			return fmt.Errorf("--state %q: want %s", s, want)
		}
	}
	switch {
	case l.olderThan < 0 || l.newerThan < 0 || l.stuckAfter <= 0:
		return errors.New("--older-than and --newer-than must not be negative, --stuck-after must be positive")
	case l.limit < 0:
		return fmt.Errorf("--limit %d: want 0 (all) or more", l.limit)
	}
	return nil
}

// stateOf returns the phase (or, listing operations, the operation state)
// that a --state value names.
func (l *listing) stateOf(s string) (string, bool) {
	if l.ops {
		switch strings.ReplaceAll(s, "-", " ") {
		case string(engine.OpInProgress):
			return string(engine.OpInProgress), true
		case string(engine.OpSucceeded), string(engine.OpFailed):
			return s, true
		}
		return "", false
	}
	switch engine.Phase(s) {
	case engine.PhaseProvisioning, engine.PhaseReady, engine.PhaseUpdating, engine.PhaseDeprovisioning, engine.PhaseFailed, engine.PhaseDeleted:
		return s, true
	}
	return "", false
}

// filter says whether r is listed.
type filter func(r *engine.Record, now time.Time) bool

func (l *listing) filter() filter {
	states := map[string]bool{}
	for _, s := range l.states {
		v, _ := l.stateOf(s)
		states[v] = true
	}
	return func(r *engine.Record, now time.Time) bool {
		state, since := string(r.Phase), r.CreatedAt
		if l.ops {
			state, since = string(r.Op.State), r.Op.StartedAt
		}
		switch {
		case len(states) > 0 && !states[state]:
			return false
		case len(states) == 0 && l.ops && r.Op.State != engine.OpInProgress:
			return false
		case len(states) == 0 && !l.ops && r.Phase == engine.PhaseDeleted:
			return false
		case l.service != "" && r.Request.ServiceID != l.service,
			l.plan != "" && r.Request.PlanID != l.plan,
			l.backend != "" && r.Backend != l.backend:
			return false
		case l.olderThan > 0 && now.Sub(since) < l.olderThan,
			l.newerThan > 0 && now.Sub(since) >= l.newerThan:
			return false
		case l.stuck && stuckReason(r, now, l.stuckAfter) == "":
			return false
		}
		return true
	}
}

// stuckReason says why r's operation is stuck (stuckHelp), or "" when it
// is not.
func stuckReason(r *engine.Record, now time.Time, after time.Duration) string {
	if r.Op.Finished() {
		return ""
	}
	if !r.Op.Deadline.IsZero() && now.After(r.Op.Deadline) {
		return "past its deadline by " + duration.HumanDuration(now.Sub(r.Op.Deadline))
	}
	if r.Lease != "" && now.Before(r.LeaseUntil) {
		return ""
	}
	since := r.Op.StartedAt
	if r.LeaseUntil.After(since) {
		since = r.LeaseUntil
	}
	if now.Sub(since) > after {
		return "no replica has driven it for " + duration.HumanDuration(now.Sub(since))
	}
	return ""
}

// row is a listed record as -o json prints it: its fields are stable, and
// it holds no secret (no sealed secret, no parameters, no context).
type row struct {
	Kind       engine.Kind `json:"kind"`
	ID         string      `json:"id"`
	InstanceID string      `json:"instanceId,omitempty"`
	ServiceID  string      `json:"serviceId"`
	PlanID     string      `json:"planId"`
	Backend    string      `json:"backend"`
	// Resource is the backend's name for it: a bucket instance's bucket,
	// a bucket binding's user; empty for an upstream's records.
	Resource   string       `json:"resource,omitempty"`
	Phase      engine.Phase `json:"phase"`
	Operation  opRow        `json:"operation"`
	Stuck      string       `json:"stuck,omitempty"`
	Lease      string       `json:"lease,omitempty"`
	LeaseUntil time.Time    `json:"leaseUntil,omitzero"`
	CreatedAt  time.Time    `json:"createdAt"`
	UpdatedAt  time.Time    `json:"updatedAt"`
	Version    int64        `json:"version"`
}

// opRow is an operation as the listings print it.
type opRow struct {
	ID          string         `json:"id"`
	Type        engine.OpType  `json:"type"`
	State       engine.OpState `json:"state"`
	Description string         `json:"description,omitempty"`
	StartedAt   time.Time      `json:"startedAt"`
	Deadline    time.Time      `json:"deadline"`
	EndedAt     time.Time      `json:"endedAt,omitzero"`
}

func opRowOf(o engine.Operation) opRow {
	return opRow{ID: o.ID, Type: o.Type, State: o.State, Description: o.Description, StartedAt: o.StartedAt, Deadline: o.Deadline, EndedAt: o.EndedAt}
}

func rowOf(r *engine.Record, now time.Time, stuckAfter time.Duration) row {
	return row{Kind: r.Kind, ID: r.ID, InstanceID: r.InstanceID, ServiceID: r.Request.ServiceID, PlanID: r.Request.PlanID,
		Backend: r.Backend, Resource: r.ResourceName(), Phase: r.Phase, Operation: opRowOf(r.Op),
		Stuck: stuckReason(r, now, stuckAfter), Lease: r.Lease, LeaseUntil: r.LeaseUntil,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Version: r.Version}
}

// printer writes rows as the table, the wide table or a JSON list. The
// JSON list is written as the rows come; the table is aligned once all
// are in (tabwriter keeps its cells, not the records).
type printer struct {
	w      io.Writer
	tw     *tabwriter.Writer
	output string
	kind   engine.Kind
	ops    bool
	now    time.Time
	n      int
}

func newPrinter(w io.Writer, l *listing, kind engine.Kind, now time.Time) *printer {
	p := &printer{w: w, output: l.output, kind: kind, ops: l.ops, now: now}
	if l.output != "json" {
		p.tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(p.tw, strings.Join(p.columns(), "\t"))
	}
	return p
}

func (p *printer) columns() []string {
	var c []string
	switch {
	case p.ops:
		c = []string{"KIND", "ID", "BACKEND", "OPERATION", "STATE", "AGE", "DEADLINE", "DESCRIPTION"}
	case p.kind == engine.KindBinding:
		c = []string{"ID", "INSTANCE", "BACKEND", "PLAN", "STATE", "OPERATION", "AGE", "DESCRIPTION"}
	default:
		c = []string{"ID", "BACKEND", "PLAN", "STATE", "OPERATION", "AGE", "DESCRIPTION"}
	}
	if p.output == "wide" {
		c = append(c, "SERVICE", "RESOURCE", "STARTED", "UPDATED", "LEASE", "VERSION", "STUCK")
	}
	return c
}

func (p *printer) print(rw row) error {
	p.n++
	if p.output == "json" {
		sep := ",\n"
		if p.n == 1 {
			sep = "[\n"
		}
		b, err := json.MarshalIndent(rw, "  ", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s  %s", sep, b)
		return err
	}
	wide := p.output == "wide"
	desc := rw.Operation.Description
	if !wide {
		desc = truncate(desc, 60)
	}
	op := string(rw.Operation.Type) + " " + string(rw.Operation.State)
	var c []string
	switch {
	case p.ops:
		c = []string{string(rw.Kind), rw.ID, rw.Backend, string(rw.Operation.Type), string(rw.Operation.State),
			p.age(rw.Operation.StartedAt), p.until(rw.Operation), desc}
	case p.kind == engine.KindBinding:
		c = []string{rw.ID, rw.InstanceID, rw.Backend, dash(rw.PlanID), string(rw.Phase), op, p.age(rw.CreatedAt), desc}
	default:
		c = []string{rw.ID, rw.Backend, dash(rw.PlanID), string(rw.Phase), op, p.age(rw.CreatedAt), desc}
	}
	if wide {
		lease := "-"
		if rw.Lease != "" {
			lease = rw.Lease + " until " + rw.LeaseUntil.Format(time.RFC3339)
		}
		c = append(c, dash(rw.ServiceID), dash(rw.Resource), stamp(rw.Operation.StartedAt), stamp(rw.UpdatedAt), lease,
			fmt.Sprint(rw.Version), dash(rw.Stuck))
	}
	_, err := fmt.Fprintln(p.tw, strings.Join(c, "\t"))
	return err
}

// close ends the output; empty tells the table it listed nothing.
func (p *printer) close(empty string) error {
	if p.output == "json" {
		end := "\n]\n"
		if p.n == 0 {
			end = "[]\n"
		}
		_, err := io.WriteString(p.w, end)
		return err
	}
	if p.n == 0 {
		_, err := fmt.Fprintln(p.w, empty)
		return err
	}
	return p.tw.Flush()
}

func (p *printer) age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(p.now.Sub(t))
}

// until says when an unfinished operation's deadline is (in 5m) or was
// (5m ago); "-" for a finished one.
func (p *printer) until(o opRow) string {
	switch {
	case o.State != engine.OpInProgress || o.Deadline.IsZero():
		return "-"
	case o.Deadline.After(p.now):
		return "in " + duration.HumanDuration(o.Deadline.Sub(p.now))
	}
	return duration.HumanDuration(p.now.Sub(o.Deadline)) + " ago"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate cuts s to n runes, the last an ellipsis, and puts it on one
// line (a description may hold a backend's multi-line error).
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// errEnough ends a listing whose --limit is reached.
var errEnough = errors.New("enough rows")

// eachRecord calls fn with each record opts selects, in order, reading the
// store a page at a time, until the records run out or fn returns an error.
func eachRecord(ctx context.Context, s engine.Store, opts engine.ListOptions, fn func(*engine.Record) error) error {
	opts.Limit = listPageSize
	for {
		page, err := s.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(page) < listPageSize {
			return nil
		}
		opts.After = engine.KeyOf(page[len(page)-1])
	}
}

// run lists the records of kind (both kinds, instances first, for
// operations) that pass the filters, reading the store a page at a time.
func (l *listing) run(cmd *cobra.Command, kinds []engine.Kind) error {
	if err := l.check(); err != nil {
		return err
	}
	storeFromEnv(cmd, &l.store)
	ctx := cmd.Context()
	s, err := broker.OpenStoreReadOnly(ctx, l.store, l.dataDir)
	if err != nil {
		return err
	}
	defer closeQuietly(cmd, s.Close)
	now := time.Now()
	keep := l.filter()
	p := newPrinter(cmd.OutOrStdout(), l, kinds[0], now)
	var last engine.RecordKey
	for _, kind := range kinds {
		opts := engine.ListOptions{Kind: kind, InstanceID: l.instance,
			// Only the in-progress operations, through the store's index
			// of them, where nothing else can be listed.
			Unfinished: l.stuck || (l.ops && (len(l.states) == 0 || slices.Equal(l.states, []string{"in-progress"})))}
		if l.after != "" {
			opts.After = engine.RecordKey{Kind: kind, ID: l.after}
		}
		err = eachRecord(ctx, s, opts, func(r *engine.Record) error {
			if !keep(r, now) {
				return nil
			}
			if l.limit > 0 && p.n == l.limit {
				return errEnough
			}
			last = engine.KeyOf(r)
			return p.print(rowOf(r, now, l.stuckAfter))
		})
		if err != nil {
			break
		}
	}
	more := errors.Is(err, errEnough)
	if err != nil && !more {
		return err
	}
	if err := p.close("No " + l.what(kinds) + " match."); err != nil {
		return err
	}
	switch {
	case more && l.ops:
		fmt.Fprintf(cmd.ErrOrStderr(), "More operations match: narrow the filters, or raise --limit\n")
	case more:
		fmt.Fprintf(cmd.ErrOrStderr(), "More %s match: list them with --after %s\n", l.what(kinds), last.ID)
	}
	return nil
}

func (l *listing) what(kinds []engine.Kind) string {
	switch {
	case l.ops:
		return "operations"
	case kinds[0] == engine.KindBinding:
		return "bindings"
	}
	return "instances"
}

func newInstancesCommand() *cobra.Command {
	var l listing
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "List the service instances the store holds",
		Long: `List the service instances the store holds, in id order: the backend
(bucket, or the upstream's name), the plan id, the phase, the latest
operation and its description, and the age. -o wide adds the service id,
the bucket, when the operation started, the last write, the lease (the
replica that drives the operation, and until when), the record's version
and why the operation is stuck, if it is. -o json prints the same fields
as one JSON list. No secret is printed: records keep a binding's secret
sealed, and the listings leave out parameters and context.

The store is opened read-only (nothing is created or migrated, and its
connections refuse writes), so this is safe beside a running serve, on
SQLite and PostgreSQL. It is read a page at a time; the table is aligned
once all its rows are in, -o json is written as they come. Deprovisioned instances (phase deleted) are listed only with
--state deleted.

` + stuckHelp,
		Example: `  bucketbroker admin instances --data-dir ./data
  BUCKETBROKER_STORE='postgres://bucketbroker@db.internal/bucketbroker' bucketbroker admin instances -o wide

  # Failed provisions of one plan in the last day, as JSON
  bucketbroker admin instances --state failed --plan 6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11 --newer-than 24h -o json

  # Instances of the upstream "postgres" whose operation is stuck
  bucketbroker admin instances --stuck --backend postgres

  # 100 at a time: standard error names the --after of the next 100
  bucketbroker admin instances --limit 100
  bucketbroker admin instances --limit 100 --after 3f0c2a9e-5b1d-4c7e-9f0a-1b2c3d4e5f60`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return l.run(cmd, []engine.Kind{engine.KindInstance})
		},
	}
	l.bind(cmd, "instance")
	return cmd
}

func newBindingsCommand() *cobra.Command {
	var l listing
	cmd := &cobra.Command{
		Use:   "bindings",
		Short: "List the service bindings the store holds",
		Long: `List the service bindings the store holds, in id order, with their
instance: the columns, filters and output of 'admin instances' (the
RESOURCE of -o wide is the binding's user), and --instance for the bindings
of one instance. A binding's credentials are never printed: the record
keeps its secret sealed, and the listing leaves it out.

` + stuckHelp,
		Example: `  bucketbroker admin bindings --data-dir ./data
  bucketbroker admin bindings --instance 3f0c2a9e-5b1d-4c7e-9f0a-1b2c3d4e5f60 -o wide
  bucketbroker admin bindings --state failed -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return l.run(cmd, []engine.Kind{engine.KindBinding})
		},
	}
	l.bind(cmd, "binding")
	cmd.Flags().StringVar(&l.instance, "instance", "", "list only the bindings of this instance id")
	return cmd
}

func newOperationsCommand() *cobra.Command {
	l := listing{ops: true}
	cmd := &cobra.Command{
		Use:   "operations",
		Short: "List the operations in progress (or ended), of instances and bindings",
		Long: `List the latest operation of each instance and binding, instances first,
then bindings, each in id order: its type and state, how long ago it
started, its deadline, and its description (what it does, or retries and
why). By default only operations in progress, read through the store's
index of them; --state lists ended ones too. --older-than and --newer-than
count from the operation's start. Earlier operations of one record:
'admin show ID'.

` + stuckHelp,
		Example: `  bucketbroker admin operations --data-dir ./data
  bucketbroker admin operations --stuck -o wide
  bucketbroker admin operations --state failed --newer-than 1h -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return l.run(cmd, []engine.Kind{engine.KindInstance, engine.KindBinding})
		},
	}
	l.bind(cmd, "record")
	return cmd
}
