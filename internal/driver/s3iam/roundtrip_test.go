package s3iam

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// gate is an HTTP transport that notes each request's action and holds
// the requests of one action until a request of another has been sent:
// a driver that sends the two at once gets through, one that waits for
// the first's answer before it sends the second is held until the guard
// (10 s) lets it go, and held says so. No time is measured.
type gate struct {
	hold, until string
	mu          sync.Mutex
	actions     []string
	arrived     chan struct{}
	once        sync.Once
	held        bool
	// untagged strips the tags from CreateUser's answers.
	untagged bool
	// createTags notes, for each CreateBucket, whether it carried tags.
	createTags []bool
	// refuseCreateTags answers a CreateBucket that carries tags 400
	// MalformedXML without sending it on, as a server that does not know
	// the element may; dropCreateTags, when set, is called with the
	// bucket's name after such a create succeeded, to take its tags away
	// as a server that ignores the element would never have written them.
	refuseCreateTags bool
	dropCreateTags   func(bucket string)
}

func newGate(hold, until string) *gate {
	return &gate{hold: hold, until: until, arrived: make(chan struct{})}
}

// newDriverThrough is a driver of the test server whose requests go
// through rt.
func newDriverThrough(t *testing.T, rt http.RoundTripper) *Driver {
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: rt}
	return newDriver(t, cfg)
}

// removeFromBody takes what re matches out of resp's body.
func removeFromBody(resp *http.Response, re *regexp.Regexp) (*http.Response, error) {
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	b = re.ReplaceAll(b, nil)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	if requestAction(r) == "CreateBucket" {
		tagged, err := g.noteCreate(r)
		if err != nil {
			return nil, err
		}
		if tagged && g.refuseCreateTags {
			g.mu.Lock()
			g.actions = append(g.actions, "CreateBucket")
			g.mu.Unlock()
			return malformedXML(r), nil
		}
		resp, _, err := g.send(r)
		if err == nil && tagged && resp.StatusCode == http.StatusOK && g.dropCreateTags != nil {
			g.dropCreateTags(strings.TrimPrefix(r.URL.Path, "/"))
		}
		return resp, err
	}
	resp, a, err := g.send(r)
	if err == nil && a == "CreateUser" && g.untagged {
		// A server that ignores CreateUser's tags answers without them.
		return removeFromBody(resp, tagsElement)
	}
	return resp, err
}

// noteCreate notes whether a CreateBucket carries tags, leaving its body
// to be sent.
func (g *gate) noteCreate(r *http.Request) (bool, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return false, err
		}
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	tagged := bytes.Contains(body, []byte("<Tags>"))
	g.mu.Lock()
	g.createTags = append(g.createTags, tagged)
	g.mu.Unlock()
	return tagged, nil
}

// malformedXML is the answer of a server that refuses r's body.
func malformedXML(r *http.Request) *http.Response {
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>MalformedXML</Code><Message>The XML you provided was not well-formed.</Message></Error>`
	return &http.Response{
		StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}
}

// creates returns what noteCreate noted, and forgets it with the actions.
func (g *gate) creates() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.createTags
	g.createTags, g.actions = nil, nil
	return c
}

// tagsElement is the Tags element of an IAM answer.
var tagsElement = regexp.MustCompile(`(?s)<Tags>.*?</Tags>`)

func (g *gate) send(r *http.Request) (*http.Response, string, error) {
	a := requestAction(r)
	g.mu.Lock()
	g.actions = append(g.actions, a)
	g.mu.Unlock()
	if a == g.until {
		g.once.Do(func() { close(g.arrived) })
	}
	if a == g.hold {
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second):
			g.mu.Lock()
			g.held = true
			g.mu.Unlock()
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	return resp, a, err
}

func (g *gate) seen() (actions []string, held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.actions), g.held
}

// requestAction names an IAM request by its Action and an S3 request by
// its method and subresource.
func requestAction(r *http.Request) string {
	if a := iamAction(r); a != "" {
		return a
	}
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPut && q.Has("tagging"):
		return "PutBucketTagging"
	case r.Method == http.MethodPut && q.Has("versioning"):
		return "PutBucketVersioning"
	case r.Method == http.MethodPut && len(q) == 0:
		return "CreateBucket"
	case r.Method == http.MethodGet && q.Has("tagging"):
		return "GetBucketTagging"
	}
	return r.Method + " " + r.URL.RawQuery
}

// TestKeptKeyLooksAndListsAtOnce: a credential whose recorded key is kept
// (the engine's second call of a bind, KeepOnlyKey) is a user that exists,
// so the driver looks at it, lists its keys and reads its policy at once,
// and writes nothing when all is as it should be: three requests in one
// round trip, where creating first took four in four (a CreateUser
// refused, GetUser, the policy's write, the listing). A policy that
// differs is written.
func TestKeptKeyLooksAndListsAtOnce(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, serverConfig())
	spec := driver.CredentialSpec{
		UserName: "bbtest-kept-" + randomHex(4), Owner: driver.OwnerMark("binding", randomHex(4)),
		Bucket: "bbtest-kept", Access: driver.AccessReadWrite,
	}
	t.Cleanup(func() { _ = d.RevokeCredential(ctx, spec.UserName, spec.Owner) })
	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	g := newGate("GetUser", "ListAccessKeys")
	gated := newDriverThrough(t, g)
	spec.Keys, spec.KeyID = driver.KeepOnlyKey, cred.AccessKeyID
	got, err := gated.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(KeepOnlyKey): %v", err)
	}
	if got.AccessKeyID != cred.AccessKeyID || got.SecretAccessKey != "" {
		t.Errorf("EnsureCredential(KeepOnlyKey) = key %q (secret set %v), want the kept %q without a secret",
			got.AccessKeyID, got.SecretAccessKey != "", cred.AccessKeyID)
	}
	actions, held := g.seen()
	if held {
		t.Errorf("GetUser was sent alone (requests %v): want it beside ListAccessKeys", actions)
	}
	slices.Sort(actions)
	if want := []string{"GetUser", "GetUserPolicy", "ListAccessKeys"}; !slices.Equal(actions, want) {
		t.Errorf("requests %v, want %v: a user whose key the caller recorded is looked at, not created, and its current policy not written again", actions, want)
	}

	// Another access: the policy read differs, and is written.
	spec.Access = driver.AccessReadOnly
	if _, err := d.EnsureCredential(ctx, spec); err != nil {
		t.Fatalf("EnsureCredential(KeepOnlyKey, read-only): %v", err)
	}
	out, err := d.iam.GetUserPolicy(ctx, &iam.GetUserPolicyInput{UserName: &spec.UserName, PolicyName: aws.String(PolicyName)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := policyDocument(d.partition, spec.Bucket, driver.AccessReadOnly)
	if !samePolicy(aws.ToString(out.PolicyDocument), want) {
		t.Errorf("after a change of access the policy is %s, want %s", aws.ToString(out.PolicyDocument), want)
	}

	// A named key whose user is gone: the look finds nothing, and the
	// user is created as for a new credential (the key is gone with it)
	// when the keys are replaced.
	if err := d.RevokeCredential(ctx, spec.UserName, spec.Owner); err != nil {
		t.Fatal(err)
	}
	spec.Keys = driver.ReplaceKeys
	got, err = d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(ReplaceKeys, KeyID) for a user that is gone: %v", err)
	}
	if got.AccessKeyID == "" || got.AccessKeyID == cred.AccessKeyID || got.SecretAccessKey == "" {
		t.Errorf("EnsureCredential(ReplaceKeys, KeyID) for a user that is gone = key %q (secret set %v), want a new key with its secret",
			got.AccessKeyID, got.SecretAccessKey != "")
	}
}

func TestSamePolicy(t *testing.T) {
	want := `{"Version":"2012-10-17","Statement":[{"Sid":"Bucket","Effect":"Allow","Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::b"]}]}`
	for name, tc := range map[string]struct {
		reason string
		got    string
		same   bool
	}{
		"plain":     {"a server may return the document as it was put", want, true},
		"encoded":   {"IAM returns it URL-encoded", url.PathEscape(want), true},
		"reordered": {"the same JSON value in another layout", `{ "Statement":[{"Resource":["arn:aws:s3:::b"],"Action":["s3:ListBucket"],"Effect":"Allow","Sid":"Bucket"}],"Version":"2012-10-17"}`, true},
		"other":     {"another bucket is another policy", strings.ReplaceAll(want, ":::b", ":::c"), false},
		"empty":     {"no policy read", "", false},
		"garbage":   {"what cannot be decoded is written again", "%zz", false},
	} {
		if got := samePolicy(tc.got, want); got != tc.same {
			t.Errorf("%s: samePolicy = %v, want %v: %s", name, got, tc.same, tc.reason)
		}
	}
}

// TestNewUserMarkedBesideKey: on a server whose CreateUser answer shows no
// tags (it ignored them), the new user's mark is written beside its policy
// and key (newUserCredential): CreateUser, then three requests in one
// round trip, where the mark was a round trip of its own.
func TestNewUserMarkedBesideKey(t *testing.T) {
	ctx := context.Background()
	g := newGate("TagUser", "CreateAccessKey")
	g.untagged = true
	d := newDriverThrough(t, g)
	spec := driver.CredentialSpec{
		UserName: "bbtest-untagged-" + randomHex(4), Owner: driver.OwnerMark("binding", randomHex(4)),
		Bucket: "bbtest-untagged", Access: driver.AccessReadWrite,
	}
	t.Cleanup(func() { _ = d.RevokeCredential(ctx, spec.UserName, spec.Owner) })
	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if cred.AccessKeyID == "" || cred.SecretAccessKey == "" {
		t.Errorf("EnsureCredential = key %q (secret set %v), want a new key with its secret", cred.AccessKeyID, cred.SecretAccessKey != "")
	}
	actions, held := g.seen()
	if held {
		t.Errorf("TagUser was sent alone (requests %v): want it beside CreateAccessKey", actions)
	}
	if len(actions) > 1 {
		slices.Sort(actions[1:])
	}
	if want := []string{"CreateUser", "CreateAccessKey", "PutUserPolicy", "TagUser"}; !slices.Equal(actions, want) {
		t.Errorf("requests %v, want %v (the last three in any order)", actions, want)
	}
	u, err := d.observeUser(ctx, spec.UserName)
	if err != nil {
		t.Fatal(err)
	}
	if u.owner != spec.Owner {
		t.Errorf("user's owner mark %q, want %q", u.owner, spec.Owner)
	}
}

// TestNewVersionedBucketTagsAndVersionsAtOnce: a bucket the call created,
// on a server that drops the tags sent in CreateBucket, gets its mark and
// its versioning at once (markCreated): three requests in two round trips.
func TestNewVersionedBucketTagsAndVersionsAtOnce(t *testing.T) {
	ctx := context.Background()
	g := newGate("PutBucketTagging", "PutBucketVersioning")
	d := newDriverThrough(t, g)
	d.bucketMarks.saw(false) // a server that drops CreateBucket's tags
	name := driver.BucketName("bbtest", "vtagged", randomHex(8))
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: "o", Versioning: true}); err != nil {
		t.Fatalf("EnsureBucket(Versioning): %v", err)
	}
	t.Cleanup(func() { _ = d.DeleteBucket(context.Background(), name, "o", true) })
	actions, held := g.seen()
	if held {
		t.Errorf("PutBucketTagging was sent alone (requests %v): want it beside PutBucketVersioning", actions)
	}
	if len(actions) > 1 {
		slices.Sort(actions[1:])
	}
	if want := []string{"CreateBucket", "PutBucketTagging", "PutBucketVersioning"}; !slices.Equal(actions, want) {
		t.Errorf("requests %v, want %v (the last two in any order)", actions, want)
	}
	b, err := d.observeBucket(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if b.owner() != "o" {
		t.Errorf("bucket's owner mark %q, want %q", b.owner(), "o")
	}
	if err := d.ensureVersioning(ctx, name); err != nil {
		t.Fatal(err)
	}
}
