package minio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio/adminapi"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

const (
	// PolicyPrefix starts the name of the canned policy that scopes a
	// user to its bucket and carries its owner mark: PolicyPrefix + the
	// user's name.
	PolicyPrefix = "bucketbroker-"
	// MarkSidPrefix starts the Sid of the policy statement that holds the
	// owner mark: MarkSidPrefix + the mark.
	MarkSidPrefix = "bucketbroker.io/owner="
)

func policyName(user string) string { return PolicyPrefix + user }

// userState is what one look at a user shows.
type userState struct {
	exists bool
	// enabled is false for a user the server refuses (disabled).
	enabled bool
	// owner is the user's owner mark, empty when it has none.
	owner string
	// policy is the document of the user's policy (policyName) as the
	// server returned it, nil when the user does not have it attached.
	policy []byte
	// policies and groups are the user's attached policies and groups.
	policies, groups []string
}

func (u userState) ownedByOther(name string) error {
	if u.owner == "" {
		return fmt.Errorf("user %q exists without an owner mark: %w", name, driver.ErrOwnedByOther)
	}
	return fmt.Errorf("user %q carries owner mark %q: %w", name, u.owner, driver.ErrOwnedByOther)
}

// observeUser looks at a user and, when our policy is attached to it,
// reads the owner mark from that policy.
func (d *Driver) observeUser(ctx context.Context, name string) (userState, error) {
	info, err := d.admin.UserInfo(ctx, name)
	if errors.Is(err, adminapi.ErrNoSuchUser) {
		return userState{}, nil
	}
	if err != nil {
		return userState{}, fmt.Errorf("look at user %q: %w", name, err)
	}
	u := userState{exists: true, enabled: info.Enabled, policies: info.Policies, groups: info.Groups}
	if !slices.Contains(info.Policies, policyName(name)) {
		return u, nil
	}
	doc, err := d.admin.CannedPolicy(ctx, policyName(name))
	if errors.Is(err, adminapi.ErrNoSuchPolicy) {
		// Removed between the two reads: no mark.
		return u, nil
	}
	if err != nil {
		return userState{}, fmt.Errorf("read policy of user %q: %w", name, err)
	}
	u.policy, u.owner = doc, policyMark(doc)
	return u, nil
}

// ownUser reports whether the user exists; an existing user that does not
// carry owner is ErrOwnedByOther.
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

// keys lists the user's keys: its service accounts. The user's own access
// key (its name) is never handed out: its secret is random and kept by no
// one.
func (d *Driver) keys(ctx context.Context, user string) ([]string, error) {
	keys, err := d.admin.ServiceAccounts(ctx, user)
	if err != nil {
		return nil, fmt.Errorf("list keys of user %q: %w", user, err)
	}
	return keys, nil
}

// EnsureCredential implements driver.Driver.
func (d *Driver) EnsureCredential(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	if err := spec.Validate(); err != nil {
		return driver.Credential{}, err
	}
	if strings.ContainsAny(spec.UserName, "=,") {
		return driver.Credential{}, driver.Invalidf("user name %q holds '=' or ','", spec.UserName)
	}
	policy, err := policyDocument(spec.Bucket, spec.Access, spec.Owner)
	if err != nil {
		return driver.Credential{}, err
	}

	u, err := d.observeUser(ctx, spec.UserName)
	if err != nil {
		return driver.Credential{}, err
	}
	if !u.exists {
		if spec.Keys == driver.KeepOnlyKey {
			return driver.Credential{}, fmt.Errorf("user %q is gone with key %s: %w", spec.UserName, spec.KeyID, driver.ErrKeyGone)
		}
		cred, err := d.createUser(ctx, spec.UserName, policy)
		cred.NewUser = err == nil
		return cred, err
	}
	switch {
	case u.owner == spec.Owner:
		if err := d.mendUser(ctx, spec.UserName, policy, u); err != nil {
			return driver.Credential{}, err
		}
	case u.owner == "" && spec.AdoptUnmarked:
		if err := d.adoptUser(ctx, spec.UserName, policy, u); err != nil {
			return driver.Credential{}, err
		}
	default:
		return driver.Credential{}, u.ownedByOther(spec.UserName)
	}

	keys, err := d.keys(ctx, spec.UserName)
	if err != nil {
		return driver.Credential{}, err
	}
	switch spec.Keys {
	case driver.AddKey:
		// MinIO has shown no limit on a user's service accounts (the
		// conformance suite makes ten): Evict is not needed.
		return d.createKey(ctx, spec.UserName)
	case driver.KeepOnlyKey:
		if !slices.Contains(keys, spec.KeyID) {
			return driver.Credential{}, fmt.Errorf("key %s of user %q: %w", spec.KeyID, spec.UserName, driver.ErrKeyGone)
		}
	}
	kept := false
	for _, k := range keys {
		if k == spec.KeyID {
			kept = true
			continue
		}
		if err := d.deleteKey(ctx, spec.UserName, k); err != nil {
			return driver.Credential{}, err
		}
	}
	if kept {
		return driver.Credential{AccessKeyID: spec.KeyID}, nil
	}
	return d.createKey(ctx, spec.UserName)
}

// mendUser makes a user of ours as EnsureCredential leaves it: its policy
// as wanted, and enabled. A user disabled outside the broker (mc admin
// user disable) is enabled again, since the credential this call ensures
// must work; unbinding is how a binding's key is stopped.
func (d *Driver) mendUser(ctx context.Context, user string, policy []byte, u userState) error {
	if !samePolicy(u.policy, policy) {
		if err := d.putPolicy(ctx, user, policy); err != nil {
			return err
		}
	}
	if !u.enabled {
		if err := d.admin.SetUserStatus(ctx, user, true); err != nil {
			return fmt.Errorf("enable user %q: %w", user, err)
		}
	}
	return nil
}

// createUser makes a user that did not exist, in the order that leaves a
// crash nothing to misread: the policy (with the owner mark) first, then
// the user with a random secret nobody keeps, then the policy's
// attachment (from then on the user is marked), then its key. A crash
// before the attachment leaves an unmarked user, which the caller's retry
// adopts (AdoptUnmarked). MinIO's add-user also changes an existing
// user's secret, so a user someone else made between the look and here
// would lose its secret: the look just before keeps that window short,
// and the attachment refuses nothing, so such a user would become ours.
func (d *Driver) createUser(ctx context.Context, user string, policy []byte) (driver.Credential, error) {
	if err := d.putPolicy(ctx, user, policy); err != nil {
		return driver.Credential{}, err
	}
	if err := d.admin.AddUser(ctx, user, randomSecret()); err != nil {
		return driver.Credential{}, fmt.Errorf("create user %q: %w", user, err)
	}
	if err := d.attachPolicy(ctx, user); err != nil {
		return driver.Credential{}, err
	}
	return d.createKey(ctx, user)
}

// adoptUser makes an unmarked user ours: a new random secret first, so
// that whoever made the user no longer holds its own key, then its other
// policies detached, so that it has no grant beyond ours, then our policy
// with the mark, attached last. Its service accounts are the caller's to
// delete, as any key it did not record. A user in a group is refused,
// unchanged: the group's policies would reach its keys, and a group is not
// ours to change.
func (d *Driver) adoptUser(ctx context.Context, user string, policy []byte, u userState) error {
	if len(u.groups) > 0 {
		return fmt.Errorf("user %q exists without an owner mark, in groups %q: %w", user, u.groups, driver.ErrOwnedByOther)
	}
	if err := d.admin.AddUser(ctx, user, randomSecret()); err != nil {
		return fmt.Errorf("change the secret of user %q: %w", user, err)
	}
	if others := slices.DeleteFunc(slices.Clone(u.policies), func(p string) bool { return p == policyName(user) }); len(others) > 0 {
		_, err := d.admin.DetachPolicy(ctx, user, others...)
		if err != nil && !errors.Is(err, adminapi.ErrPolicyChangeAlreadyApplied) {
			return fmt.Errorf("detach policies %q from user %q: %w", others, user, err)
		}
	}
	if err := d.putPolicy(ctx, user, policy); err != nil {
		return err
	}
	return d.attachPolicy(ctx, user)
}

func (d *Driver) putPolicy(ctx context.Context, user string, policy []byte) error {
	if err := d.admin.AddCannedPolicy(ctx, policyName(user), policy); err != nil {
		return fmt.Errorf("write policy of user %q: %w", user, err)
	}
	return nil
}

func (d *Driver) attachPolicy(ctx context.Context, user string) error {
	_, err := d.admin.AttachPolicy(ctx, user, policyName(user))
	if err != nil && !errors.Is(err, adminapi.ErrPolicyChangeAlreadyApplied) {
		return fmt.Errorf("attach policy to user %q: %w", user, err)
	}
	return nil
}

func (d *Driver) createKey(ctx context.Context, user string) (driver.Credential, error) {
	sa, err := d.admin.AddServiceAccount(ctx, user)
	if err != nil {
		return driver.Credential{}, fmt.Errorf("create key for user %q: %w", user, err)
	}
	return driver.Credential{AccessKeyID: sa.AccessKey, SecretAccessKey: sa.SecretKey}, nil
}

func (d *Driver) deleteKey(ctx context.Context, user, key string) error {
	err := d.admin.DeleteServiceAccount(ctx, key)
	if err != nil && !errors.Is(err, adminapi.ErrNoSuchServiceAccount) {
		return fmt.Errorf("delete key %s of user %q: %w", key, user, err)
	}
	return nil
}

// RevokeCredential implements driver.Driver. Removing the user removes
// its service accounts with it: every key stops at once. The policy goes
// after the user, so that a crash in between leaves no user of ours
// unmarked; a retry that finds the user gone removes the policy if it
// still carries owner.
func (d *Driver) RevokeCredential(ctx context.Context, userName, owner string) error {
	if err := driver.RequireNames("user name", userName, "owner", owner); err != nil {
		return err
	}
	exists, err := d.ownUser(ctx, userName, owner)
	if err != nil {
		return err
	}
	if exists {
		err := d.admin.RemoveUser(ctx, userName)
		if err != nil && !errors.Is(err, adminapi.ErrNoSuchUser) {
			return fmt.Errorf("delete user %q: %w", userName, err)
		}
	} else {
		doc, err := d.admin.CannedPolicy(ctx, policyName(userName))
		if errors.Is(err, adminapi.ErrNoSuchPolicy) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read policy of user %q: %w", userName, err)
		}
		if policyMark(doc) != owner {
			return nil
		}
	}
	if err := d.admin.RemoveCannedPolicy(ctx, policyName(userName)); err != nil {
		return fmt.Errorf("delete policy of user %q: %w", userName, err)
	}
	return nil
}

// policyStatement is one statement of a policy document.
type policyStatement struct {
	Sid      string   `json:",omitempty"`
	Effect   string   `json:"Effect"`
	Action   []string `json:"Action"`
	Resource []string `json:",omitempty"`
}

type policyDoc struct {
	Version   string            `json:"Version"`
	Statement []policyStatement `json:"Statement"`
}

// policyDocument is the canned policy of a user: access to one bucket and
// nothing else, and a Deny of the admin actions by which MinIO lets a user
// mint its own keys (a service account, a new secret of its own), which an
// S3-only policy does not stop. The Deny's Sid holds the owner mark: only
// the admin can change a policy, so it is as safe a place as a tag.
func policyDocument(bucket string, access driver.Access, owner string) ([]byte, error) {
	bucketActions, objectActions, err := s3iam.AccessActions(access)
	if err != nil {
		return nil, err
	}
	arn := "arn:aws:s3:::" + bucket
	doc := policyDoc{
		Version: "2012-10-17",
		Statement: []policyStatement{
			{Sid: MarkSidPrefix + owner, Effect: "Deny", Action: []string{"admin:CreateServiceAccount", "admin:CreateUser"}},
			{Effect: "Allow", Action: bucketActions, Resource: []string{arn}},
			{Effect: "Allow", Action: objectActions, Resource: []string{arn + "/*"}},
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	return b, nil
}

// policyMark is the owner mark a policy document carries, "" if none.
func policyMark(doc []byte) string {
	var p policyDoc
	if json.Unmarshal(doc, &p) != nil {
		return ""
	}
	for _, s := range p.Statement {
		if mark, ok := strings.CutPrefix(s.Sid, MarkSidPrefix); ok && s.Effect == "Deny" {
			return mark
		}
	}
	return ""
}

// samePolicy reports whether the document the server returned grants what
// want does. MinIO re-encodes documents and keeps each statement's actions
// and resources as sets, in any order: statements, actions and resources
// are compared sorted.
func samePolicy(got, want []byte) bool {
	var g, w policyDoc
	if got == nil || json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
		return false
	}
	norm := func(p *policyDoc) {
		for i := range p.Statement {
			slices.Sort(p.Statement[i].Action)
			slices.Sort(p.Statement[i].Resource)
			if len(p.Statement[i].Resource) == 0 {
				p.Statement[i].Resource = nil
			}
		}
	}
	norm(&g)
	norm(&w)
	order := func(a, b policyStatement) int {
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		return strings.Compare(string(x), string(y))
	}
	slices.SortFunc(g.Statement, order)
	slices.SortFunc(w.Statement, order)
	return reflect.DeepEqual(g, w)
}

// randomSecret is a user's own secret key, which nobody keeps: 40 hex
// digits.
func randomSecret() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
