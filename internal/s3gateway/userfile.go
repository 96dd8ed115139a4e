package s3gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/versity/versitygw/iamapi/iamerr"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

// userStorer is the half of versitygw's storage.Storer that concerns users:
// what a userShard's store answers, versitygw's own file store for root's
// older users and a userFile for each user since.
type userStorer interface {
	CreateUser(ctx context.Context, user types.User) (*types.User, error)
	DeleteUser(ctx context.Context, username string) error
	GetUser(ctx context.Context, username string) (*types.User, error)
	GetUserByAccessKeyID(ctx context.Context, accessKeyID string) (*types.User, error)
	UpdateUser(ctx context.Context, input storage.UpdateUserInput) (*types.User, error)
	TagUser(ctx context.Context, userName string, tags []types.Tag) error
	UntagUser(ctx context.Context, userName string, tagKeys []string) error
	ListUserTags(ctx context.Context, input storage.ListUserTagsInput) (*storage.ListTagsOutput, error)
	CreateAccessKey(ctx context.Context, input storage.CreateAccessKeyInput) (*types.AccessKey, error)
	UpdateAccessKey(ctx context.Context, input storage.UpdateAccessKeyInput) error
	DeleteAccessKey(ctx context.Context, username, accessKeyID string) error
	GetAccessKeyLastUsed(ctx context.Context, accessKeyID string) (*storage.GetAccessKeyLastUsedOutput, error)
	ListAccessKeys(ctx context.Context, input storage.ListAccessKeysInput) (*storage.ListAccessKeysOutput, error)
	RecordAccessKeyUsage(ctx context.Context, accessKeyID, service, region string, when time.Time) error
	PutUserPolicy(ctx context.Context, input storage.PutUserPolicyInput) error
	GetUserPolicy(ctx context.Context, userName, policyName string) (*types.PolicyEntry, error)
	DeleteUserPolicy(ctx context.Context, userName, policyName string) error
	ListUserPolicies(ctx context.Context, input storage.ListUserPoliciesInput) (*storage.ListUserPoliciesOutput, error)
}

// userFileSuffix ends the name of a user's file in the users folder,
// u<hex of the user id>.json; tmpSuffix the name of the file a write
// fills before it renames it over the user's.
const (
	userFileSuffix = ".json"
	tmpSuffix      = ".tmp"
)

// userFile is one IAM user in a file of its own: the user as versitygw's
// types.User encodes to JSON, its keys and inline policies included, and
// nothing else, after a line of what the start indexes (about 1.4 KB for
// a user the s3iam driver makes). versitygw's file store, which each user
// had before, kept the user in a document of every kind of IAM entity
// with two indexes, and a backup of it, in a folder of its own: 12 KB of
// disk per user in three 4 KiB blocks.
//
// A change is written whole to userFile.path+".tmp" and renamed over the
// user's file: a process killed at any point leaves the user's file as it
// was or as it became, never part of it (TestUserFileTornWrites); the
// temporary file it may leave is removed at the next start. Like
// versitygw's store it does not fsync: a crash of the machine, not of the
// process, can lose the last changes (ext4 writes a file renamed over
// another before the rename, so not its content).
//
// Every method is versitygw v1.8.0's storage.InternalStore's for one user
// (its limits, errors and orders), with the user looked up by name
// case-insensitively as there.
type userFile struct {
	mu sync.RWMutex // held for writing by every read-modify-write
	// The file is *folder/userFileName(id), or *folder/base where base is
	// set (a file named otherwise). folder is one string all users share;
	// id is the string the store's index of ids holds: the name is made
	// when needed rather than kept (48 bytes a user, issue 17).
	folder   *string
	id, base string
}

func (f *userFile) path() string {
	if f.base != "" {
		return filepath.Join(*f.folder, f.base)
	}
	return filepath.Join(*f.folder, userFileName(f.id))
}

var _ userStorer = (*userFile)(nil)

// recordReads counts the user files read in this process, for the tests:
// a start reads each once, a page of ListUsers its users only.
var recordReads atomic.Int64

// killWrite, set by tests, simulates a kill -9 inside writeAtomic: when it
// returns kill, the first keep bytes reach the temporary file and the
// write stops there, as the process would, leaving everything in place.
var killWrite func(data []byte) (keep int, kill bool)

// errKilled is what a write stopped by killWrite returns.
var errKilled = errors.New("killed (simulated)")

// A user's file is two lines of JSON: what the start indexes of the user
// (indexed: names, path, key ids), then the user. The start decodes the
// first line only, a seventh of the file: decoding was more than half of
// its time. Both lines are written in one file, so they cannot disagree.
// A file of one line, the user alone, is read as well.

// encodeUser makes a user's file.
func encodeUser(u types.User) ([]byte, error) {
	head, err := json.Marshal(indexEntry(u))
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	return append(append(head, '\n'), body...), nil
}

// decodeUser reads a user file's content.
func decodeUser(path string, b []byte) (types.User, error) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	var u types.User
	if err := json.Unmarshal(b, &u); err != nil {
		return u, fmt.Errorf("read IAM user %s: %w", path, err)
	}
	return u, nil
}

// decodeIndexed reads what the start indexes from a user file's content.
func decodeIndexed(b []byte, e *indexed) error {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return json.Unmarshal(b, e)
}

// readFile is os.ReadFile in fewer system calls (open, read to the end,
// close; no fstat, no poller): the start reads every user's file, and
// system calls were most of what was not decoding. buf is reused.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(cap(buf), 4096))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// load reads the user; ok is false when the file is gone (the user was
// deleted).
func (f *userFile) load() (u types.User, ok bool, err error) {
	recordReads.Add(1)
	b, err := os.ReadFile(f.path())
	if errors.Is(err, fs.ErrNotExist) {
		return u, false, nil
	}
	if err != nil {
		return u, false, fmt.Errorf("read IAM user: %w", err)
	}
	u, err = decodeUser(f.path(), b)
	return u, err == nil, err
}

// lookup loads the user named name (case-insensitively).
func (f *userFile) lookup(name string) (types.User, error) {
	u, ok, err := f.load()
	if err != nil {
		return u, err
	}
	if !ok || !strings.EqualFold(u.UserName, name) {
		return u, iamerr.NoSuchEntityUser(name)
	}
	return u, nil
}

// update applies change to the user named name and writes it back.
func (f *userFile) update(name string, change func(*types.User) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, err := f.lookup(name)
	if err != nil {
		return err
	}
	if err := change(&u); err != nil {
		return err
	}
	return f.write(u)
}

func (f *userFile) write(u types.User) error {
	b, err := encodeUser(u)
	if err != nil {
		return fmt.Errorf("encode IAM user %q: %w", u.UserName, err)
	}
	return writeAtomic(f.path(), b)
}

// writeAtomic replaces path's content with b: written to path+".tmp",
// which is then renamed over path. One file written, one rename.
func writeAtomic(path string, b []byte) error {
	tmp := path + tmpSuffix
	t, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write IAM user: %w", err)
	}
	if killWrite != nil {
		if keep, kill := killWrite(b); kill {
			_, _ = t.Write(b[:keep])
			_ = t.Close()
			return errKilled
		}
	}
	_, err = t.Write(b)
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write IAM user: %w", err)
	}
	return nil
}

// create writes the user's file; the user id is the file's name, so an
// existing file is a user id taken.
func (f *userFile) create(user types.User) (*types.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Lstat(f.path()); err == nil {
		return nil, storage.ErrUserIDAlreadyExists
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("create IAM user %q: %w", user.UserName, err)
	}
	if err := f.write(user); err != nil {
		return nil, err
	}
	return cloneUser(user), nil
}

// CreateUser is refused: a userFile is made for its user by
// userStore.CreateUser (create).
func (f *userFile) CreateUser(_ context.Context, user types.User) (*types.User, error) {
	return nil, iamerr.EntityAlreadyExistsUser(user.UserName)
}

func (f *userFile) DeleteUser(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, err := f.lookup(name)
	if err != nil {
		return err
	}
	if len(u.Policies.Inline) > 0 {
		return iamerr.GetAPIError(iamerr.ErrDeleteConflictPolicies)
	}
	if len(u.AccessKeys) > 0 {
		return iamerr.GetAPIError(iamerr.ErrDeleteConflict)
	}
	if err := os.Remove(f.path()); err != nil {
		return fmt.Errorf("delete IAM user %q: %w", u.UserName, err)
	}
	return nil
}

func (f *userFile) GetUser(_ context.Context, name string) (*types.User, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return cloneUser(u), nil
}

// key loads the user and the index of its key id.
func (f *userFile) key(id string) (types.User, int, error) {
	u, ok, err := f.load()
	if err != nil {
		return u, -1, err
	}
	i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == id })
	if !ok || i < 0 {
		return u, -1, iamerr.NoSuchEntityAccessKey(id)
	}
	return u, i, nil
}

func (f *userFile) GetUserByAccessKeyID(_ context.Context, id string) (*types.User, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, _, err := f.key(id)
	if err != nil {
		return nil, err
	}
	return cloneUser(u), nil
}

// UpdateUser changes the path, name or ARN; userStore has checked that a
// new name is free (a name is unique across users).
func (f *userFile) UpdateUser(_ context.Context, input storage.UpdateUserInput) (*types.User, error) {
	var updated types.User
	err := f.update(input.UserName, func(u *types.User) error {
		if input.NewPath != "" {
			u.Path = input.NewPath
		}
		if input.NewUserName != "" {
			u.UserName = input.NewUserName
		}
		if input.NewArn != "" {
			u.Arn = input.NewArn
		}
		updated = *u
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cloneUser(updated), nil
}

func (f *userFile) TagUser(_ context.Context, name string, tags []types.Tag) error {
	return f.update(name, func(u *types.User) error {
		merged, err := mergeTags(u.Tags, tags)
		if err != nil {
			return err
		}
		u.Tags = merged
		return nil
	})
}

func (f *userFile) UntagUser(_ context.Context, name string, keys []string) error {
	return f.update(name, func(u *types.User) error {
		u.Tags = slices.DeleteFunc(slices.Clone(u.Tags), func(tag types.Tag) bool {
			return slices.ContainsFunc(keys, func(key string) bool { return strings.EqualFold(key, tag.Key) })
		})
		return nil
	})
}

func (f *userFile) ListUserTags(_ context.Context, input storage.ListUserTagsInput) (*storage.ListTagsOutput, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, err := f.lookup(input.UserName)
	if err != nil {
		return nil, err
	}
	// Sorted by key, the marker found case-insensitively, as versitygw's
	// paginateTags does.
	tags := slices.Clone(u.Tags)
	slices.SortFunc(tags, func(a, b types.Tag) int { return strings.Compare(a.Key, b.Key) })
	if input.Marker != "" {
		start := len(tags)
		if i := slices.IndexFunc(tags, func(t types.Tag) bool { return strings.EqualFold(t.Key, input.Marker) }); i >= 0 {
			start = i + 1
		}
		tags = tags[start:]
	}
	tags, more := window(tags, input.MaxItems)
	out := &storage.ListTagsOutput{Tags: tags}
	if more {
		out.IsTruncated, out.Marker = true, tags[len(tags)-1].Key
	}
	return out, nil
}

// window cuts items to maxItems (none: all) and says whether it did.
func window[T any](items []T, maxItems int32) ([]T, bool) {
	if maxItems > 0 && int(maxItems) < len(items) {
		return items[:maxItems:maxItems], true
	}
	return items, false
}

// mergeTags is versitygw's: an incoming tag replaces the one whose key
// matches case-insensitively (in its place), the others are appended,
// and the total is capped.
func mergeTags(existing, incoming []types.Tag) ([]types.Tag, error) {
	merged := slices.Clone(existing)
	for _, tag := range incoming {
		if i := slices.IndexFunc(merged, func(t types.Tag) bool { return strings.EqualFold(t.Key, tag.Key) }); i >= 0 {
			merged[i] = tag
			continue
		}
		if len(merged) >= storage.MaxTagsPerResource {
			return nil, iamerr.GetAPIError(iamerr.ErrTagLimitExceeded)
		}
		merged = append(merged, tag)
	}
	return merged, nil
}

func (f *userFile) CreateAccessKey(_ context.Context, input storage.CreateAccessKeyInput) (*types.AccessKey, error) {
	var created types.AccessKey
	err := f.update(input.UserName, func(u *types.User) error {
		if len(u.AccessKeys) >= storage.MaxAccessKeysPerUser {
			return iamerr.AccessKeysLimitExceeded(storage.MaxAccessKeysPerUser)
		}
		if slices.ContainsFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == input.AccessKeyID }) {
			return storage.ErrAccessKeyIDAlreadyExists
		}
		u.AccessKeys = append(u.AccessKeys, types.AccessKeyEntry{
			AccessKeyId:     input.AccessKeyID,
			SecretAccessKey: input.SecretAccessKey,
			Status:          input.Status,
			CreateDate:      input.CreateDate,
		})
		created = types.AccessKey{
			UserName:        u.UserName,
			AccessKeyId:     input.AccessKeyID,
			Status:          input.Status,
			SecretAccessKey: input.SecretAccessKey,
			CreateDate:      input.CreateDate,
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &created, nil
}

func (f *userFile) UpdateAccessKey(_ context.Context, input storage.UpdateAccessKeyInput) error {
	return f.update(input.UserName, func(u *types.User) error {
		i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == input.AccessKeyID })
		if i < 0 {
			return iamerr.NoSuchEntityAccessKey(input.AccessKeyID)
		}
		u.AccessKeys[i].Status = input.Status
		return nil
	})
}

func (f *userFile) DeleteAccessKey(_ context.Context, name, id string) error {
	return f.update(name, func(u *types.User) error {
		i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == id })
		if i < 0 {
			return iamerr.NoSuchEntityAccessKey(id)
		}
		u.AccessKeys = slices.Delete(u.AccessKeys, i, i+1)
		return nil
	})
}

func (f *userFile) GetAccessKeyLastUsed(_ context.Context, id string) (*storage.GetAccessKeyLastUsedOutput, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, i, err := f.key(id)
	if err != nil {
		return nil, err
	}
	k := u.AccessKeys[i]
	return &storage.GetAccessKeyLastUsedOutput{
		UserName: u.UserName, LastUsedDate: k.LastUsedDate, ServiceName: k.LastUsedService, Region: k.LastUsedRegion,
	}, nil
}

func (f *userFile) ListAccessKeys(_ context.Context, input storage.ListAccessKeysInput) (*storage.ListAccessKeysOutput, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, err := f.lookup(input.UserName)
	if err != nil {
		return nil, err
	}
	keys := make([]types.AccessKeyMetadata, 0, len(u.AccessKeys))
	for _, k := range u.AccessKeys {
		keys = append(keys, types.AccessKeyMetadata{UserName: u.UserName, AccessKeyId: k.AccessKeyId, Status: k.Status, CreateDate: k.CreateDate})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].AccessKeyId < keys[j].AccessKeyId })
	if input.Marker != "" {
		start := len(keys)
		if i := slices.IndexFunc(keys, func(k types.AccessKeyMetadata) bool { return k.AccessKeyId == input.Marker }); i >= 0 {
			start = i + 1
		}
		keys = keys[start:]
	}
	keys, more := window(keys, input.MaxItems)
	out := &storage.ListAccessKeysOutput{AccessKeys: keys}
	if more {
		out.IsTruncated, out.Marker = true, keys[len(keys)-1].AccessKeyId
	}
	return out, nil
}

// RecordAccessKeyUsage writes only when versitygw's store would: a use
// within a minute of the last one, from the same service and region, is
// not recorded (every S3 request records one).
func (f *userFile) RecordAccessKeyUsage(_ context.Context, id, service, region string, when time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, i, err := f.key(id)
	if err != nil {
		return err
	}
	k := &u.AccessKeys[i]
	if !k.LastUsedDate.IsZero() && k.LastUsedService == service && k.LastUsedRegion == region &&
		when.Sub(k.LastUsedDate) < storage.UsageRecordCoalesceWindow {
		return nil
	}
	k.LastUsedDate, k.LastUsedService, k.LastUsedRegion = when, service, region
	return f.write(u)
}

func (f *userFile) PutUserPolicy(_ context.Context, input storage.PutUserPolicyInput) error {
	return f.update(input.UserName, func(u *types.User) error {
		now := time.Now().UTC().Truncate(time.Second)
		total, at := len(input.PolicyDocument), -1
		for i, p := range u.Policies.Inline {
			if p.PolicyName == input.PolicyName {
				at = i
				continue
			}
			total += len(p.PolicyDocument)
		}
		if total > storage.MaxInlinePolicyBytesPerUser {
			return iamerr.InlinePolicyQuotaExceeded("user", input.UserName, storage.MaxInlinePolicyBytesPerUser)
		}
		if at >= 0 {
			u.Policies.Inline[at].PolicyDocument = input.PolicyDocument
			u.Policies.Inline[at].UpdateDate = now
			return nil
		}
		u.Policies.Inline = append(u.Policies.Inline, types.PolicyEntry{
			PolicyName: input.PolicyName, PolicyDocument: input.PolicyDocument, CreateDate: now, UpdateDate: now,
		})
		return nil
	})
}

func (f *userFile) GetUserPolicy(_ context.Context, name, policy string) (*types.PolicyEntry, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	for _, p := range u.Policies.Inline {
		if p.PolicyName == policy {
			return &p, nil
		}
	}
	return nil, iamerr.NoSuchEntityUserPolicy(name, policy)
}

func (f *userFile) DeleteUserPolicy(_ context.Context, name, policy string) error {
	return f.update(name, func(u *types.User) error {
		i := slices.IndexFunc(u.Policies.Inline, func(p types.PolicyEntry) bool { return p.PolicyName == policy })
		if i < 0 {
			return iamerr.NoSuchEntityUserPolicy(name, policy)
		}
		u.Policies.Inline = slices.Delete(u.Policies.Inline, i, i+1)
		return nil
	})
}

func (f *userFile) ListUserPolicies(_ context.Context, input storage.ListUserPoliciesInput) (*storage.ListUserPoliciesOutput, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, err := f.lookup(input.UserName)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(u.Policies.Inline))
	for _, p := range u.Policies.Inline {
		names = append(names, p.PolicyName)
	}
	sort.Strings(names)
	if input.Marker != "" {
		start := len(names)
		if i := slices.Index(names, input.Marker); i >= 0 {
			start = i + 1
		}
		names = names[start:]
	}
	names, more := window(names, input.MaxItems)
	out := &storage.ListUserPoliciesOutput{PolicyNames: names}
	if more {
		out.IsTruncated, out.Marker = true, names[len(names)-1]
	}
	return out, nil
}

func cloneUser(u types.User) *types.User {
	u.Tags = slices.Clone(u.Tags)
	u.AccessKeys = slices.Clone(u.AccessKeys)
	u.Policies.Inline = slices.Clone(u.Policies.Inline)
	return &u
}
