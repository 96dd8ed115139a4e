package crash

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

const (
	stormSize     = 500
	stormInFlight = 64
)

// storm sends every body to path at once, stormInFlight at a time, and
// returns the answers in the order of bodies.
func storm(b *harness.Broker, path string, bodies []any) []harness.Reply {
	out := make([]harness.Reply, len(bodies))
	var wg sync.WaitGroup
	sem := make(chan struct{}, stormInFlight)
	for i, body := range bodies {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = b.Do("PUT", path, body)
		}()
	}
	wg.Wait()
	return out
}

// withConflict returns stormSize copies of body, and with conflict one
// request with other in the middle of them; it returns the index of that
// one (-1 without).
func withConflict(body, other map[string]any, conflict bool) ([]any, int) {
	bodies := make([]any, 0, stormSize+1)
	for range stormSize {
		bodies = append(bodies, body)
	}
	if !conflict {
		return bodies, -1
	}
	i := stormSize / 2
	bodies = append(bodies[:i], append([]any{other}, bodies[i:]...)...)
	return bodies, i
}

func with(m map[string]any, k string, v any) map[string]any {
	c := maps.Clone(m)
	c[k] = v
	return c
}

// checkStorm checks the answers against the table: of the two requests
// (the identical ones, and the conflicting one if any), whichever's record
// was written first wins; the other's every answer is 409. Of the winner's
// answers, sync: exactly one 201, the rest 200 (a duplicate waits for the
// work in flight); async: at least one 202, all naming the same operation,
// the rest 200 (after it ended), never 201. It returns the winner's
// indexes and its operation (async).
func checkStorm(t *testing.T, what string, replies []harness.Reply, conflictAt int, async bool) (winners []int, op string) {
	t.Helper()
	sameWon := conflictAt < 0 || replies[conflictAt].Code == http.StatusConflict
	counts := map[int]int{}
	for i, r := range replies {
		if r.Err != nil {
			t.Fatalf("%s: request %d got no answer: %v", what, i, r.Err)
		}
		counts[r.Code]++
		if (i == conflictAt) == sameWon { // the loser's
			if r.Code != http.StatusConflict {
				t.Errorf("%s: request %d of the losing fingerprint answered %s, want 409", what, i, r)
			}
			continue
		}
		winners = append(winners, i)
		switch {
		case r.Code == http.StatusAccepted && async:
			if op == "" {
				op = r.Operation()
			}
			if r.Operation() == "" || r.Operation() != op {
				t.Errorf("%s: request %d: 202 with operation %q, another 202 had %q", what, i, r.Operation(), op)
			}
		case r.Code == http.StatusCreated && !async, r.Code == http.StatusOK:
		default:
			t.Errorf("%s: request %d answered %s", what, i, r)
		}
	}
	t.Logf("%s: %d requests, status codes %v, identical request won: %v", what, len(replies), counts, sameWon)
	if !async && counts[http.StatusCreated] != 1 {
		t.Errorf("%s: %d answers were 201, want exactly one", what, counts[http.StatusCreated])
	}
	if async && (counts[http.StatusAccepted] == 0 || counts[http.StatusCreated] != 0) {
		t.Errorf("%s: %d answers 202 and %d 201, want at least one 202 and no 201", what, counts[http.StatusAccepted], counts[http.StatusCreated])
	}
	return winners, op
}

// TestStorm sends 500 identical provisions, then 500 identical binds, at
// once; then the same with one conflicting request among them; sync and
// async. It checks every status code against the answer table, one bucket
// per instance, one key per binding, and the same credentials in every
// answer that carries them.
func TestStorm(t *testing.T) {
	b := harness.New(t, binary)
	b.Start()
	instances, bindings := 0, map[string]map[string]any{}
	for _, async := range []bool{false, true} {
		for _, conflict := range []bool{false, true} {
			name := fmt.Sprintf("%s/conflict=%v", map[bool]string{false: "sync", true: "async"}[async], conflict)
			t.Run(name, func(t *testing.T) {
				q := ""
				if async {
					q = "?accepts_incomplete=true"
				}
				id := fmt.Sprintf("/v2/service_instances/storm-%v-%v", async, conflict)
				start := time.Now()
				body := harness.ProvisionBody
				bodies, at := withConflict(body, with(body, "space_guid", "another-space"), conflict)
				replies := storm(b, id+q, bodies)
				winners, op := checkStorm(t, "provision", replies, at, async)
				if op != "" {
					if r, err := b.LastOperation(replay, id, op); err != nil || r.State() != "succeeded" {
						t.Fatalf("provision operation: %s %v", r, err)
					}
				}
				instances++
				winner := bodies[winners[0]]
				if r := b.Do("PUT", id, winner); r.Code != http.StatusOK {
					t.Fatalf("provision after the storm: %s, want 200", r)
				}

				bindPath := fmt.Sprintf("%s/service_bindings/storm-bind-%v-%v", id, async, conflict) // binding ids are global
				bbody := harness.BindBody
				bodies, at = withConflict(bbody, with(bbody, "app_guid", "another-app"), conflict)
				replies = storm(b, bindPath+q, bodies)
				winners, op = checkStorm(t, "bind", replies, at, async)
				if op != "" {
					if r, err := b.LastOperation(replay, bindPath, op); err != nil || r.State() != "succeeded" {
						t.Fatalf("bind operation: %s %v", r, err)
					}
				}
				got := b.Do("GET", bindPath, nil)
				creds := got.Creds()
				if got.Code != http.StatusOK || creds == nil {
					t.Fatalf("GET binding after the storm: %s", got)
				}
				for _, i := range winners {
					if r := replies[i]; r.Code != http.StatusAccepted && !sameCreds(creds, r.Creds()) {
						t.Errorf("bind request %d answered key %v, the binding holds %v", i, r.Creds()["access_key_id"], creds["access_key_id"])
					}
				}
				if err := b.Backend.Works(creds); err != nil {
					t.Errorf("the storm's credentials do not work: %v", err)
				}
				bindings[creds["access_key_id"].(string)] = creds
				t.Logf("provision and bind storms in %s", time.Since(start).Round(time.Millisecond))
			})
		}
	}

	names, err := b.Backend.Buckets()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != instances {
		t.Errorf("buckets %v, want %d (one per instance)", names, instances)
	}
	users, err := b.Backend.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != len(bindings) {
		t.Errorf("users %v, want %d (one per binding)", users, len(bindings))
	}
	for u, keys := range users {
		if len(keys) != 1 || bindings[keys[0]] == nil {
			t.Errorf("user %s has keys %v, want exactly the one the storm answered", u, keys)
		}
	}
	r := &run{t: t, b: b, out: converged}
	r.noneInProgress()
	if !r.ok() {
		t.Errorf("after the storms: %v", r.notes)
	}
}
