package engine_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
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
)

// TestBindAdoptsItsUnmarkedUserAfterCrash is the crash userAttempted is
// for. On a server whose CreateUser ignores tags (SeaweedFS) the driver
// marks a new user with a second call, TagUser; replica a dies between the
// two, leaving a user of the binding's name without a mark. The user is
// made here with the root keys, as SeaweedFS's CreateUser leaves it; the
// embedded server itself keeps CreateUser's tags. Replica b, on the same
// store, finishes the work: the record says the attempt was made after the
// name was seen free, so the user is adopted, and the bind ends with one
// user holding one key that works.
func TestBindAdoptsItsUnmarkedUserAfterCrash(t *testing.T) {
	tests := map[string]struct {
		reason string
		async  bool
		// unbindFirst: the platform's orphan-mitigation DELETE comes
		// before the takeover, and the same bind is sent again after it.
		unbindFirst bool
	}{
		"Sync": {
			reason: "a sync bind records userAttempted with its intent; the takeover adopts the user, and the request that started the bind answers the same key",
		},
		"Async": {
			reason: "an async bind's worker looks, then records userAttempted, before its first attempt; the takeover adopts the user",
			async:  true,
		},
		"UnbindThenBindAgain": {
			reason:      "the unbind marks the unmarked user, deletes it and clears userAttempted; a bind of the same id looks again and makes a new user",
			async:       true,
			unbindFirst: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			const ttl = 600 * time.Millisecond
			a := newHarness(t, harnessOpts{replica: "a", leaseTTL: ttl})
			b := newHarness(t, harnessOpts{peer: a, replica: "b", leaseTTL: ttl})
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
				// a dies here, before TagUser: a dead process's call ends
				// by no deadline (its call timeout is the lease's half, and
				// a loaded machine can take longer than that to reach the
				// Shutdown below).
				return g.hold(context.WithoutCancel(ctx))
			})
			var first chan reply
			if tc.async {
				a.want(a.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on a")
			} else {
				first = make(chan reply, 1)
				go func() { first <- a.do("PUT", bind, bindBody(planStd, nil)) }()
			}
			g.waitEntered(t)

			rec, err := a.store.Get(ctx, engine.KindBinding, bid)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Bucket.UserAttempted {
				t.Fatalf("%s: the bind's first attempt is under way and the record has no userAttempted", tc.reason)
			}
			if owner, path := userMark(t, a.iam, user); owner != "" || path != "/" {
				t.Fatalf("the crash left user %q with owner %q and path %q, want neither", user, owner, path)
			}
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := a.eng.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown with a call held = %v, want the deadline to cut it", err)
			}

			if tc.unbindFirst {
				r := b.want(b.do("DELETE", del(bind, planStd, true), nil), http.StatusAccepted, "unbind on b")
				if s := b.waitOp(bind, r.str("operation")); s != "succeeded" {
					t.Fatalf("unbind ended %q, want succeeded", s)
				}
				if keys, ok := b.users()[user]; ok {
					t.Fatalf("after the unbind user %q exists with keys %v, want it deleted (its attempt is recorded)", user, keys)
				}
				rec, err := b.store.Get(ctx, engine.KindBinding, bid)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Phase != engine.PhaseDeleted || rec.Bucket.UserAttempted || rec.Bucket.AccessKeyID != "" || len(rec.SealedSecret) != 0 {
					t.Fatalf("after the unbind the record is %s with userAttempted %v and key %q, want deleted, false and none", rec.Phase, rec.Bucket.UserAttempted, rec.Bucket.AccessKeyID)
				}
				b.want(b.do("PUT", bind, bindBody(planStd, nil)), http.StatusCreated, "bind again on b")
			} else if s := b.waitOp(bind, rec.Op.ID); s != "succeeded" {
				t.Fatalf("%s: bind after takeover ended %q, want succeeded", tc.reason, s)
			}

			c := b.want(b.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "the same bind again on b").creds()
			ak, _ := c["access_key_id"].(string)
			sk, _ := c["secret_access_key"].(string)
			if err := canWrite(ak, sk, c["bucket"].(string)); err != nil {
				t.Errorf("%s: the credentials do not work: %v", tc.reason, err)
			}
			if diff := cmp.Diff(map[string][]string{user: {ak}}, b.users()); diff != "" {
				t.Errorf("%s: backend users (-want +got):\n%s", tc.reason, diff)
			}
			if owner, path := userMark(t, b.iam, user); owner != driver.OwnerMark("binding", bid) || path != s3iam.UserPath {
				t.Errorf("adopted user has owner %q and path %q, want %q and %q", owner, path, driver.OwnerMark("binding", bid), s3iam.UserPath)
			}
			if first != nil {
				select {
				case r := <-first:
					if r.code != http.StatusCreated || r.creds()["access_key_id"] != ak {
						t.Errorf("the sync bind sent to a answered %d %v, want 201 with key %s", r.code, r.body, ak)
					}
				case <-time.After(time.Minute):
					t.Fatal("the sync bind sent to a never answered")
				}
			}

			// Adopted, the user is the binding's like any other: unbind
			// deletes it.
			b.want(b.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind")
			if u := b.users(); len(u) != 0 {
				t.Errorf("after the unbind users = %v, want none", u)
			}
		})
	}
}

// TestBindRefusesUnmarkedUserItNeverAttempted: a user under the binding's
// name that existed before the bind's first attempt is someone else's,
// mark or none. The bind fails saying so, and nothing of that user
// changes, not through the platform's orphan-mitigation DELETE nor through
// the same bind sent again.
func TestBindRefusesUnmarkedUserItNeverAttempted(t *testing.T) {
	for _, isAsync := range []bool{false, true} {
		t.Run(map[bool]string{false: "Sync", true: "Async"}[isAsync], func(t *testing.T) {
			h := newHarness(t)
			ctx := context.Background()
			inst := h.provisioned(planStd)
			bid := newID()
			bind := inst + "/service_bindings/" + bid
			user := driver.UserName(h.prefix, "binding", bid)
			if _, err := h.iam.CreateUser(ctx, &iam.CreateUserInput{UserName: &user, Path: aws.String("/theirs/"),
				Tags: []iamtypes.Tag{{Key: aws.String("team"), Value: aws.String("theirs")}}}); err != nil {
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

			refused := func(what string) {
				t.Helper()
				var desc string
				if isAsync {
					r := h.want(h.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, what)
					if s := h.waitOp(bind, r.str("operation")); s != "failed" {
						t.Fatalf("%s ended %q, want failed", what, s)
					}
					desc = h.do("GET", bind+"/last_operation", nil).str("description")
				} else {
					r := h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusInternalServerError, what)
					desc = r.str("description")
				}
				for _, want := range []string{user, "exists and is not this binding's", "owned by someone else"} {
					if !strings.Contains(desc, want) {
						t.Errorf("%s: failure %q does not say %q", what, desc, want)
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
			// The platform's orphan mitigation, then the same bind again.
			h.want(h.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind the failed binding")
			refused("bind again")

			if n := h.drv.count("EnsureCredential"); n != 0 {
				t.Errorf("EnsureCredential was called %d times on a name taken before any attempt, want 0", n)
			}
			if diff := cmp.Diff(before, userSnapshot(t, h.iam, user)); diff != "" {
				t.Errorf("the foreign user changed (-before +after):\n%s", diff)
			}
		})
	}
}

// userMark returns a user's owner tag (empty when it has none) and path,
// as the root keys see them.
func userMark(t *testing.T, c *iam.Client, user string) (owner, path string) {
	t.Helper()
	s := userSnapshot(t, c, user)
	return s.Tags[s3iam.OwnerTagKey], s.Path
}

// userState is what the root keys see of a user.
type userState struct {
	Path     string
	Tags     map[string]string
	Policies map[string]string
	Keys     []string
}

func userSnapshot(t *testing.T, c *iam.Client, user string) userState {
	t.Helper()
	ctx := context.Background()
	u, err := c.GetUser(ctx, &iam.GetUserInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: get user %q: %v", user, err)
	}
	s := userState{Path: aws.ToString(u.User.Path), Tags: map[string]string{}, Policies: map[string]string{}}
	tags, err := c.ListUserTags(ctx, &iam.ListUserTagsInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: list tags of %q: %v", user, err)
	}
	for _, tag := range tags.Tags {
		s.Tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	pols, err := c.ListUserPolicies(ctx, &iam.ListUserPoliciesInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: list policies of %q: %v", user, err)
	}
	for _, p := range pols.PolicyNames {
		doc, err := c.GetUserPolicy(ctx, &iam.GetUserPolicyInput{UserName: &user, PolicyName: &p})
		if err != nil {
			t.Fatalf("root: get policy %q of %q: %v", p, user, err)
		}
		s.Policies[p] = aws.ToString(doc.PolicyDocument)
	}
	keys, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: list keys of %q: %v", user, err)
	}
	for _, k := range keys.AccessKeyMetadata {
		s.Keys = append(s.Keys, aws.ToString(k.AccessKeyId)+" "+string(k.Status))
	}
	slices.Sort(s.Keys)
	return s
}
