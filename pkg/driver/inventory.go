package driver

import "context"

// Auditable is implemented by a driver that can list what it made, so that
// the leak audit (bucketbroker admin audit) can compare the backend with the
// broker's records. It is optional: the engine never needs it.
type Auditable interface {
	// Inventory lists every bucket and user whose name starts with
	// namePrefix (everything when it is empty) and that carries an owner
	// mark made by OwnerMark (see IsOwnerMark), whoever the owner. Resources
	// without such a mark are never listed: they are not ours to judge.
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
