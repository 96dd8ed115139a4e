package s3iam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/iam/types"
	"golang.org/x/sync/errgroup"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// userState is what one look at an IAM user shows.
type userState struct {
	exists bool
	// owner is the user's owner mark, empty when it has none.
	owner string
	// path is the user's IAM path, as GetUser shows it.
	path string
}

func (u userState) ownedByOther(name string) error {
	if u.owner == "" {
		return fmt.Errorf("user %q exists without an owner mark: %w", name, driver.ErrOwnedByOther)
	}
	return fmt.Errorf("user %q carries owner mark %q: %w", name, u.owner, driver.ErrOwnedByOther)
}

func (d *Driver) observeUser(ctx context.Context, name string) (userState, error) {
	out, err := d.iam.GetUser(ctx, &iam.GetUserInput{UserName: &name})
	if hasCode(err, codesNoEntity...) {
		return userState{}, nil
	}
	if err != nil {
		return userState{}, mapIAMErr(err, "get user %q", name)
	}
	tags := out.User.Tags
	if len(tags) == 0 {
		// Some servers leave tags out of GetUser.
		pages := iam.NewListUserTagsPaginator(d.iam, &iam.ListUserTagsInput{UserName: &name})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if hasCode(err, codesNoEntity...) {
				return userState{}, nil
			}
			if err != nil {
				return userState{}, mapIAMErr(err, "list tags of user %q", name)
			}
			tags = append(tags, page.Tags...)
		}
	}
	return userState{exists: true, owner: ownerTag(tags), path: aws.ToString(out.User.Path)}, nil
}

// ownUser reports whether the user exists; an existing user that does not
// carry owner is ErrOwnedByOther. The deletions (RevokeCredential,
// DeleteAccessKey) start with it: a missing user is already done.
func (d *Driver) ownUser(ctx context.Context, name, owner string) (bool, error) {
	u, err := d.observeUser(ctx, name)
	if err != nil || !u.exists {
		return false, err
	}
	if u.owner != owner {
		return false, u.ownedByOther(name)
	}
	return true, nil
}

func ownerTag(tags []types.Tag) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == OwnerTagKey {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// EnsureCredential implements driver.Driver.
func (d *Driver) EnsureCredential(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	if err := spec.Validate(); err != nil {
		return driver.Credential{}, err
	}
	policy, err := policyDocument(d.partition, spec.Bucket, spec.Access)
	if err != nil {
		return driver.Credential{}, err
	}

	// A caller that names a key to keep has recorded it: the user is
	// expected to exist, so it is looked at first, its keys listed and
	// our policy read at the same time: one round trip of three reads
	// where creating first took four in sequence (a CreateUser refused,
	// a GetUser, the policy's write, the listing). Nothing is written
	// before the user is known to be ours. A key made after the listing
	// is not deleted by this call, as for one made after a listing taken
	// later (it may be another holder's); only keys the listing shows
	// are. The policy is written only when the one read differs, or could
	// not be read.
	var (
		u        userState
		keys     []types.AccessKeyMetadata
		current  string
		listed   bool
		fresh    bool
		untagged bool
	)
	if spec.KeyID != "" && spec.Keys != driver.AddKey {
		if u, keys, current, err = d.observeUserKeys(ctx, spec.UserName); err != nil {
			return driver.Credential{}, err
		}
		listed = u.exists
	}
	if !u.exists {
		if spec.Keys == driver.KeepOnlyKey {
			return driver.Credential{}, fmt.Errorf("user %q is gone with key %s: %w", spec.UserName, spec.KeyID, driver.ErrKeyGone)
		}
		// Create first: IAM refuses to create a user that exists, so a
		// success proves the user is new, and a new user has no keys to
		// look for. The common path is three calls, as it would be by
		// hand.
		if u, fresh, untagged, err = d.createUser(ctx, spec.UserName, spec.Owner); err != nil {
			return driver.Credential{}, err
		}
	}
	switch {
	case u.owner == spec.Owner:
	case u.owner == "" && spec.AdoptUnmarked:
		// Our own creation, left unmarked by a crash (or a failed TagUser)
		// on a server whose CreateUser ignores tags: mark it now, then go
		// on as for any user of ours.
		if err := d.adoptUser(ctx, spec.UserName, spec.Owner, u); err != nil {
			return driver.Credential{}, err
		}
	default:
		return driver.Credential{}, u.ownedByOther(spec.UserName)
	}

	if fresh {
		mark := ""
		if untagged {
			mark = spec.Owner
		}
		cred, err := d.newUserCredential(ctx, spec.UserName, policy, mark)
		cred.NewUser = err == nil
		return cred, err
	}
	if spec.Keys == driver.KeepOnlyKey && !slices.ContainsFunc(keys, func(k types.AccessKeyMetadata) bool {
		return aws.ToString(k.AccessKeyId) == spec.KeyID
	}) {
		return driver.Credential{}, fmt.Errorf("key %s of user %q: %w", spec.KeyID, spec.UserName, driver.ErrKeyGone)
	}

	// The policy before any key: a key is never live with a stale scope.
	// An adopted user's policy is written whatever was read: it was read
	// before the user was ours.
	if !listed || u.owner != spec.Owner || !samePolicy(current, policy) {
		if err := d.putPolicy(ctx, spec.UserName, policy); err != nil {
			return driver.Credential{}, err
		}
	}
	if !listed {
		if keys, err = d.listKeys(ctx, spec.UserName); err != nil {
			return driver.Credential{}, err
		}
	}
	if spec.Keys == driver.AddKey {
		return d.addKey(ctx, spec, keys)
	}
	return d.keepOnlyKey(ctx, spec, keys)
}

// keepOnlyKey makes spec.KeyID the user's only live key, deleting the
// other listed keys; without it among them (ReplaceKeys), it makes a new
// key once the others are deleted.
func (d *Driver) keepOnlyKey(ctx context.Context, spec driver.CredentialSpec, keys []types.AccessKeyMetadata) (driver.Credential, error) {
	kept := false
	for _, k := range keys {
		id := aws.ToString(k.AccessKeyId)
		if spec.KeyID == "" || id != spec.KeyID {
			// A key whose answer was lost (a crash after CreateAccessKey):
			// nobody holds its secret, so it must not stay live.
			if err := d.deleteKey(ctx, spec.UserName, id); err != nil {
				return driver.Credential{}, err
			}
			continue
		}
		kept = true
		if k.Status == types.StatusTypeActive {
			continue
		}
		_, err := d.iam.UpdateAccessKey(ctx, &iam.UpdateAccessKeyInput{
			UserName: &spec.UserName, AccessKeyId: &id, Status: types.StatusTypeActive,
		})
		if err != nil {
			return driver.Credential{}, mapIAMErr(err, "activate key %s of user %q", id, spec.UserName)
		}
	}
	if kept {
		return driver.Credential{AccessKeyID: spec.KeyID}, nil
	}
	return d.createKey(ctx, spec.UserName)
}

// observeUserKeys looks at a user, lists its keys and reads our inline
// policy, all at once. The keys and the policy are those of an existing
// user only: the listing's error for a missing user is no error. The
// policy is "" when it could not be read, for whatever reason (none yet, a
// server without GetUserPolicy): the caller then writes it.
func (d *Driver) observeUserKeys(ctx context.Context, name string) (u userState, keys []types.AccessKeyMetadata, policy string, err error) {
	var (
		listErr error
		wg      sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		keys, listErr = d.listKeys(ctx, name)
	}()
	go func() {
		defer wg.Done()
		out, err := d.iam.GetUserPolicy(ctx, &iam.GetUserPolicyInput{UserName: &name, PolicyName: aws.String(PolicyName)})
		if err == nil {
			policy = aws.ToString(out.PolicyDocument)
		}
	}()
	u, err = d.observeUser(ctx, name)
	wg.Wait()
	switch {
	case err != nil:
		return userState{}, nil, "", err
	case !u.exists:
		return u, nil, "", nil
	case listErr != nil:
		return userState{}, nil, "", listErr
	}
	return u, keys, policy, nil
}

// samePolicy reports whether the policy document a server returned
// (URL-encoded, as IAM returns it, or plain) grants what want does: the
// same JSON value. Anything it cannot decode is not the same.
func samePolicy(got, want string) bool {
	if got == "" {
		return false
	}
	if !strings.HasPrefix(strings.TrimSpace(got), "{") {
		var err error
		if got, err = url.PathUnescape(got); err != nil {
			return false
		}
	}
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// newUserCredential gives a user this call created its policy and a key,
// both at once: a new user has neither a policy that could be stale nor
// keys to look for, and the key is not given to anyone before every call
// here has succeeded (the caller records it first). If one fails, the error
// is returned and a key that was created is dropped unseen; the retry
// finds the user existing and deletes every key it was not told to keep,
// as it does for a key whose answer a crash lost.
//
// A key live before its policy is attached reaches nothing (a new user
// has no grant), and a crash between the two leaves a key nobody holds,
// which the resumed call deletes.
//
// mark, when set, is the owner mark a server that ignores CreateUser's
// tags did not keep: it is written (TagUser) beside the other two rather
// than before them, one round trip less. A crash or failure before it
// lands leaves the user unmarked, as a crash between CreateUser and
// TagUser always could, now perhaps with a policy and a key nobody holds
// the secret of: a retry takes the user back only under AdoptUnmarked
// (the caller's record of the attempt, which both doors keep) and then
// deletes that key like any whose answer was lost; without it the user is
// refused as someone else's and left (a leak the audit cannot list, as
// any unmarked user is), with a key that nobody can use.
//
// The calls change one user at the same time: a server that kept a
// user's policy and keys with an unlocked read-modify-write could lose one
// of them. versitygw's IAM store and SeaweedFS's IAM API (one lock
// around each action's load, change and save) serialize them.
func (d *Driver) newUserCredential(ctx context.Context, user, policy, mark string) (driver.Credential, error) {
	g, gctx := errgroup.WithContext(ctx)
	if mark != "" {
		g.Go(func() error { return d.tagUser(gctx, user, mark) })
	}
	g.Go(func() error { return d.putPolicy(gctx, user, policy) })
	var cred driver.Credential
	g.Go(func() (err error) {
		cred, err = d.createKey(gctx, user)
		return err
	})
	if err := g.Wait(); err != nil {
		return driver.Credential{}, err
	}
	return cred, nil
}

// addKey is EnsureCredential in AddKey mode: a new key beside the others,
// which are left for the caller to delete once it has recorded its key.
// When IAM's limit on a user's keys leaves no room for a new one, the
// oldest of spec.Evict give way, and with none of them there, the call
// fails (KeyLimitError).
func (d *Driver) addKey(ctx context.Context, spec driver.CredentialSpec, keys []types.AccessKeyMetadata) (driver.Credential, error) {
	slices.SortFunc(keys, func(a, b types.AccessKeyMetadata) int {
		return aws.ToTime(a.CreateDate).Compare(aws.ToTime(b.CreateDate))
	})
	// Only keys the caller proved unrecorded give way: any other may be
	// the one another holder recorded (guarantee 10).
	for i := 0; len(keys) >= maxKeysPerUser; {
		if i == len(keys) {
			ids := make([]string, len(keys))
			for j, k := range keys {
				ids[j] = aws.ToString(k.AccessKeyId)
			}
			return driver.Credential{}, &driver.KeyLimitError{UserName: spec.UserName, KeyIDs: ids}
		}
		id := aws.ToString(keys[i].AccessKeyId)
		if !slices.Contains(spec.Evict, id) {
			i++
			continue
		}
		if err := d.deleteKey(ctx, spec.UserName, id); err != nil {
			return driver.Credential{}, err
		}
		keys = slices.Delete(keys, i, i+1)
	}
	return d.createKey(ctx, spec.UserName)
}

// maxKeysPerUser is IAM's limit on a user's access keys: a new key needs
// one of them free.
const maxKeysPerUser = 2

func (d *Driver) putPolicy(ctx context.Context, user, policy string) error {
	_, err := d.iam.PutUserPolicy(ctx, &iam.PutUserPolicyInput{
		UserName:       &user,
		PolicyName:     aws.String(PolicyName),
		PolicyDocument: &policy,
	})
	if err != nil {
		return mapIAMErr(err, "put policy of user %q", user)
	}
	return nil
}

func (d *Driver) createKey(ctx context.Context, user string) (driver.Credential, error) {
	out, err := d.iam.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &user})
	if err != nil {
		return driver.Credential{}, mapIAMErr(err, "create key for user %q", user)
	}
	return driver.Credential{
		AccessKeyID:     aws.ToString(out.AccessKey.AccessKeyId),
		SecretAccessKey: aws.ToString(out.AccessKey.SecretAccessKey),
	}, nil
}

// createUser creates the user with its owner mark, in the CreateUser call
// itself where the server keeps it (so a user of ours is never unmarked),
// or observes the user that already exists; fresh reports which. untagged
// reports a new user whose server ignored the tags (its answer shows
// none): the caller writes the mark (newUserCredential).
func (d *Driver) createUser(ctx context.Context, name, owner string) (u userState, fresh, untagged bool, err error) {
	out, err := d.iam.CreateUser(ctx, &iam.CreateUserInput{
		UserName: &name,
		Path:     aws.String(UserPath),
		Tags:     []types.Tag{{Key: aws.String(OwnerTagKey), Value: &owner}},
	})
	if hasCode(err, "EntityAlreadyExists") {
		u, err := d.observeUser(ctx, name)
		if err == nil && !u.exists {
			err = fmt.Errorf("user %q: reported as existing, then as missing", name)
		}
		return u, false, false, err
	}
	if err != nil {
		return userState{}, false, false, mapIAMErr(err, "create user %q", name)
	}
	// For servers that ignore Tags on CreateUser but support TagUser.
	untagged = out.User != nil && ownerTag(out.User.Tags) == ""
	if out.User != nil {
		d.userMarks.saw(ownerTag(out.User.Tags) == owner)
	}
	return userState{exists: true, owner: owner, path: UserPath}, true, untagged, nil
}

// AtomicUserMarks implements driver.AtomicUserMarker. The driver puts the
// owner mark into CreateUser itself; a server that keeps it there
// (versitygw, the embedded server, AWS) writes the user and its mark at
// once, so no user of ours is ever unmarked. That is known only from an
// answer: true once a CreateUser answer has shown the user with the mark,
// false before, and false for good once one has shown it without (that
// server marks with TagUser afterwards, and a crash in between leaves an
// unmarked user of ours).
func (d *Driver) AtomicUserMarks() bool { return d.userMarks.kept() }

// adoptUser gives an unmarked user what CreateUser would have: the path
// first, the owner mark last, so that a crash in between leaves it
// unmarked and the retry adopts it again. A server without paths
// (SeaweedFS keeps every user at /) accepts UpdateUser and changes nothing.
func (d *Driver) adoptUser(ctx context.Context, name, owner string, u userState) error {
	if u.path != UserPath {
		_, err := d.iam.UpdateUser(ctx, &iam.UpdateUserInput{UserName: &name, NewPath: aws.String(UserPath)})
		if err != nil && !hasCode(err, codesNotSupported...) {
			return mapIAMErr(err, "move user %q to path %s", name, UserPath)
		}
	}
	return d.tagUser(ctx, name, owner)
}

func (d *Driver) tagUser(ctx context.Context, name, owner string) error {
	_, err := d.iam.TagUser(ctx, &iam.TagUserInput{
		UserName: &name,
		Tags:     []types.Tag{{Key: aws.String(OwnerTagKey), Value: &owner}},
	})
	if err != nil {
		return mapIAMErr(err, "tag user %q", name)
	}
	return nil
}

func (d *Driver) listKeys(ctx context.Context, user string) ([]types.AccessKeyMetadata, error) {
	var keys []types.AccessKeyMetadata
	pages := iam.NewListAccessKeysPaginator(d.iam, &iam.ListAccessKeysInput{UserName: &user})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, mapIAMErr(err, "list keys of user %q", user)
		}
		keys = append(keys, page.AccessKeyMetadata...)
	}
	return keys, nil
}

func (d *Driver) deleteKey(ctx context.Context, user, id string) error {
	_, err := d.iam.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: &user, AccessKeyId: &id})
	if err != nil && !hasCode(err, codesNoEntity...) {
		return mapIAMErr(err, "delete key %s of user %q", id, user)
	}
	return nil
}

// RevokeCredential implements driver.Driver.
//
// The common path is five calls in four round trips: the owner look, then
// our inline policy's deletion beside the listing of the keys, then each
// key's deletion, then the user's. The policy goes first (or with the
// listing): from then on no grant of ours remains for any key of the user,
// even if a later step fails and is retried. The writes to the user are
// never made at once, so a server that changes a user's record with an
// unlocked read-modify-write cannot lose a deletion.
func (d *Driver) RevokeCredential(ctx context.Context, userName, owner string) error {
	if err := driver.RequireNames("user name", userName, "owner", owner); err != nil {
		return err
	}
	if exists, err := d.ownUser(ctx, userName, owner); !exists {
		return err
	}

	var keys []types.AccessKeyMetadata
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.deletePolicy(gctx, userName, PolicyName) })
	g.Go(func() (err error) {
		keys, err = d.listKeys(gctx, userName)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if err := d.deleteKeys(ctx, userName, keys); err != nil {
		return err
	}

	err := d.deleteUser(ctx, userName)
	if !hasCode(err, "DeleteConflict") {
		return err
	}
	// Something we never make is attached: an inline policy of another
	// name, or a key made since the listing. Delete those and try once
	// more; a group, a managed policy or a login profile still refuses the
	// deletion, and is left for an operator.
	if err := d.deleteOtherPolicies(ctx, userName); err != nil {
		return err
	}
	if keys, err = d.listKeys(ctx, userName); err != nil {
		return err
	}
	if err := d.deleteKeys(ctx, userName, keys); err != nil {
		return err
	}
	return d.deleteUser(ctx, userName)
}

func (d *Driver) deleteKeys(ctx context.Context, user string, keys []types.AccessKeyMetadata) error {
	for _, k := range keys {
		if err := d.deleteKey(ctx, user, aws.ToString(k.AccessKeyId)); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) deletePolicy(ctx context.Context, user, policy string) error {
	_, err := d.iam.DeleteUserPolicy(ctx, &iam.DeleteUserPolicyInput{UserName: &user, PolicyName: &policy})
	if err != nil && !hasCode(err, codesNoEntity...) {
		return mapIAMErr(err, "delete policy %q of user %q", policy, user)
	}
	return nil
}

func (d *Driver) deleteOtherPolicies(ctx context.Context, user string) error {
	var policies []string
	pages := iam.NewListUserPoliciesPaginator(d.iam, &iam.ListUserPoliciesInput{UserName: &user})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return mapIAMErr(err, "list policies of user %q", user)
		}
		policies = append(policies, page.PolicyNames...)
	}
	for _, p := range policies {
		if err := d.deletePolicy(ctx, user, p); err != nil {
			return err
		}
	}
	return nil
}

// deleteUser deletes the user; a user already gone is success. The error
// keeps the server's code, so that the caller can tell DeleteConflict.
func (d *Driver) deleteUser(ctx context.Context, user string) error {
	_, err := d.iam.DeleteUser(ctx, &iam.DeleteUserInput{UserName: &user})
	if err != nil && !hasCode(err, codesNoEntity...) {
		return mapIAMErr(err, "delete user %q", user)
	}
	return nil
}

// AccessActions returns the S3 actions a credential with access is
// allowed: those on its bucket (the bucket's ARN) and those on its objects
// (the ARN + "/*"). An unknown access is ErrInvalid. The minio driver's
// policies grant the same.
func AccessActions(access driver.Access) (bucketActions, objectActions []string, err error) {
	switch access {
	case driver.AccessReadWrite:
		bucketActions = []string{"s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"}
		objectActions = []string{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}
	case driver.AccessReadOnly:
		bucketActions = []string{"s3:ListBucket", "s3:GetBucketLocation"}
		objectActions = []string{"s3:GetObject"}
	case driver.AccessWriteOnly:
		bucketActions = []string{"s3:GetBucketLocation", "s3:ListBucketMultipartUploads"}
		objectActions = []string{"s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}
	default:
		return nil, nil, driver.Invalidf("access mode %q", access)
	}
	return bucketActions, objectActions, nil
}

// policyDocument is the inline policy that allows access to one bucket and
// nothing else. Bucket-level actions name the bucket ARN, object-level
// actions its objects.
func policyDocument(partition, bucket string, access driver.Access) (string, error) {
	bucketActions, objectActions, err := AccessActions(access)
	if err != nil {
		return "", err
	}
	type statement struct {
		Sid      string
		Effect   string
		Action   []string
		Resource []string
	}
	arn := "arn:" + partition + ":s3:::" + bucket
	doc := struct {
		Version   string
		Statement []statement
	}{
		Version: "2012-10-17",
		Statement: []statement{
			{Sid: "Bucket", Effect: "Allow", Action: bucketActions, Resource: []string{arn}},
			{Sid: "Objects", Effect: "Allow", Action: objectActions, Resource: []string{arn + "/*"}},
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("encode policy: %w", err)
	}
	return string(b), nil
}
