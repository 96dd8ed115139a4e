package crash

import (
	"cmp"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	chaosInstances = flag.Int("chaos-instances", 100, "TestKillUnderLoad: instances, each with 3 bindings")
	chaosKills     = flag.Int("chaos-kills", 8, "TestKillUnderLoad: kill -9s while the load runs (fewer if it ends first)")
	chaosSeed      = flag.Uint64("chaos-seed", 0, "TestKillUnderLoad: seed of the kill times and the order of work (0: from the clock; the test logs it)")
)

const (
	chaosBindingsPer = 3
	// chaosClients bounds the platform's concurrent requests.
	chaosClients = 16
	// chaosPrefix is serve's default --name-prefix.
	chaosPrefix = "bb"
)

// chaosInstance is the platform's script for one instance: what it asks
// for and what it got.
type chaosInstance struct {
	id    string
	async bool
	// race: a DELETE is sent at the same moment as the PUT, and no
	// binding is made; the broker's GET decides which one won.
	race bool
	// deprovision at the end (after one unbind; the rest are revoked by
	// the deprovision).
	deprovision bool
	bindings    []*chaosBinding
	live        bool // after the load: the instance exists
}

type chaosBinding struct {
	inst *chaosInstance
	id   string
	// raceUnbind: an unbind is sent at the same moment as the bind.
	raceUnbind bool
	unbind     bool
	creds      map[string]any // the first final answer's credentials
	live       bool
}

func (in *chaosInstance) path() string { return "/v2/service_instances/" + in.id }
func (bd *chaosBinding) path() string  { return bd.inst.path() + "/service_bindings/" + bd.id }

// TestKillUnderLoad is kill -9 at random moments under a bounded load of
// mixed requests: 100 instances with 3 bindings each, some sync and some
// async, some unbound and deprovisioned again, 10 more instances whose PUT
// races a DELETE and 20 bindings whose bind races an unbind, sent by 16
// concurrent clients that re-send every request as a platform does until
// it gets a final answer. Meanwhile the broker is killed with SIGKILL at
// random moments and started again. When every request has its answer,
// the test re-sends everything and checks the backend against the answers:
// one bucket per live instance and none for the others, one user per live
// binding holding exactly the key of the first answer (which works in its
// bucket), nothing of a deleted instance or binding left, no operation in
// progress, and a clean leak audit.
func TestKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 under load takes a minute or more")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos-seed %d; the moments of the kills also depend on timing)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	tag := fmt.Sprintf("%04x", rng.IntN(1<<16))

	// The script.
	var insts []*chaosInstance
	var work []func(r *run)
	for i := range *chaosInstances + *chaosInstances/10 {
		in := &chaosInstance{id: fmt.Sprintf("chaos-%s-%03d", tag, i), async: i%2 == 1}
		insts = append(insts, in)
		if i >= *chaosInstances {
			in.race = true
			work = append(work, func(r *run) { chaosRaceInstance(r, in) })
			continue
		}
		in.deprovision = i%10 == 8
		for j := range chaosBindingsPer {
			bd := &chaosBinding{inst: in, id: fmt.Sprintf("%s-b%d", in.id, j)}
			bd.unbind = in.deprovision && j == 0
			bd.raceUnbind = !in.deprovision && i%5 == 1 && j == chaosBindingsPer-1
			in.bindings = append(in.bindings, bd)
		}
		work = append(work, func(r *run) { chaosInstanceScript(r, in) })
	}
	rng.Shuffle(len(work), func(i, j int) { work[i], work[j] = work[j], work[i] })

	b := harness.New(t, binary)
	b.Start()

	// The platform: chaosClients workers, each running whole instance
	// scripts; every request is re-sent until a final answer (run.put,
	// run.del), so each worker goes on across the kills.
	var (
		mu      sync.Mutex
		verdict = &run{t: t, b: b, out: converged}
		next    atomic.Int64
		wg      sync.WaitGroup
		done    = make(chan struct{})
	)
	start := time.Now()
	for range chaosClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= len(work) {
					return
				}
				r := &run{t: t, b: b, out: converged}
				work[n](r)
				mu.Lock()
				verdict.merge(r)
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()

	// The killer: at random points of the script (so that the kills are
	// spread over the load however fast it runs), after a random delay.
	killAt := rng.Perm(len(work))[:min(*chaosKills, len(work))]
	slices.Sort(killAt)
	var kills []time.Duration
	for _, at := range killAt {
		for int(next.Load()) < at {
			select {
			case <-done:
			case <-time.After(5 * time.Millisecond):
				continue
			}
			break
		}
		select {
		case <-done:
		case <-time.After(time.Duration(rng.IntN(300)) * time.Millisecond):
			kills = append(kills, time.Since(start).Round(time.Millisecond))
			b.Kill()
			if err := b.TryStart(); err != nil {
				t.Fatalf("start after kill -9: %v", err)
			}
			continue
		}
		break
	}
	<-done
	loadTook := time.Since(start)
	t.Logf("load: %d instances (%d racing a DELETE), %d bindings, %d clients; done in %s with %d kill -9s at %v",
		len(insts), *chaosInstances/10, *chaosInstances*chaosBindingsPer, chaosClients, loadTook.Round(time.Millisecond), len(kills), kills)
	if len(kills) < *chaosKills {
		t.Logf("the load ended before the %d kills asked for", *chaosKills)
	}
	if verdict.out != converged {
		t.Fatalf("the platform's requests: %s\n%s", verdict.out, strings.Join(firstN(verdict.notes, 30), "\n"))
	}

	// What exists now, by the broker's own answers.
	chaosDecideRaces(verdict, insts)
	// Re-send everything, as a platform that lost its answers would.
	chaosReplay(verdict, insts)
	// The backend against the answers.
	chaosCheckBackend(verdict, insts)
	verdict.noneInProgress()
	if verdict.ok() {
		code, out, err := b.Audit()
		if err != nil || code != 0 {
			verdict.mark(leaked, "leak audit: exit %d %v\n%s", code, err, harness.Tail(out, 3000))
		}
	}
	var live, raceLive, raceBindLive, raceBinds int
	for _, in := range insts {
		if in.live {
			live++
			if in.race {
				raceLive++
			}
		}
		for _, bd := range in.bindings {
			if bd.raceUnbind {
				raceBinds++
				if bd.live {
					raceBindLive++
				}
			}
		}
	}
	t.Logf("end: %d of %d instances live; races: %d of %d PUT-vs-DELETE ended present, %d of %d bind-vs-unbind; verdict %s",
		live, len(insts), raceLive, len(insts)-*chaosInstances, raceBindLive, raceBinds, verdict.out)
	if verdict.out != converged {
		t.Errorf("%s:\n%s", verdict.out, strings.Join(firstN(verdict.notes, 50), "\n"))
	}
}

// merge adds another run's verdict to r's.
func (r *run) merge(o *run) {
	r.notes = append(r.notes, o.notes...)
	if severity[o.out] > severity[r.out] {
		r.out = o.out
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}

// chaosInstanceScript provisions, binds (one bind racing an unbind on some
// instances), and on some instances unbinds one binding and deprovisions.
func chaosInstanceScript(r *run, in *chaosInstance) {
	r.async = in.async
	if _, ok := r.put(in.path(), harness.ProvisionBody, harness.Reply{}); !ok {
		return
	}
	var (
		wg     sync.WaitGroup
		others []*run
	)
	defer func() {
		wg.Wait()
		for _, o := range others {
			r.merge(o)
		}
	}()
	for _, bd := range in.bindings {
		if bd.raceUnbind {
			// The bind and the unbind each go on until their final
			// answer; the broker's GET says afterwards which won.
			other := &run{t: r.t, b: r.b, async: r.async, out: converged}
			others = append(others, other)
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // land anywhere in the bind
				raceSend(other, "DELETE", bd.path(), nil)
			}()
			if rep, ok := raceSend(r, "PUT", bd.path(), harness.BindBody); ok {
				bd.creds = rep.Creds()
			}
			continue
		}
		rep, ok := r.put(bd.path(), harness.BindBody, harness.Reply{})
		if !ok {
			return
		}
		if bd.creds = rep.Creds(); bd.creds == nil {
			r.mark(lost, "bind %s answered %s without credentials", bd.id, rep)
		}
	}
	wg.Wait()
	if !in.deprovision {
		return
	}
	for _, bd := range in.bindings {
		if bd.unbind && !r.del(bd.path(), harness.Reply{}) {
			return
		}
	}
	r.del(in.path(), harness.Reply{})
}

// chaosRaceInstance sends an instance's PUT and DELETE at the same moment.
func chaosRaceInstance(r *run, in *chaosInstance) {
	r.async = in.async
	other := &run{t: r.t, b: r.b, async: r.async, out: converged}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // land anywhere in the provision
		raceSend(other, "DELETE", in.path(), nil)
	}()
	raceSend(r, "PUT", in.path(), harness.ProvisionBody)
	wg.Wait()
	r.merge(other)
}

// raceSend re-sends one side of a race until it has a final answer: a PUT
// until 200 or 201, a DELETE until 200 or 410, and an accepted operation
// until its last_operation is no longer in progress, whatever its end (the
// other side may have halted it: "failed", or 410 when it is gone). A
// request the other side turned down as a conflict (4xx other than 422) is
// a final answer too. It says whether the answer was a success, and the
// answer.
func raceSend(r *run, method, path string, body any) (harness.Reply, bool) {
	q := ""
	if method == "DELETE" {
		q = harness.DeleteQuery
	}
	deadline := time.Now().Add(replay)
	for {
		rep := r.b.Do(method, path+r.query(q), body)
		switch {
		case rep.Err != nil || rep.Code >= 500 || rep.Code == http.StatusUnprocessableEntity:
			// no answer, or busy: send again
		case rep.Code == http.StatusAccepted:
			end, err := r.b.LastOperation(replay, path, rep.Operation())
			if err != nil {
				r.mark(stuck, "%v", err)
				return end, false
			}
			if end.State() != "succeeded" || method == "DELETE" {
				return end, false
			}
			// A provision or bind succeeded: the next PUT answers 200
			// from the record, with the credentials.
		case method == "PUT" && (rep.Code == http.StatusOK || rep.Code == http.StatusCreated),
			method == "DELETE" && (rep.Code == http.StatusOK || rep.Code == http.StatusGone):
			return rep, true
		default:
			return rep, false
		}
		if time.Now().After(deadline) {
			r.mark(stuck, "%s %s: no final answer in %s", method, path, replay)
			return harness.Reply{}, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chaosDecideRaces sets what is live: by the script where it is decided,
// and by the broker's GET where a race decided it.
func chaosDecideRaces(r *run, insts []*chaosInstance) {
	get := func(path string) bool {
		rep := r.b.Do("GET", path, nil)
		switch {
		case rep.Err != nil || rep.Code >= 500:
			r.mark(broken, "GET %s: %s", path, rep)
		case rep.Code == http.StatusOK:
			return true
		}
		return false
	}
	for _, in := range insts {
		in.live = !in.deprovision
		if in.race {
			in.live = get(in.path())
		} else if got := get(in.path()); got != in.live {
			r.mark(map[bool]outcome{true: leaked, false: lost}[got], "GET %s: exists=%v, want %v", in.path(), got, in.live)
		}
		for _, bd := range in.bindings {
			bd.live = in.live && !bd.unbind
			if bd.raceUnbind {
				bd.live = get(bd.path())
				if bd.live {
					// The bind won: its credentials are those of the
					// last answer, which the GET must give too.
					rep := r.b.Do("GET", bd.path(), nil)
					if bd.creds == nil {
						bd.creds = rep.Creds()
					} else if !sameCreds(bd.creds, rep.Creds()) {
						r.mark(lost, "GET %s: key %v, the bind answered %v", bd.path(), rep.Creds()["access_key_id"], bd.creds["access_key_id"])
					}
				}
			}
		}
	}
}

// chaosReplay re-sends every request once more: PUTs of what is live get
// 200 with the first answer's credentials, DELETEs of what is gone 410.
func chaosReplay(r *run, insts []*chaosInstance) {
	for _, in := range insts {
		if !in.live {
			if rep := r.b.Do("DELETE", in.path()+harness.DeleteQuery, nil); rep.Err != nil || rep.Code != http.StatusGone {
				r.mark(leaked, "DELETE %s of a deleted instance answered %s, want 410", in.id, rep)
			}
			continue
		}
		if rep := r.b.Do("PUT", in.path(), harness.ProvisionBody); rep.Err != nil || rep.Code != http.StatusOK {
			r.mark(lost, "re-sent PUT %s answered %s, want 200", in.id, rep)
		}
		for _, bd := range in.bindings {
			if !bd.live {
				if rep := r.b.Do("DELETE", bd.path()+harness.DeleteQuery, nil); rep.Err != nil || rep.Code != http.StatusGone {
					r.mark(leaked, "DELETE %s of a deleted binding answered %s, want 410", bd.id, rep)
				}
				continue
			}
			rep := r.b.Do("PUT", bd.path(), harness.BindBody)
			if rep.Err != nil || rep.Code != http.StatusOK || !sameCreds(bd.creds, rep.Creds()) {
				r.mark(lost, "re-sent bind %s answered %v with key %v, want 200 and the first answer's %v",
					bd.id, cmp.Or(rep.Code, -1), rep.Creds()["access_key_id"], bd.creds["access_key_id"])
			}
		}
	}
}

// chaosCheckBackend compares the backend's buckets and users, by their
// derived names, with what is live; every live binding's key must be the
// one answered, alone, and work.
func chaosCheckBackend(r *run, insts []*chaosInstance) {
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
	wantBuckets := map[string]string{}
	wantUsers := map[string]*chaosBinding{}
	for _, in := range insts {
		if in.live {
			wantBuckets[driver.BucketName(chaosPrefix, string(engine.KindInstance), in.id)] = in.id
		}
		for _, bd := range in.bindings {
			if bd.live {
				wantUsers[driver.UserName(chaosPrefix, string(engine.KindBinding), bd.id)] = bd
			}
		}
	}
	for _, name := range buckets {
		if _, ok := wantBuckets[name]; !ok {
			r.mark(leaked, "bucket %s: no live instance has it", name)
		}
	}
	for name, id := range wantBuckets {
		if !slices.Contains(buckets, name) {
			r.mark(lost, "instance %s: bucket %s missing", id, name)
		}
	}
	for name, keys := range users {
		if _, ok := wantUsers[name]; !ok {
			r.mark(leaked, "user %s (keys %v): no live binding has it", name, keys)
		}
	}
	var (
		sem = make(chan struct{}, 8) // S3 clients at once
		mu  sync.Mutex
		wg  sync.WaitGroup
	)
	for name, bd := range wantUsers {
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
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := r.b.Backend.Works(bd.creds); err != nil {
				mu.Lock()
				r.mark(lost, "binding %s: the answered credentials do not work: %v", bd.id, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
