package crash

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// outcome is one cell of the table.
type outcome string

const (
	converged outcome = "converged"
	// leaked: more than one bucket or key, or something of ours left (or
	// still working) after an unbind or deprovision.
	leaked outcome = "leaked"
	// lost: a bucket or key missing, credentials that differ from the
	// first answer or do not work, an operation that failed.
	lost outcome = "lost"
	// stuck: an operation still in progress, or a re-sent request that
	// never got a final answer.
	stuck outcome = "stuck"
	// broken: the harness could not run the cell (the process did not die
	// at the point, or did not start again).
	broken outcome = "broken"
)

var severity = map[outcome]int{converged: 0, leaked: 1, lost: 2, stuck: 3, broken: 4}

// replay bounds how long a platform re-sends a request or polls an
// operation before the cell counts as stuck.
const replay = 60 * time.Second

// opsAt names the operations that pass each crash point. A point reached by
// the worker of an unbind is also reached by a deprovision, which turns its
// instance's bindings into unbinds. A driver's bucket point is reached by
// the provision that creates the bucket (an update finds it and never
// creates one).
func opsAt(point crashpoint.Point) []string {
	op, what, _ := strings.Cut(string(point), "/")
	if op == "bucket" {
		return []string{"provision"}
	}
	ops := []string{op}
	if op == "unbind" && what != "record-written" { // record-written is the request's, not the worker's
		ops = append(ops, "deprovision")
	}
	return ops
}

type cell struct {
	point crashpoint.Point
	op    string
	async bool
}

func (c cell) String() string {
	return fmt.Sprintf("%s %s %s", c.point, c.op, map[bool]string{false: "sync", true: "async"}[c.async])
}

type result struct {
	outcome outcome
	notes   []string
	took    time.Duration
}

// TestCrashPoints kills the broker at every crash point, for every
// operation passing it, sync and async; starts it again on the same data
// dir; replays what a platform would; and checks convergence on the
// backend. It prints the table and fails on any cell that did not converge.
func TestCrashPoints(t *testing.T) {
	var (
		mu      sync.Mutex
		results = map[cell]result{}
		cells   []cell
	)
	for _, p := range crashpoint.Points {
		for _, op := range opsAt(p) {
			for _, async := range []bool{false, true} {
				cells = append(cells, cell{p, op, async})
			}
		}
	}
	start := time.Now()
	t.Run("cells", func(t *testing.T) {
		for _, c := range cells {
			t.Run(strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
				t.Parallel()
				r := runCell(t, c)
				mu.Lock()
				results[c] = r
				mu.Unlock()
				if r.outcome != converged {
					t.Errorf("%s: %s\n%s", c, r.outcome, strings.Join(r.notes, "\n"))
				}
			})
		}
	})
	t.Logf("crash points x operations, %d cells in %s:\n%s", len(cells), time.Since(start).Round(time.Second), table(cells, results))
}

func table(cells []cell, results map[cell]result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| %-28s | %-11s | %-9s | %-9s |\n", "crash point", "operation", "sync", "async")
	fmt.Fprintf(&sb, "|%s|%s|%s|%s|\n", strings.Repeat("-", 30), strings.Repeat("-", 13), strings.Repeat("-", 11), strings.Repeat("-", 11))
	for _, c := range cells {
		if c.async {
			continue
		}
		cellOf := func(async bool) string {
			r, ok := results[cell{c.point, c.op, async}]
			if !ok {
				return "not run"
			}
			return string(r.outcome)
		}
		fmt.Fprintf(&sb, "| %-28s | %-11s | %-9s | %-9s |\n", c.point, c.op, cellOf(false), cellOf(true))
	}
	return sb.String()
}

// run is one cell in progress: the broker, the platform's choices and the
// verdict so far.
type run struct {
	t     *testing.T
	b     *harness.Broker
	point crashpoint.Point
	async bool
	out   outcome
	notes []string
}

func (r *run) mark(o outcome, format string, args ...any) {
	if severity[o] > severity[r.out] {
		r.out = o
	}
	r.notes = append(r.notes, fmt.Sprintf("%s: ", o)+fmt.Sprintf(format, args...))
}

func (r *run) ok() bool { return r.out == converged }

func runCell(t *testing.T, c cell) result {
	r := &run{t: t, b: harness.New(t, binary), point: c.point, async: c.async, out: converged}
	start := time.Now()
	switch c.op {
	case "provision":
		r.provision()
	case "bind":
		r.bind()
	case "deprovision":
		r.deprovision()
	case "unbind":
		r.unbind()
	default:
		r.mark(broken, "crash point %s: no scenario for operation %q", c.point, c.op)
	}
	if r.ok() {
		r.noneInProgress()
	}
	return result{outcome: r.out, notes: r.notes, took: time.Since(start)}
}

const (
	inst = "/v2/service_instances/inst"
	bind = inst + "/service_bindings/bind"
)

func (r *run) query(base string) string {
	if r.async {
		if base == "" {
			return "?accepts_incomplete=true"
		}
		return base + "&accepts_incomplete=true"
	}
	return base
}

func (r *run) start(crashAt ...crashpoint.Point) bool {
	if err := r.b.TryStart(pointNames(crashAt)...); err != nil {
		r.mark(broken, "%v", err)
		return false
	}
	return true
}

// crash sends the request that dies at the point, waits for the death and
// starts the broker again; it returns the answer the platform got, if any.
func (r *run) crash(method, path string, body any) (harness.Reply, bool) {
	first := r.b.Do(method, path, body)
	if err := r.b.TryWaitCrash(30 * time.Second); err != nil {
		r.mark(broken, "%v (first answer %s)", err, first)
		return first, false
	}
	return first, r.start()
}

// setup provisions the instance, and binds it when withBinding, on a broker
// without crash points, then stops it; it returns the binding's credentials.
func (r *run) setup(withBinding bool) (map[string]any, bool) {
	if !r.start() {
		return nil, false
	}
	defer r.b.Stop()
	if _, err := r.b.Until(replay, "PUT", inst, harness.ProvisionBody, http.StatusCreated); err != nil {
		r.mark(broken, "setup: %v", err)
		return nil, false
	}
	if !withBinding {
		return nil, true
	}
	rep, err := r.b.Until(replay, "PUT", bind, harness.BindBody, http.StatusCreated)
	if err != nil {
		r.mark(broken, "setup: %v", err)
		return nil, false
	}
	return rep.Creds(), true
}

// poll follows an async operation as a platform does, until it ends.
func (r *run) poll(path, op string) bool {
	rep, err := r.b.LastOperation(replay, path, op)
	switch {
	case err != nil:
		r.mark(stuck, "%v", err)
		return false
	case rep.Code == http.StatusGone || rep.State() == "succeeded":
		return true
	default:
		r.mark(lost, "operation %s of %s ended %s", op, path, rep)
		return false
	}
}

// put re-sends a PUT until it gets a final answer (200 or 201), polling
// each accepted operation to its end first. first is the answer the
// platform got before the crash.
func (r *run) put(path string, body any, first harness.Reply) (harness.Reply, bool) {
	if first.Err == nil && first.Code == http.StatusAccepted && !r.poll(path, first.Operation()) {
		return first, false
	}
	deadline := time.Now().Add(replay)
	for {
		rep := r.b.Do("PUT", path+r.query(""), body)
		switch {
		case rep.Err == nil && (rep.Code == http.StatusOK || rep.Code == http.StatusCreated):
			return rep, true
		case rep.Err == nil && rep.Code == http.StatusAccepted:
			if !r.poll(path, rep.Operation()) {
				return rep, false
			}
			continue // succeeded: the next PUT answers from the record
		case rep.Err == nil && rep.Code < 500 && rep.Code != http.StatusUnprocessableEntity:
			r.mark(lost, "PUT %s answered %s", path, rep)
			return rep, false
		}
		if time.Now().After(deadline) {
			r.mark(stuck, "PUT %s: no final answer in %s, last %s", path, replay, rep)
			return rep, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// del re-sends a DELETE until the resource is gone (200, or 410), polling
// accepted operations to their end, then checks that one more DELETE is
// 410.
func (r *run) del(path string, first harness.Reply) bool {
	if first.Err == nil && first.Code == http.StatusAccepted && !r.poll(path, first.Operation()) {
		return false
	}
	deadline := time.Now().Add(replay)
	for done := false; !done; {
		rep := r.b.Do("DELETE", path+r.query(harness.DeleteQuery), nil)
		switch {
		case rep.Err == nil && (rep.Code == http.StatusOK || rep.Code == http.StatusGone):
			done = true
			continue
		case rep.Err == nil && rep.Code == http.StatusAccepted:
			if !r.poll(path, rep.Operation()) {
				return false
			}
			continue
		case rep.Err == nil && rep.Code < 500 && rep.Code != http.StatusUnprocessableEntity:
			r.mark(leaked, "DELETE %s answered %s", path, rep)
			return false
		}
		if time.Now().After(deadline) {
			r.mark(stuck, "DELETE %s: no final answer in %s, last %s", path, replay, rep)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rep := r.answered("DELETE", path+harness.DeleteQuery, nil); rep.Err != nil || rep.Code != http.StatusGone {
		r.mark(leaked, "DELETE %s after it is done answered %s, want 410", path, rep)
		return false
	}
	return true
}

// answered sends a request until it gets an answer that is not a server
// error: the broker may be down for a moment (killed and starting again).
func (r *run) answered(method, path string, body any) harness.Reply {
	deadline := time.Now().Add(replay)
	for {
		rep := r.b.Do(method, path, body)
		if (rep.Err == nil && rep.Code < 500) || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectBuckets checks how many buckets the backend holds.
func (r *run) expectBuckets(want int) {
	got, err := r.b.Backend.Buckets()
	switch {
	case err != nil:
		r.mark(broken, "%v", err)
	case len(got) > want:
		r.mark(leaked, "buckets %v, want %d", got, want)
	case len(got) < want:
		r.mark(lost, "buckets %v, want %d", got, want)
	}
}

// expectKeys checks the backend's users: none when keyID is empty, else
// exactly one holding exactly that key.
func (r *run) expectKeys(keyID string) {
	users, err := r.b.Backend.Keys()
	if err != nil {
		r.mark(broken, "%v", err)
		return
	}
	if keyID == "" {
		if len(users) > 0 {
			r.mark(leaked, "users left: %v", users)
		}
		return
	}
	switch {
	case len(users) == 0:
		r.mark(lost, "no user holds key %s", keyID)
	case len(users) > 1:
		r.mark(leaked, "users %v, want one", users)
	}
	for u, keys := range users {
		switch {
		case len(keys) > 1:
			r.mark(leaked, "user %s has keys %v, want only %s", u, keys, keyID)
		case !slices.Contains(keys, keyID):
			r.mark(lost, "user %s has keys %v, not the answered %s", u, keys, keyID)
		}
	}
}

func sameCreds(a, b map[string]any) bool {
	return a != nil && b != nil && a["access_key_id"] == b["access_key_id"] &&
		a["secret_access_key"] == b["secret_access_key"] && a["bucket"] == b["bucket"]
}

// noneInProgress stops the broker and reads its store: no operation may be
// left in progress once the platform got its final answers.
func (r *run) noneInProgress() {
	r.b.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(r.b.DataDir, "bucketbroker.db"))
	if err != nil {
		r.mark(broken, "open the store: %v", err)
		return
	}
	defer st.Close()
	open, err := st.List(ctx, engine.ListOptions{Unfinished: true})
	if err != nil {
		r.mark(broken, "list unfinished operations: %v", err)
		return
	}
	for _, rec := range open {
		r.mark(stuck, "%s %s: %s still %s (%s)", rec.Kind, rec.ID, rec.Op.Type, rec.Op.State, rec.Op.Description)
	}
}

func (r *run) provision() {
	if !r.start(r.point) {
		return
	}
	first, ok := r.crash("PUT", inst+r.query(""), harness.ProvisionBody)
	if !ok {
		return
	}
	if _, ok := r.put(inst, harness.ProvisionBody, first); !ok {
		return
	}
	if rep := r.b.Do("PUT", inst, harness.ProvisionBody); rep.Err != nil || rep.Code != http.StatusOK {
		r.mark(lost, "a duplicate provision after recovery answered %s, want 200", rep)
	}
	r.expectBuckets(1)
	r.expectKeys("")
	if r.ok() && r.del(inst, harness.Reply{}) {
		r.expectBuckets(0)
	}
}

func (r *run) bind() {
	if _, ok := r.setup(false); !ok || !r.start(r.point) {
		return
	}
	first, ok := r.crash("PUT", bind+r.query(""), harness.BindBody)
	if !ok {
		return
	}
	rep, ok := r.put(bind, harness.BindBody, first)
	if !ok {
		return
	}
	// The first successful answer: the one before the crash if the
	// process got it out, else the sync replay's, else (async) the
	// binding the platform fetches once the operation succeeded.
	var creds map[string]any
	switch {
	case first.Err == nil && first.Code == http.StatusCreated:
		creds = first.Creds()
	case !r.async:
		creds = rep.Creds()
	default:
		got := r.b.Do("GET", bind, nil)
		if got.Err != nil || got.Code != http.StatusOK {
			r.mark(lost, "GET binding after the bind succeeded: %s", got)
			return
		}
		creds = got.Creds()
	}
	for _, q := range []string{"", "?accepts_incomplete=true"} {
		again := r.b.Do("PUT", bind+q, harness.BindBody)
		if again.Err != nil || again.Code != http.StatusOK || !sameCreds(creds, again.Creds()) {
			r.mark(lost, "duplicate bind%s after recovery answered %v %v, want 200 and the first answer's key %v",
				q, again.Code, again.Creds()["access_key_id"], creds["access_key_id"])
		}
	}
	if !sameCreds(creds, rep.Creds()) {
		r.mark(lost, "replayed bind answered key %v, the first answer %v", rep.Creds()["access_key_id"], creds["access_key_id"])
	}
	key, _ := creds["access_key_id"].(string)
	r.expectKeys(key)
	if err := r.b.Backend.Works(creds); err != nil {
		r.mark(lost, "the answered credentials do not work: %v", err)
	}
	r.expectBuckets(1)
	if !r.ok() || !r.del(bind, harness.Reply{}) {
		return
	}
	r.expectKeys("")
	if err := r.b.Backend.Works(creds); err == nil {
		r.mark(leaked, "the unbound key still works")
	}
}

func (r *run) deprovision() {
	creds, ok := r.setup(true)
	if !ok || !r.start(r.point) {
		return
	}
	first, ok := r.crash("DELETE", inst+r.query(harness.DeleteQuery), nil)
	if !ok || !r.del(inst, first) {
		return
	}
	r.expectBuckets(0)
	r.expectKeys("")
	if err := r.b.Backend.Works(creds); err == nil {
		r.mark(leaked, "the binding's key still works after deprovision")
	}
	if rep := r.b.Do("GET", bind, nil); rep.Err == nil && rep.Code == http.StatusOK {
		r.mark(leaked, "GET binding after deprovision still answers 200")
	}
}

func (r *run) unbind() {
	creds, ok := r.setup(true)
	if !ok || !r.start(r.point) {
		return
	}
	first, ok := r.crash("DELETE", bind+r.query(harness.DeleteQuery), nil)
	if !ok || !r.del(bind, first) {
		return
	}
	r.expectKeys("")
	if err := r.b.Backend.Works(creds); err == nil {
		r.mark(leaked, "the unbound key still works")
	}
	r.expectBuckets(1)
	if r.ok() && r.del(inst, harness.Reply{}) {
		r.expectBuckets(0)
	}
}

// pointNames spells points as the harness arms them.
func pointNames(points []crashpoint.Point) []string {
	names := make([]string, len(points))
	for i, p := range points {
		names[i] = string(p)
	}
	return names
}
