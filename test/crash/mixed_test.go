package crash

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	mixedInstances = flag.Int("mixed-instances", 100, "TestKillUnderMixedLoad: instances, each with 3 bindings")
	mixedKills     = flag.Int("mixed-kills", 10, "TestKillUnderMixedLoad: kill -9s while the load runs, every other one while a purge is underway (fewer if the load ends first)")
	mixedObjects   = flag.Int("mixed-objects", 24, "TestKillUnderMixedLoad: objects the application writes into each bucket with purge_on_delete")
	mixedSeed      = flag.Uint64("mixed-seed", 0, "TestKillUnderMixedLoad: seed of the kill plan and the order of work (0: from the clock; the test logs it)")
	mixedLenient   = flag.Bool("mixed-lenient", false, "TestKillUnderMixedLoad: log a purge stuck on what a kill inside the embedded server's DeleteObject left and no listing shows (issue 12, class 3, which the server's start-up repair fixes) instead of counting it as a failure")
)

// mixedRole is what the platform does with one instance.
type mixedRole int

const (
	// roleKeep: provisioned, bound three times, left live.
	roleKeep mixedRole = iota
	// roleKeepData: provisioned with purge_on_delete, bound, the
	// application writes objects, left live: the objects must stay, and
	// the re-sent PUT carries the parameters.
	roleKeepData
	// roleUnbind: one of the three bindings unbound, the instance left
	// live.
	roleUnbind
	// rolePurge: provisioned with purge_on_delete, bound, the application
	// writes objects (most of them under "directories": keys with /), one
	// binding unbound, then deprovisioned: the purge.
	rolePurge
	// roleDelete: one binding unbound, then deprovisioned with an empty
	// bucket and no purge.
	roleDelete
)

// mixedRoleOf spreads the roles over the instances: of every ten, one
// keeps data, two unbind, three are purged, one deprovisioned empty.
func mixedRoleOf(i int) mixedRole {
	switch i % 10 {
	case 0:
		return roleKeepData
	case 1, 4:
		return roleUnbind
	case 2, 5, 8:
		return rolePurge
	case 9:
		return roleDelete
	}
	return roleKeep
}

func (ro mixedRole) String() string {
	return [...]string{"keep", "keep-data", "unbind", "purge", "delete"}[ro]
}

// mixedInstance is the platform's script for one instance and what it got.
type mixedInstance struct {
	*chaosInstance
	role mixedRole
	// versioned: on the plan whose buckets keep every version (some
	// purged instances), so that the purge deletes versions and delete
	// markers too.
	versioned      bool
	body, bindBody map[string]any
	// objects the application wrote (with the second binding's keys).
	objects []string
	// r is the verdict of the script up to the deprovision, rDel that of
	// the deprovision (nil when there was none).
	r, rDel *run
	// excused says why a deprovision that did not converge is issue 12's
	// class 3 and not counted, under -mixed-lenient (empty: counted).
	excused string
}

func (in *mixedInstance) bucket() string {
	return driver.BucketName(chaosPrefix, string(engine.KindInstance), in.id)
}

// TestKillUnderMixedLoad is kill -9 at random moments, several of them
// while buckets holding objects are purged, under a mixed load: 100
// instances with 3 bindings each, sync and async (each role both ways),
// some kept with the application's objects, some with one binding
// unbound, some deprovisioned with purge_on_delete after the application
// wrote objects (most under key prefixes with /; on a third of them, on
// the versioned plan, second versions and delete markers too), some
// deprovisioned empty, run by 16 concurrent clients that re-send every request as a
// platform does until it has a final answer. Every other kill waits until a
// purge is underway. Once every request has its answer the test asks the
// broker what exists, re-sends every request once more, and audits the
// backend: one bucket per live instance (holding the objects written into
// it) and nothing else, one user per live binding holding exactly the
// answered key, which writes into its bucket and is refused by another
// instance's, no key of a deleted binding that still authenticates, no
// operation in progress, and a clean `admin audit`.
//
// A purge that does not converge fails the test, with what the bucket's
// folders hold and whether its listings show any of it. A purge stuck on
// what a kill inside the embedded server's DeleteObject leaves and no
// listing shows (empty directories, a version whose object is gone:
// issue 12, class 3, which the server's start-up repair fixes) can be set
// apart with -mixed-lenient, to look past it for something else.
//
// It runs twice: on SQLite, and on PostgreSQL (BUCKETBROKER_TEST_POSTGRES_DSN,
// set by hack/with-test-servers.sh; skipped without it, except under
// CI=true), one broker process each time.
func TestKillUnderMixedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 under a mixed load takes a minute or more")
	}
	seed := *mixedSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -mixed-seed %d; the moments of the kills also depend on timing)", seed, seed)
	t.Run("sqlite", func(t *testing.T) { mixedLoad(t, seed, "") })
	t.Run("postgres", func(t *testing.T) { mixedLoad(t, seed, harness.PostgresSchema(t)) })
}

// mixedLoad is one run of TestKillUnderMixedLoad on the store (a
// PostgreSQL DSN, or "": SQLite in the data dir).
func mixedLoad(t *testing.T, seed uint64, store string) {
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	tag := fmt.Sprintf("%04x", rng.IntN(1<<16))

	// The script.
	var (
		insts   []*mixedInstance
		work    []func()
		purging atomic.Int64 // purges underway: DELETEs of rolePurge instances sent and not answered finally
	)
	b := harness.New(t, binary)
	if store != "" {
		b.Env = append(b.Env, "BUCKETBROKER_STORE="+store)
	}
	for i := range *mixedInstances {
		role := mixedRoleOf(i)
		in := &mixedInstance{
			chaosInstance: &chaosInstance{id: fmt.Sprintf("mixed-%s-%03d", tag, i), async: (i+i/10)%2 == 1,
				deprovision: role == rolePurge || role == roleDelete},
			role:      role,
			versioned: i%10 == 8,
			body:      harness.ProvisionBody,
			bindBody:  harness.BindBody,
			r:         &run{t: t, b: b, out: converged},
		}
		if role == roleKeepData || role == rolePurge {
			in.body = maps.Clone(harness.ProvisionBody)
			in.body["parameters"] = map[string]any{"purge_on_delete": true}
		}
		if in.versioned {
			in.body["plan_id"] = harness.PlanVersioned
			in.bindBody = maps.Clone(harness.BindBody)
			in.bindBody["plan_id"] = harness.PlanVersioned
		}
		for j := range chaosBindingsPer {
			in.bindings = append(in.bindings, &chaosBinding{inst: in.chaosInstance, id: fmt.Sprintf("%s-b%d", in.id, j),
				unbind: j == 0 && role != roleKeep && role != roleKeepData})
		}
		insts = append(insts, in)
		work = append(work, func() { mixedScript(in, &purging) })
	}
	rng.Shuffle(len(work), func(i, j int) { work[i], work[j] = work[j], work[i] })

	b.Start()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	start := time.Now()
	for range chaosClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int(next.Add(1)) - 1; n < len(work); n = int(next.Add(1)) - 1 {
				work[n]()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()

	// The killer: at random points of the script, every other kill once
	// a purge is underway, each after a random delay.
	type kill struct {
		midPurge bool
		at       time.Duration
	}
	var (
		plan  = rng.Perm(len(work))[:min(*mixedKills, len(work))]
		kills []kill
	)
	slices.Sort(plan)
	for k, at := range plan {
		wantPurge := k%2 == 1
		if !waitFor(done, func() bool { return int(next.Load()) >= at && (!wantPurge || purging.Load() > 0) }) {
			break
		}
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		if wantPurge {
			delay /= 3 // within the purge: it takes a few hundred ms
		}
		select {
		case <-done:
		case <-time.After(delay):
			mid := purging.Load() > 0
			b.Kill()
			kills = append(kills, kill{midPurge: mid, at: time.Since(start).Round(time.Millisecond)})
			if err := b.TryStart(); err != nil {
				t.Fatalf("start after kill -9: %v", err)
			}
			continue
		}
		break
	}
	<-done
	loadTook := time.Since(start)
	var midPurge int
	var at []time.Duration
	for _, k := range kills {
		at = append(at, k.at)
		if k.midPurge {
			midPurge++
		}
	}
	objects := 0
	for _, in := range insts {
		objects += len(in.objects)
	}
	t.Logf("load: %d instances, %d bindings, %d objects written, %d clients; done in %s with %d kill -9s (%d while a purge was underway) at %v",
		len(insts), len(insts)*chaosBindingsPer, objects, chaosClients, loadTook.Round(time.Millisecond), len(kills), midPurge, at)
	if len(kills) < *mixedKills {
		t.Logf("the load ended before the %d kills asked for", *mixedKills)
	}

	// The platform's verdict, with the known class set apart.
	verdict := &run{t: t, b: b, out: converged}
	for _, in := range insts {
		verdict.merge(in.r)
		if in.rDel == nil || in.rDel.ok() {
			continue
		}
		how := map[bool]string{false: "sync", true: "async"}[in.async] + map[bool]string{false: "", true: ", versioned"}[in.versioned]
		if in.role == rolePurge && *mixedLenient {
			if why := unlistedLeftovers(b, in); why != "" {
				in.excused = why
				t.Logf("issue 12 class 3 (a deprovision stuck on what a kill inside the embedded server's DeleteObject left and no listing shows), not counted (-mixed-lenient): instance %s (%s): %s; the platform saw:\n%s",
					in.id, how, why, strings.Join(in.rDel.notes, "\n"))
				continue
			}
		}
		if in.role == rolePurge {
			class3 := unlistedLeftovers(b, in)
			if class3 != "" {
				class3 = "; issue 12 class 3: " + class3
			}
			t.Logf("deprovision of %s (%s) did not converge%s; on disk: %s", in.id, how, class3, onDisk(b, in))
		}
		verdict.merge(in.rDel)
	}
	if !verdict.ok() {
		t.Fatalf("the platform's requests: %s\n%s", verdict.out, strings.Join(firstN(verdict.notes, 30), "\n"))
	}

	mixedDecide(verdict, insts)
	mixedReplay(verdict, insts)
	mixedCheckBackend(verdict, insts)
	excused := map[string]bool{}
	for _, in := range insts {
		if in.excused != "" {
			excused[in.id] = true
		}
	}
	noneInProgressBut(verdict, store, excused)
	if verdict.ok() {
		code, out, err := b.Audit()
		if err != nil || code != 0 {
			verdict.mark(leaked, "leak audit: exit %d %v\n%s", code, err, harness.Tail(out, 3000))
		}
	}
	count := map[mixedRole]int{}
	for _, in := range insts {
		if in.rDel != nil && in.excused == "" {
			count[in.role]++
		}
	}
	t.Logf("end: %d purges and %d empty deprovisions converged, %d excused as class 3; the embedded server's start-up repairs: %s; verdict %s in %s",
		count[rolePurge], count[roleDelete], len(excused), startupRepairs(b.Log()), verdict.out, time.Since(start).Round(time.Millisecond))
	if verdict.out != converged {
		t.Errorf("%s:\n%s", verdict.out, strings.Join(firstN(verdict.notes, 50), "\n"))
	}
}

// startupRepairs counts, in the broker's log, what the embedded server
// repaired at its starts after the kills (internal/s3gateway's messages):
// how many of the kills' leftovers the run met, and of which shape.
func startupRepairs(log string) string {
	var parts []string
	for _, m := range []struct{ what, msg string }{
		{"buckets with empty directories", "Removed empty directories a killed object deletion left"},
		{"versions made current again", "Made the newest version current again"},
		{"half-created buckets", "Removed a bucket directory a killed CreateBucket left"},
		{"versions left as they were", "left as they are"},
		// How each start after a kill chose its buckets: those the
		// in-flight file named, or every one (the file not used).
		{"starts that repaired the buckets of the calls in flight", "Repaired the buckets of the calls a kill interrupted"},
		{"starts that repaired every bucket", "Repaired every bucket"},
	} {
		parts = append(parts, fmt.Sprintf("%d %s", strings.Count(log, m.msg), m.what))
	}
	return strings.Join(parts, ", ")
}

// waitFor polls cond until it holds (true) or done is closed (false).
func waitFor(done <-chan struct{}, cond func() bool) bool {
	for !cond() {
		select {
		case <-done:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return true
}

// mixedScript provisions, binds three times, writes the application's
// objects, unbinds and deprovisions, as the instance's role says; every
// request is re-sent until it has a final answer (run.put, run.del), across
// the kills.
func mixedScript(in *mixedInstance, purging *atomic.Int64) {
	r := in.r
	r.async = in.async
	if _, ok := r.put(in.path(), in.body, harness.Reply{}); !ok {
		return
	}
	for _, bd := range in.bindings {
		rep, ok := r.put(bd.path(), in.bindBody, harness.Reply{})
		if !ok {
			return
		}
		if bd.creds = rep.Creds(); bd.creds == nil {
			r.mark(lost, "bind %s answered %s without credentials", bd.id, rep)
			return
		}
	}
	if in.role == roleKeepData || in.role == rolePurge {
		creds := in.bindings[1].creds
		for n := range *mixedObjects {
			key := mixedObjectKey(n)
			if !objectOp(r, "write "+key, func() error { return r.b.Backend.Put(creds, key, key) }) {
				return
			}
			in.objects = append(in.objects, key)
		}
		// In a versioned bucket: second versions, and delete markers.
		for n := range *mixedObjects {
			key := mixedObjectKey(n)
			if !in.versioned {
				break
			}
			if n%4 == 1 && !objectOp(r, "write "+key+" again", func() error { return r.b.Backend.Put(creds, key, "v2") }) {
				return
			}
			if n%6 == 5 && !objectOp(r, "delete "+key, func() error { return r.b.Backend.Delete(creds, key) }) {
				return
			}
		}
	}
	for _, bd := range in.bindings {
		if bd.unbind && !r.del(bd.path(), harness.Reply{}) {
			return
		}
	}
	if !in.deprovision {
		return
	}
	in.rDel = &run{t: r.t, b: r.b, async: r.async, out: converged}
	if in.role == rolePurge {
		purging.Add(1)
		defer purging.Add(-1)
	}
	in.rDel.del(in.path(), harness.Reply{})
}

// mixedObjectKey names the application's n-th object: two of three under
// two levels of prefixes, which the embedded server keeps as directories.
func mixedObjectKey(n int) string {
	if n%3 == 0 {
		return fmt.Sprintf("o-%03d", n)
	}
	return fmt.Sprintf("d%d/e%d/o-%03d", n%4, n%3, n)
}

// objectOp does what the application does with an object, again while
// the server is down (killed and starting again).
func objectOp(r *run, what string, op func() error) bool {
	deadline := time.Now().Add(replay)
	for {
		err := op()
		if err == nil {
			return true
		}
		if time.Now().After(deadline) {
			r.mark(lost, "the answered credentials could not %s in %s: %v", what, replay, err)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unlistedLeftovers says whether the instance's bucket is in the state
// issue 12's class 3 names: the embedded server's listings (current
// objects, versions and delete markers) show it empty, yet its folders
// hold what a kill inside a DeleteObject left, which DeleteBucket counts
// and no purge can see: directories (empty: besides versitygw's own hidden
// ones), in the bucket's folder or in its versions' folder, or a kept
// version whose object is gone. It returns what it found, or "" when that
// is not the case.
func unlistedLeftovers(b *harness.Broker, in *mixedInstance) string {
	if objs, err := b.Backend.Objects(in.bucket()); err != nil || len(objs) > 0 {
		return ""
	}
	if vers, err := b.Backend.Versions(in.bucket()); err != nil || len(vers) > 0 {
		return ""
	}
	var left []string
	for _, part := range []string{"objects", "versions"} {
		entries, err := tree(filepath.Join(b.DataDir, "s3", part, in.bucket()))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ""
		}
		for _, e := range entries {
			left = append(left, part+"/"+e)
		}
	}
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprintf("bucket %s lists no object, version or delete marker, and its folders hold %v", in.bucket(), firstN(left, 20))
}

// onDisk describes what the embedded server keeps of the instance's
// bucket: its folder and its versions' folder.
func onDisk(b *harness.Broker, in *mixedInstance) string {
	var sb strings.Builder
	for _, part := range []string{"objects", "versions"} {
		entries, err := tree(filepath.Join(b.DataDir, "s3", part, in.bucket()))
		fmt.Fprintf(&sb, "%s: %v (%v); ", part, firstN(entries, 40), err)
	}
	return sb.String()
}

// tree lists what is under root, directories with a trailing /, but
// versitygw's own hidden folders (.sgwtmp: uploads in progress).
func tree(root string) ([]string, error) {
	var entries []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case d.IsDir() && strings.HasPrefix(d.Name(), ".") && filepath.Dir(rel) == ".":
			return filepath.SkipDir
		case d.IsDir():
			rel += "/"
		}
		entries = append(entries, rel)
		return nil
	})
	return entries, err
}

// mixedDecide checks that what exists, by the broker's GETs, is what the
// scripts decided, and sets what is live.
func mixedDecide(r *run, insts []*mixedInstance) {
	for _, in := range insts {
		in.live = !in.deprovision
		for _, bd := range in.bindings {
			bd.live = in.live && !bd.unbind
		}
		if in.excused != "" {
			continue // its deprovision never ended: neither here nor gone
		}
		switch rep := r.b.Do("GET", in.path(), nil); {
		case rep.Err != nil || rep.Code >= 500:
			r.mark(broken, "GET %s: %s", in.path(), rep)
		case (rep.Code == http.StatusOK) != in.live:
			r.mark(map[bool]outcome{true: lost, false: leaked}[in.live], "GET %s answered %s, want exists=%v", in.path(), rep, in.live)
		}
		for _, bd := range in.bindings {
			if !bd.live {
				continue
			}
			rep := r.b.Do("GET", bd.path(), nil)
			if rep.Err != nil || rep.Code != http.StatusOK || !sameCreds(bd.creds, rep.Creds()) {
				r.mark(lost, "GET %s answered %v with key %v, want 200 and the answered %v",
					bd.path(), rep.Code, rep.Creds()["access_key_id"], bd.creds["access_key_id"])
			}
		}
	}
}

// mixedReplay re-sends every request once more, as a platform that lost
// its answers would: the PUTs of what is live get 200 (a binding's with
// the answered credentials), the DELETEs of what is gone 410.
func mixedReplay(r *run, insts []*mixedInstance) {
	for _, in := range insts {
		if in.excused != "" {
			continue
		}
		if !in.live {
			if rep := r.b.Do("DELETE", in.path()+harness.DeleteQuery, nil); rep.Err != nil || rep.Code != http.StatusGone {
				r.mark(leaked, "DELETE %s of a deleted instance answered %s, want 410", in.id, rep)
			}
			continue
		}
		if rep := r.b.Do("PUT", in.path(), in.body); rep.Err != nil || rep.Code != http.StatusOK {
			r.mark(lost, "re-sent PUT %s answered %s, want 200", in.id, rep)
		}
		for _, bd := range in.bindings {
			if !bd.live {
				if rep := r.b.Do("DELETE", bd.path()+harness.DeleteQuery, nil); rep.Err != nil || rep.Code != http.StatusGone {
					r.mark(leaked, "DELETE %s of a deleted binding answered %s, want 410", bd.id, rep)
				}
				continue
			}
			rep := r.b.Do("PUT", bd.path(), in.bindBody)
			if rep.Err != nil || rep.Code != http.StatusOK || !sameCreds(bd.creds, rep.Creds()) {
				r.mark(lost, "re-sent bind %s answered %v with key %v, want 200 and the first answer's %v",
					bd.id, rep.Code, rep.Creds()["access_key_id"], bd.creds["access_key_id"])
			}
		}
	}
}

// mixedCheckBackend lists the backend with the root keys and compares it,
// by the names derived from the ids, with what is live: one bucket per
// live instance and none else (an excused instance's bucket may be there),
// the objects written into a kept bucket still there, one user per live
// binding with exactly the answered key, which writes into its own bucket
// and is refused by another live instance's, and no key of a deleted
// binding that still authenticates.
func mixedCheckBackend(r *run, insts []*mixedInstance) {
	buckets, err := r.b.Backend.Buckets()
	if err != nil {
		r.mark(broken, "%v", err)
		return
	}
	users, err := r.b.Backend.Keys()
	if err != nil {
		r.mark(broken, "%v", err)
		return
	}
	var (
		wantBuckets = map[string]*mixedInstance{}
		mayBuckets  = map[string]bool{}
		wantUsers   = map[string]*chaosBinding{}
		liveBuckets []string
		gone        []*chaosBinding
	)
	for _, in := range insts {
		switch {
		case in.live:
			wantBuckets[in.bucket()] = in
			liveBuckets = append(liveBuckets, in.bucket())
		case in.excused != "":
			mayBuckets[in.bucket()] = true
		}
		for _, bd := range in.bindings {
			switch {
			case bd.live:
				wantUsers[driver.UserName(chaosPrefix, string(engine.KindBinding), bd.id)] = bd
			case bd.creds != nil:
				gone = append(gone, bd)
			}
		}
	}
	for _, name := range buckets {
		if wantBuckets[name] == nil && !mayBuckets[name] {
			r.mark(leaked, "bucket %s: no live instance has it", name)
		}
	}
	for name, in := range wantBuckets {
		if !slices.Contains(buckets, name) {
			r.mark(lost, "instance %s: bucket %s missing", in.id, name)
		}
	}
	for name, keys := range users {
		if wantUsers[name] == nil {
			r.mark(leaked, "user %s (keys %v): no live binding has it", name, keys)
		}
	}

	var (
		sem = make(chan struct{}, 8) // S3 clients at once
		mu  sync.Mutex
		wg  sync.WaitGroup
	)
	check := func(f func() (outcome, string)) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if o, note := f(); note != "" {
				mu.Lock()
				r.mark(o, "%s", note)
				mu.Unlock()
			}
		}()
	}
	for name, in := range wantBuckets {
		if in.role != roleKeepData || !slices.Contains(buckets, name) {
			continue
		}
		check(func() (outcome, string) {
			keys, err := r.b.Backend.Objects(name)
			// A leaked key's write, made by the check of the keys below
			// (which may run first), is that check's verdict.
			keys = slices.DeleteFunc(keys, func(k string) bool { return k == harness.IntrusionKey })
			switch {
			case err != nil:
				return broken, err.Error()
			case !slices.Equal(sorted(keys), sorted(in.objects)):
				return lost, fmt.Sprintf("instance %s: bucket %s holds %d objects, the application wrote %d", in.id, name, len(keys), len(in.objects))
			}
			return converged, ""
		})
	}
	// The counts first: Works below writes and deletes an object of its
	// own in each live bucket, which a listing made meanwhile counts.
	wg.Wait()
	for i, name := range slices.Sorted(maps.Keys(wantUsers)) {
		bd := wantUsers[name]
		keys, ok := users[name]
		key, _ := bd.creds["access_key_id"].(string)
		switch {
		case !ok:
			r.mark(lost, "binding %s: user %s missing", bd.id, name)
			continue
		case len(keys) != 1:
			r.mark(map[bool]outcome{true: leaked, false: lost}[len(keys) > 1], "binding %s: user %s has keys %v, want only %s", bd.id, name, keys, key)
			continue
		case keys[0] != key:
			r.mark(lost, "binding %s: user %s has key %s, the answer gave %s", bd.id, name, keys[0], key)
			continue
		}
		own, _ := bd.creds["bucket"].(string)
		// Another live instance's bucket, a different one for each key.
		other := liveBuckets[i%len(liveBuckets)]
		if other == own {
			other = liveBuckets[(i+1)%len(liveBuckets)]
		}
		check(func() (outcome, string) {
			if err := r.b.Backend.Works(bd.creds); err != nil {
				return lost, fmt.Sprintf("binding %s: the answered credentials do not work in %s: %v", bd.id, own, err)
			}
			if other == own {
				return converged, "" // a single live instance: no other bucket to try
			}
			sk, _ := bd.creds["secret_access_key"].(string)
			switch denied, err := r.b.Backend.Denied(key, sk, other); {
			case err != nil:
				return broken, fmt.Sprintf("binding %s: write into %s: %v", bd.id, other, err)
			case !denied:
				return leaked, fmt.Sprintf("binding %s: its key %s writes into another instance's bucket %s", bd.id, key, other)
			}
			return converged, ""
		})
	}
	for _, bd := range gone {
		check(func() (outcome, string) {
			ak, _ := bd.creds["access_key_id"].(string)
			sk, _ := bd.creds["secret_access_key"].(string)
			if r.b.Backend.Authenticates(ak, sk) {
				return leaked, fmt.Sprintf("binding %s is deleted and its key %s still authenticates", bd.id, ak)
			}
			return converged, ""
		})
	}
	wg.Wait()
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// noneInProgressBut is run.noneInProgress on the store (a PostgreSQL DSN,
// or "": SQLite in the data dir), except for the operations of the
// instances in except (and their bindings).
func noneInProgressBut(r *run, store string, except map[string]bool) {
	r.b.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := broker.OpenStore(ctx, store, r.b.DataDir)
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
		if except[rec.ID] || except[rec.InstanceID] {
			r.t.Logf("not counted (an excused instance): %s %s %s still %s (%s)", rec.Kind, rec.ID, rec.Op.Type, rec.Op.State, rec.Op.Description)
			continue
		}
		r.mark(stuck, "%s %s: %s still %s (%s)", rec.Kind, rec.ID, rec.Op.Type, rec.Op.State, rec.Op.Description)
	}
}
