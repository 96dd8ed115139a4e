package s3iam

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestInventoryPages: with pages of two, InventoryPages hands the marked
// buckets and users out in pages of at most two, buckets first, in name
// order, each judged (marks, keys) before it comes; together they are
// what Inventory answers.
func TestInventoryPages(t *testing.T) {
	oldBuckets, oldUsers := bucketPage, userPage
	bucketPage, userPage = 2, 2
	t.Cleanup(func() { bucketPage, userPage = oldBuckets, oldUsers })
	ctx := context.Background()
	d := newDriver(t, serverConfig())
	prefix := "bbtest-pages-" + randomHex(4)
	var want driver.Inventory
	for i := range 5 {
		name, owner := fmt.Sprintf("%s-%d", prefix, i), driver.OwnerMark("instance", randomHex(4))
		if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: owner}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.DeleteBucket(ctx, name, owner, false) })
		want.Buckets = append(want.Buckets, driver.OwnedBucket{Name: name, Owner: owner})
		if i%2 == 1 {
			continue
		}
		user := driver.OwnerMark("binding", randomHex(4))
		cred, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: name, Owner: user, Bucket: name, Access: driver.AccessReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.RevokeCredential(ctx, name, user) })
		want.Users = append(want.Users, driver.OwnedUser{Name: name, Owner: user, KeyIDs: []string{cred.AccessKeyID}})
	}

	var got driver.Inventory
	var sizes [][2]int
	err := d.InventoryPages(ctx, prefix, func(p driver.Inventory) error {
		sizes = append(sizes, [2]int{len(p.Buckets), len(p.Users)})
		got.Buckets = append(got.Buckets, p.Buckets...)
		got.Users = append(got.Users, p.Users...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("InventoryPages' pages together: -want +got:\n%s", diff)
	}
	// 5 buckets in pages of 2 (the server lists under the prefix), then
	// 3 users in pages of at most 2 (IAM lists every user under the
	// path: the package's other tests may have left some between ours).
	userPages := 0
	for i, s := range sizes {
		switch {
		case i < 3 && s != [2]int{[]int{2, 2, 1}[i], 0}:
			t.Errorf("page %d: %d buckets and %d users, want %d buckets", i, s[0], s[1], []int{2, 2, 1}[i])
		case i >= 3 && (s[0] != 0 || s[1] > 2):
			t.Errorf("page %d: %d buckets and %d users, want at most 2 users", i, s[0], s[1])
		}
		if i >= 3 {
			userPages++
		}
	}
	if len(sizes) < 3 || userPages < 2 {
		t.Errorf("pages (buckets, users): %v, want 3 of buckets then at least 2 of users", sizes)
	}
	whole, err := d.Inventory(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, whole); diff != "" {
		t.Errorf("Inventory: -want +got:\n%s", diff)
	}
}

// TestInventoryPagesFullPageWithoutToken: a server that cuts the bucket
// listing at max-buckets but answers no continuation token would have the
// rest missed in silence (leaks not found, records reported missing):
// InventoryPages fails instead.
func TestInventoryPagesFullPageWithoutToken(t *testing.T) {
	oldBuckets := bucketPage
	bucketPage = 2
	t.Cleanup(func() { bucketPage = oldBuckets })
	ctx := context.Background()
	d := newDriver(t, serverConfig())
	prefix := "bbtest-notoken-" + randomHex(4)
	for i := range 3 {
		name, owner := fmt.Sprintf("%s-%d", prefix, i), driver.OwnerMark("instance", randomHex(4))
		if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: owner}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.DeleteBucket(ctx, name, owner, false) })
	}
	token := regexp.MustCompile(`<ContinuationToken>[^<]*</ContinuationToken>`)
	stripped := newDriverThrough(t, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil || r.Method != http.MethodGet || r.URL.Path != "/" || !r.URL.Query().Has("max-buckets") {
			return resp, err
		}
		return removeFromBody(resp, token)
	}))
	err := stripped.InventoryPages(ctx, prefix, func(driver.Inventory) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "without a continuation token") {
		t.Fatalf("InventoryPages with the token taken away: %v, want the listing refused", err)
	}
	if err := d.InventoryPages(ctx, prefix, func(driver.Inventory) error { return nil }); err != nil {
		t.Fatalf("InventoryPages with the token: %v", err)
	}
}
