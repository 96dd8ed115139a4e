package engine_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	testharness "github.com/bucketbroker/bucketbroker/test/harness"
)

// teachMarks binds once to inst, so that the driver sees a CreateUser
// answer and learns whether the server keeps a new user's mark in it, and
// reports what it learned.
func (h *harness) teachMarks(inst string) bool {
	h.t.Helper()
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusCreated, "the first bind")
	return h.drv.AtomicUserMarks()
}

// bindOutcome sends a bind of path, synchronous or not, and returns its
// HTTP answer (sync) or its operation's end and description (async).
func (h *harness) bindOutcome(path string, isAsync bool, wantCode int, what string) (state, desc string) {
	h.t.Helper()
	if !isAsync {
		r := h.want(h.do("PUT", path, bindBody(planStd, nil)), wantCode, what)
		return "", r.str("description")
	}
	r := h.want(h.do("PUT", async(path), bindBody(planStd, nil)), http.StatusAccepted, what)
	state = h.waitOp(path, r.str("operation"))
	return state, h.do("GET", path+"/last_operation?operation="+r.str("operation"), nil).str("description")
}

// TestBindMakesNoLookWhereUserMarksAreAtomic: on a server whose CreateUser
// keeps the owner mark in the same write (the embedded server), once the
// driver has seen it do so, a bind does not look at the user name before
// its first attempt and records no attempt: CreateUser is its first
// request. Its user is the binding's all the same: the credentials work,
// and the unbind deletes the user.
func TestBindMakesNoLookWhereUserMarksAreAtomic(t *testing.T) {
	for _, isAsync := range []bool{false, true} {
		t.Run(map[bool]string{false: "Sync", true: "Async"}[isAsync], func(t *testing.T) {
			var calls testharness.Calls
			h := newHarness(t, harnessOpts{calls: &calls})
			ctx := context.Background()
			inst := h.provisioned(planStd)
			if !h.teachMarks(inst) {
				t.Fatal("the driver does not know the embedded server keeps CreateUser's tags after a bind")
			}
			bid := newID()
			bind := inst + "/service_bindings/" + bid
			user := driver.UserName(h.prefix, "binding", bid)
			looks := h.drv.count("Observe")
			calls.Take()
			if state, desc := h.bindOutcome(bind, isAsync, http.StatusCreated, "bind"); isAsync && state != "succeeded" {
				t.Fatalf("bind ended %q (%s), want succeeded", state, desc)
			}
			requests, _ := calls.Take()
			if n := h.drv.count("Observe") - looks; n != 0 {
				t.Errorf("the bind looked at the user name (%d Observe calls), want no look", n)
			}
			// CreateUser; PutUserPolicy beside CreateAccessKey (the user is
			// new: no call to make the key the only one). A look would be a
			// GetUser more, before them.
			if requests != 3 {
				t.Errorf("the bind made %d backend requests, want 3 (no GetUser before CreateUser)", requests)
			}
			rec, err := h.store.Get(ctx, engine.KindBinding, bid)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Bucket.UserAttempted {
				t.Error("the record has userAttempted set, want none recorded where marks are atomic")
			}
			c := h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "the same bind again").creds()
			ak, _ := c["access_key_id"].(string)
			sk, _ := c["secret_access_key"].(string)
			if err := canWrite(ak, sk, c["bucket"].(string)); err != nil {
				t.Errorf("the credentials do not work: %v", err)
			}
			if owner, _ := userMark(t, h.iam, user); owner != driver.OwnerMark("binding", bid) {
				t.Errorf("user %s carries owner %q, want the binding's", user, owner)
			}
			h.want(h.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind")
			if keys, ok := h.users()[user]; ok {
				t.Errorf("after the unbind user %s is left, with keys %v", user, keys)
			}
		})
	}
}

// TestBindRefusesForeignUserWhereUserMarksAreAtomic is
// TestBindRefusesUnmarkedUserItNeverAttempted where the bind does not look:
// a user under the binding's name that carries no mark (on this server no
// user of ours is ever unmarked) or another owner's fails the bind as
// someone else's, named in the failure, and nothing of it changes, not
// through the platform's orphan-mitigation DELETE nor through the same
// bind sent again.
func TestBindRefusesForeignUserWhereUserMarksAreAtomic(t *testing.T) {
	other := driver.OwnerMark("binding", "someone-else")
	for _, marked := range []bool{false, true} {
		for _, isAsync := range []bool{false, true} {
			name := map[bool]string{false: "Unmarked", true: "OtherOwner"}[marked] + "/" + map[bool]string{false: "Sync", true: "Async"}[isAsync]
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				ctx := context.Background()
				inst := h.provisioned(planStd)
				if !h.teachMarks(inst) {
					t.Fatal("the driver does not know the embedded server keeps CreateUser's tags after a bind")
				}
				bid := newID()
				bind := inst + "/service_bindings/" + bid
				user := driver.UserName(h.prefix, "binding", bid)
				tags := []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("theirs")}}
				if marked {
					tags = append(tags, iamtypes.Tag{Key: aws.String(s3iam.OwnerTagKey), Value: aws.String(other)})
				}
				if _, err := h.iam.CreateUser(ctx, &iam.CreateUserInput{UserName: &user, Path: aws.String("/theirs/"), Tags: tags}); err != nil {
					t.Fatal(err)
				}
				if _, err := h.iam.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: &user, PolicyName: aws.String("theirs"),
					PolicyDocument: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::theirs"]}]}`)}); err != nil {
					t.Fatal(err)
				}
				if _, err := h.iam.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &user}); err != nil {
					t.Fatal(err)
				}
				before := userSnapshot(t, h.iam, user)
				looks := h.drv.count("Observe")

				refused := func(what string) {
					t.Helper()
					state, desc := h.bindOutcome(bind, isAsync, http.StatusInternalServerError, what)
					if isAsync && state != "failed" {
						t.Fatalf("%s ended %q, want failed", what, state)
					}
					want := []string{user, "owned by someone else", "without an owner mark"}
					if marked {
						want[2] = other
					}
					for _, w := range want {
						if !strings.Contains(desc, w) {
							t.Errorf("%s: failure %q does not say %q", what, desc, w)
						}
					}
				}
				refused("bind")
				rec, err := h.store.Get(ctx, engine.KindBinding, bid)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Bucket.UserAttempted {
					t.Errorf("the refused binding's record has userAttempted set")
				}
				h.want(h.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind the failed binding")
				refused("bind again")

				if n := h.drv.count("Observe") - looks; n != 0 {
					t.Errorf("the binds looked at the user name (%d Observe calls), want no look", n)
				}
				if diff := cmp.Diff(before, userSnapshot(t, h.iam, user)); diff != "" {
					t.Errorf("the foreign user changed (-before +after):\n%s", diff)
				}
			})
		}
	}
}

// TestBindLooksWhereCreateUserDropsMarks: on a server whose CreateUser
// answer shows the new user without the tags it was given (it ignores
// them, and the driver marks the user in a second call), the driver never
// says marks are atomic, and a bind looks at the user name and records its
// attempt before its first create attempt, as TestBindAdoptsItsUnmarkedUserAfterCrash
// needs.
func TestBindLooksWhereCreateUserDropsMarks(t *testing.T) {
	for _, isAsync := range []bool{false, true} {
		t.Run(map[bool]string{false: "Sync", true: "Async"}[isAsync], func(t *testing.T) {
			u, err := url.Parse(gw.IAMEndpoint())
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, harnessOpts{transport: dropUserMarks{iamHost: u.Host}})
			ctx := context.Background()
			inst := h.provisioned(planStd)
			if h.teachMarks(inst) {
				t.Fatal("the driver says marks are atomic after a CreateUser answer without them")
			}
			bid := newID()
			bind := inst + "/service_bindings/" + bid
			user := driver.UserName(h.prefix, "binding", bid)
			looks := h.drv.count("Observe")
			if state, desc := h.bindOutcome(bind, isAsync, http.StatusCreated, "bind"); isAsync && state != "succeeded" {
				t.Fatalf("bind ended %q (%s), want succeeded", state, desc)
			}
			if n := h.drv.count("Observe") - looks; n != 1 {
				t.Errorf("the bind looked at the user name %d times, want once", n)
			}
			rec, err := h.store.Get(ctx, engine.KindBinding, bid)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Bucket.UserAttempted {
				t.Error("the record has no userAttempted, want the look's attempt recorded")
			}
			if owner, _ := userMark(t, h.iam, user); owner != driver.OwnerMark("binding", bid) {
				t.Errorf("user %s carries owner %q, want the binding's", user, owner)
			}
		})
	}
}

// dropUserMarks strips the tags from the IAM endpoint's CreateUser answers,
// as a server that ignores CreateUser's tags answers (the embedded server
// keeps them: the user is marked all the same).
type dropUserMarks struct{ iamHost string }

var tagsElement = regexp.MustCompile(`(?s)<Tags>.*?</Tags>`)

func (d dropUserMarks) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.URL.Host != d.iamHost {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if bytes.Contains(b, []byte("<CreateUserResult")) {
		b = tagsElement.ReplaceAll(b, nil)
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// TestRefusedBindRevokesItsUserWhereUserMarksAreAtomic: a bind the backend
// refuses for good after EnsureCredential made the user revokes that user
// (TestBackendRefusalIsTheClients' bind), also where the bind recorded no
// attempt because marks are atomic: the user carries the binding's mark.
func TestRefusedBindRevokesItsUserWhereUserMarksAreAtomic(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	if !h.teachMarks(inst) {
		t.Fatal("the driver does not know the embedded server keeps CreateUser's tags after a bind")
	}
	before := h.users()
	h.drv.hook("EnsureCredential/after", func(context.Context) error { return errRefusal })
	bind := inst + "/service_bindings/" + newID()
	h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusUnprocessableEntity, "bind refused after the user was made")
	h.drv.hook("EnsureCredential/after", nil)
	if diff := cmp.Diff(before, h.users()); diff != "" {
		t.Errorf("users after the refused bind changed (-before +after):\n%s", diff)
	}
}

// TestRecordedAttemptAdoptsWhereUserMarksAreAtomic: a record that holds
// userAttempted, written where the look was needed, still lets the bind
// adopt the unmarked user its attempt left, when the replica that takes
// the bind over knows marks are atomic (TestBindAdoptsItsUnmarkedUserAfterCrash
// with replica b taught before it starts).
func TestRecordedAttemptAdoptsWhereUserMarksAreAtomic(t *testing.T) {
	const ttl = 600 * time.Millisecond
	a := newHarness(t, harnessOpts{replica: "a", leaseTTL: ttl})
	b := newHarness(t, harnessOpts{peer: a, replica: "b", leaseTTL: ttl, noStart: true})
	ctx := context.Background()
	inst := a.provisioned(planStd)
	bid := newID()
	bind := inst + "/service_bindings/" + bid
	user := driver.UserName(a.prefix, "binding", bid)

	g := newGate()
	defer g.release()
	var once sync.Once
	a.drv.hook("EnsureCredential", func(ctx context.Context) error {
		var err error
		once.Do(func() { _, err = a.iam.CreateUser(ctx, &iam.CreateUserInput{UserName: &user}) })
		if err != nil {
			return err
		}
		return g.hold(context.WithoutCancel(ctx)) // a dies here, before TagUser
	})
	a.want(a.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on a")
	g.waitEntered(t)
	rec, err := a.store.Get(ctx, engine.KindBinding, bid)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Bucket.UserAttempted {
		t.Fatal("the bind's first attempt is under way on a, which had to look, and the record has no userAttempted")
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.eng.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a call held = %v, want the deadline to cut it", err)
	}

	// b learns that the server keeps CreateUser's tags, then starts.
	tid := newID()
	tuser, towner := driver.UserName(b.prefix, "binding", tid), driver.OwnerMark("binding", tid)
	if _, err := b.drv.EnsureCredential(ctx, driver.CredentialSpec{UserName: tuser, Owner: towner, Bucket: "any", Access: driver.AccessReadOnly}); err != nil {
		t.Fatal(err)
	}
	if err := b.drv.RevokeCredential(ctx, tuser, towner); err != nil {
		t.Fatal(err)
	}
	if !b.drv.AtomicUserMarks() {
		t.Fatal("b's driver does not know the embedded server keeps CreateUser's tags")
	}
	if err := b.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.waitOp(bind, rec.Op.ID); s != "succeeded" {
		t.Fatalf("bind after takeover ended %q, want succeeded (the recorded attempt adopts the unmarked user)", s)
	}
	c := b.want(b.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "the same bind again on b").creds()
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	if err := canWrite(ak, sk, c["bucket"].(string)); err != nil {
		t.Errorf("the credentials do not work: %v", err)
	}
	if diff := cmp.Diff(map[string][]string{user: {ak}}, b.users()); diff != "" {
		t.Errorf("backend users (-want +got):\n%s", diff)
	}
	if owner, _ := userMark(t, b.iam, user); owner != driver.OwnerMark("binding", bid) {
		t.Errorf("adopted user has owner %q, want the binding's", owner)
	}
	b.want(b.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind")
	if u := b.users(); len(u) != 0 {
		t.Errorf("after the unbind users = %v, want none", u)
	}
}
