package driver

import "context"

// Auditable is implemented by a driver that can list what it made, so that
// the leak audit (bucketbroker admin audit) can compare the backend with the
// broker's records. It is optional: the engine never needs it.
type Auditable interface {
	// Inventory lists every bucket and user whose name starts with
	// namePrefix (everything when it is empty) and that carries an owner
	// mark IsOwnerMark accepts, whoever the owner. Resources without such
	// a mark are never listed: they are not ours to judge.
	Inventory(ctx context.Context, namePrefix string) (Inventory, error)
	// DeleteAccessKey deletes one access key of the user if the user
	// carries owner. A missing user or key is success; a user with another
	// mark, or none, is ErrOwnedByOther and keeps its keys.
	DeleteAccessKey(ctx context.Context, userName, owner, keyID string) error
}

// Inventory is what Auditable.Inventory found, sorted by name.
type Inventory struct {
	Buckets []OwnedBucket
	Users   []OwnedUser
}

// OwnedBucket is a bucket that carries an owner mark.
type OwnedBucket struct {
	Name  string
	Owner string
}

// OwnedUser is a user that carries an owner mark, with its access key ids.
type OwnedUser struct {
	Name   string
	Owner  string
	KeyIDs []string
}

// PagedAuditable is implemented by an Auditable driver that can hand its
// inventory out a page at a time, so that neither the driver nor the
// audit holds the whole answer at once. It is optional: the audit takes
// Inventory's answer as one page otherwise.
type PagedAuditable interface {
	Auditable
	// InventoryPages lists what Inventory lists, calling page with a part
	// of it at a time (each part sorted by name, buckets and users in
	// parts of their own), and stops at page's first error, which it
	// returns. The driver keeps nothing of a part once page returns.
	InventoryPages(ctx context.Context, namePrefix string, page func(Inventory) error) error
}

// InventoryPages calls page with a's inventory: a page at a time where a is
// a PagedAuditable, else its whole Inventory as one page.
func InventoryPages(ctx context.Context, a Auditable, namePrefix string, page func(Inventory) error) error {
	if p, ok := a.(PagedAuditable); ok {
		return p.InventoryPages(ctx, namePrefix, page)
	}
	inv, err := a.Inventory(ctx, namePrefix)
	if err != nil {
		return err
	}
	return page(inv)
}

// GatherInventory is Auditable.Inventory for a driver that pages its
// inventory: the pages that pages (the driver's InventoryPages) hands
// out, gathered into one Inventory.
func GatherInventory(ctx context.Context, namePrefix string,
	pages func(ctx context.Context, namePrefix string, page func(Inventory) error) error,
) (Inventory, error) {
	var inv Inventory
	err := pages(ctx, namePrefix, func(p Inventory) error {
		inv.Buckets = append(inv.Buckets, p.Buckets...)
		inv.Users = append(inv.Users, p.Users...)
		return nil
	})
	if err != nil {
		return Inventory{}, err
	}
	return inv, nil
}
