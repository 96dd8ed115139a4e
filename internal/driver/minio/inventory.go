package minio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

var _ driver.PagedAuditable = (*Driver)(nil)

// Inventory implements driver.Auditable: InventoryPages' pages gathered.
func (d *Driver) Inventory(ctx context.Context, namePrefix string) (driver.Inventory, error) {
	return driver.GatherInventory(ctx, namePrefix, d.InventoryPages)
}

// InventoryPages implements driver.PagedAuditable. Buckets are listed as
// the s3iam driver lists them, a page at a time. Users come in one page:
// MinIO's admin API lists every user at once (it does not page). A user is
// listed when its name starts with namePrefix and our policy, attached to
// it, names an owner mark; each such user costs a read of the policy and
// one of its keys. A user deleted while the listing runs is left out.
func (d *Driver) InventoryPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	if err := d.buckets.BucketInventoryPages(ctx, namePrefix, page); err != nil {
		return err
	}
	all, err := d.admin.ListUsers(ctx)
	if err != nil {
		return fmt.Errorf("list users: %w", err)
	}
	var users []driver.OwnedUser
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if !strings.HasPrefix(name, namePrefix) || !slices.Contains(all[name].Policies, policyName(name)) {
			continue
		}
		u, err := d.observeUser(ctx, name)
		if err != nil {
			return err
		}
		if !u.exists || !driver.IsOwnerMark(u.owner) {
			continue
		}
		keys, err := d.keys(ctx, name)
		if err != nil {
			return err
		}
		users = append(users, driver.OwnedUser{Name: name, Owner: u.owner, KeyIDs: keys})
	}
	if len(users) == 0 {
		return nil
	}
	return page(driver.Inventory{Users: users})
}

// DeleteAccessKey implements driver.Auditable: it deletes the service
// account keyID if it is one of the user's (the admin API would delete any
// user's).
func (d *Driver) DeleteAccessKey(ctx context.Context, userName, owner, keyID string) error {
	if err := driver.RequireNames("user name", userName, "owner", owner, "key id", keyID); err != nil {
		return err
	}
	if exists, err := d.ownUser(ctx, userName, owner); !exists {
		return err
	}
	keys, err := d.keys(ctx, userName)
	if err != nil || !slices.Contains(keys, keyID) {
		return err
	}
	return d.deleteKey(ctx, userName, keyID)
}
