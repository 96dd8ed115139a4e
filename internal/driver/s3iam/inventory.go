package s3iam

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// inventoryWorkers bounds the per-resource calls (tags, keys) Inventory
// makes at once: enough to list thousands of resources in seconds, few
// enough not to trip a server's request rate limits.
const inventoryWorkers = 8

// bucketPage and userPage are how many buckets and users InventoryPages
// asks the backend for at once (ListBuckets' max-buckets, ListUsers'
// MaxItems: each API's largest), and so about what one of its pages
// holds. Buckets come 10,000 at a time because a server may read all of
// them for every page (versitygw's posix backend reads its whole bucket
// directory): 100,000 buckets cost 10 such reads, not 100. Variables for
// tests.
var (
	bucketPage int32 = 10000
	userPage   int32 = 1000
)

var _ driver.PagedAuditable = (*Driver)(nil)

// Inventory implements driver.Auditable: InventoryPages' pages gathered.
func (d *Driver) Inventory(ctx context.Context, namePrefix string) (driver.Inventory, error) {
	return driver.GatherInventory(ctx, namePrefix, d.InventoryPages)
}

// InventoryPages implements driver.PagedAuditable. Buckets are listed
// with ListBuckets and judged by their tags (one GetBucketTagging each);
// users are listed under UserPath only, with their tags and keys; each
// listing's page (bucketPage, userPage, where the server pages) is judged
// and handed out before the next is asked for. A bucket the driver may not
// read (HTTP 403) is someone else's and is left out, as is a resource
// deleted while the listing runs.
func (d *Driver) InventoryPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	if err := d.bucketPages(ctx, namePrefix, page); err != nil {
		return err
	}
	return d.userPages(ctx, namePrefix, page)
}

func (d *Driver) bucketPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	in := &s3.ListBucketsInput{MaxBuckets: aws.Int32(bucketPage)}
	if namePrefix != "" {
		in.Prefix = aws.String(namePrefix) // servers that ignore it are filtered below
	}
	pages := s3.NewListBucketsPaginator(d.s3, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return mapBucketErr(err, "list buckets")
		}
		if len(out.Buckets) >= int(bucketPage) && aws.ToString(out.ContinuationToken) == "" {
			// A server that cut the listing at max-buckets but gave no
			// token to go on from: the rest would be missed in silence.
			return fmt.Errorf("list buckets: the server answered a full page of %d buckets without a continuation token; the listing cannot be completed", len(out.Buckets))
		}
		names := make([]string, 0, len(out.Buckets))
		for _, b := range out.Buckets {
			names = append(names, aws.ToString(b.Name))
		}
		err = judgePage(ctx, names, namePrefix, d.ownedBuckets,
			func(owned []driver.OwnedBucket) driver.Inventory { return driver.Inventory{Buckets: owned} }, page)
		if err != nil {
			return err
		}
	}
	return nil
}

// judgePage judges the names of one listing page that are under
// namePrefix (a server may ignore the prefix) and hands the owned ones to
// page, unless there are none.
func judgePage[T any](ctx context.Context, names []string, namePrefix string,
	judge func(context.Context, []string) ([]T, error), inventory func([]T) driver.Inventory,
	page func(driver.Inventory) error,
) error {
	names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, namePrefix) })
	owned, err := judge(ctx, names)
	if err != nil || len(owned) == 0 {
		return err
	}
	return page(inventory(owned))
}

// ownedBuckets returns the buckets of names that carry an owner mark,
// sorted by name.
func (d *Driver) ownedBuckets(ctx context.Context, names []string) ([]driver.OwnedBucket, error) {
	owners, err := forEach(ctx, names, func(ctx context.Context, name string) (string, error) {
		out, err := d.s3.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &name})
		switch {
		case err == nil:
		case hasCode(err, codesNoTags...), hasCode(err, codesNoBucket...), httpStatus(err) == http.StatusForbidden:
			return "", nil
		default:
			return "", mapBucketErr(err, "get tags of bucket %q", name)
		}
		for _, t := range out.TagSet {
			if aws.ToString(t.Key) == OwnerTagKey {
				return aws.ToString(t.Value), nil
			}
		}
		return "", nil
	})
	if err != nil {
		return nil, err
	}
	var owned []driver.OwnedBucket
	for i, name := range names {
		if driver.IsOwnerMark(owners[i]) {
			owned = append(owned, driver.OwnedBucket{Name: name, Owner: owners[i]})
		}
	}
	slices.SortFunc(owned, func(a, b driver.OwnedBucket) int { return strings.Compare(a.Name, b.Name) })
	return owned, nil
}

func (d *Driver) userPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	pages := iam.NewListUsersPaginator(d.iam, &iam.ListUsersInput{PathPrefix: aws.String(UserPath), MaxItems: aws.Int32(userPage)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return mapIAMErr(err, "list users under %s", UserPath)
		}
		names := make([]string, 0, len(out.Users))
		for _, u := range out.Users {
			names = append(names, aws.ToString(u.UserName))
		}
		err = judgePage(ctx, names, namePrefix, d.ownedUsers,
			func(owned []driver.OwnedUser) driver.Inventory { return driver.Inventory{Users: owned} }, page)
		if err != nil {
			return err
		}
	}
	return nil
}

// ownedUsers returns the users of names that carry an owner mark, with
// their keys, sorted by name.
func (d *Driver) ownedUsers(ctx context.Context, names []string) ([]driver.OwnedUser, error) {
	users, err := forEach(ctx, names, func(ctx context.Context, name string) (driver.OwnedUser, error) {
		u, err := d.observeUser(ctx, name)
		if err != nil || !u.exists || !driver.IsOwnerMark(u.owner) {
			return driver.OwnedUser{}, err
		}
		keys, err := d.listKeys(ctx, name)
		if hasCode(err, codesNoEntity...) {
			return driver.OwnedUser{}, nil // deleted since
		}
		if err != nil {
			return driver.OwnedUser{}, err
		}
		owned := driver.OwnedUser{Name: name, Owner: u.owner}
		for _, k := range keys {
			owned.KeyIDs = append(owned.KeyIDs, aws.ToString(k.AccessKeyId))
		}
		slices.Sort(owned.KeyIDs)
		return owned, nil
	})
	if err != nil {
		return nil, err
	}
	var owned []driver.OwnedUser
	for _, u := range users {
		if u.Name != "" {
			owned = append(owned, u)
		}
	}
	slices.SortFunc(owned, func(a, b driver.OwnedUser) int { return strings.Compare(a.Name, b.Name) })
	return owned, nil
}

// forEach calls f for every item, at most inventoryWorkers at once, and
// returns the results in the items' order, or the first error (the calls
// not yet started are then skipped).
func forEach[T, R any](ctx context.Context, items []T, f func(context.Context, T) (R, error)) ([]R, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([]R, len(items))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(inventoryWorkers, len(items)) {
		wg.Go(func() {
			for i := range next {
				r, err := f(ctx, items[i])
				if err != nil {
					cancel(err)
					continue
				}
				out[i] = r
			}
		})
	}
feed:
	for i := range items {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// BucketInventoryPages is the bucket part of InventoryPages alone: for a
// driver that keeps its buckets through this one and its users elsewhere
// (the minio driver).
func (d *Driver) BucketInventoryPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	return d.bucketPages(ctx, namePrefix, page)
}

// DeleteAccessKey implements driver.Auditable.
func (d *Driver) DeleteAccessKey(ctx context.Context, userName, owner, keyID string) error {
	if err := driver.RequireNames("user name", userName, "owner", owner, "key id", keyID); err != nil {
		return err
	}
	if exists, err := d.ownUser(ctx, userName, owner); !exists {
		return err
	}
	return d.deleteKey(ctx, userName, keyID)
}
