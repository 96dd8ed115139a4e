package s3gateway

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/versity/versitygw/iamapi/iamerr"
	"github.com/versity/versitygw/iamapi/storage"
	"github.com/versity/versitygw/iamapi/types"
)

// The calls on one user's tags, keys and policies. Each is versitygw
// v1.8.0's storage.InternalStore's for one user (its limits, errors and
// orders), with the user looked up by name case-insensitively as there:
// a read decodes the user's row, a change rewrites it in one transaction
// (userStore.update).

func (s *userStore) TagUser(ctx context.Context, name string, tags []types.Tag) error {
	return s.update(ctx, name, func(u *types.User) error {
		merged, err := mergeTags(u.Tags, tags)
		if err != nil {
			return err
		}
		u.Tags = merged
		return nil
	})
}

func (s *userStore) UntagUser(ctx context.Context, name string, keys []string) error {
	return s.update(ctx, name, func(u *types.User) error {
		u.Tags = slices.DeleteFunc(slices.Clone(u.Tags), func(tag types.Tag) bool {
			return slices.ContainsFunc(keys, func(key string) bool { return strings.EqualFold(key, tag.Key) })
		})
		return nil
	})
}

func (s *userStore) ListUserTags(ctx context.Context, input storage.ListUserTagsInput) (*storage.ListTagsOutput, error) {
	_, u, err := lookup(ctx, s.readers, input.UserName)
	if err != nil {
		return nil, err
	}
	// Sorted by key, the marker found case-insensitively, as versitygw's
	// paginateTags does.
	tags := slices.Clone(u.Tags)
	slices.SortFunc(tags, func(a, b types.Tag) int { return strings.Compare(a.Key, b.Key) })
	tags, next, more := pageAfter(tags, input.Marker, input.MaxItems, func(t types.Tag) string { return t.Key }, strings.EqualFold)
	return &storage.ListTagsOutput{Tags: tags, IsTruncated: more, Marker: next}, nil
}

// pageAfter returns the page of items (sorted by key) that follows the
// item whose key matches marker (none: from the start; an unknown marker:
// an empty page, as versitygw's paginations do), cut to maxItems, and the
// marker of the next page, if there is one (more).
func pageAfter[T any](items []T, marker string, maxItems int32, key func(T) string, match func(a, b string) bool) (_ []T, next string, more bool) {
	if marker != "" {
		start := len(items)
		if i := slices.IndexFunc(items, func(t T) bool { return match(key(t), marker) }); i >= 0 {
			start = i + 1
		}
		items = items[start:]
	}
	items, more = window(items, maxItems)
	if !more {
		return items, "", false
	}
	return items, key(items[len(items)-1]), true
}

func same(a, b string) bool { return a == b }

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

func (s *userStore) CreateAccessKey(ctx context.Context, input storage.CreateAccessKeyInput) (*types.AccessKey, error) {
	var created types.AccessKey
	err := s.update(ctx, input.UserName, func(u *types.User) error {
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

func (s *userStore) UpdateAccessKey(ctx context.Context, input storage.UpdateAccessKeyInput) error {
	return s.update(ctx, input.UserName, func(u *types.User) error {
		i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == input.AccessKeyID })
		if i < 0 {
			return iamerr.NoSuchEntityAccessKey(input.AccessKeyID)
		}
		u.AccessKeys[i].Status = input.Status
		return nil
	})
}

func (s *userStore) DeleteAccessKey(ctx context.Context, name, id string) error {
	return s.update(ctx, name, func(u *types.User) error {
		i := slices.IndexFunc(u.AccessKeys, func(k types.AccessKeyEntry) bool { return k.AccessKeyId == id })
		if i < 0 {
			return iamerr.NoSuchEntityAccessKey(id)
		}
		u.AccessKeys = slices.Delete(u.AccessKeys, i, i+1)
		return nil
	})
}

func (s *userStore) GetAccessKeyLastUsed(ctx context.Context, id string) (*storage.GetAccessKeyLastUsedOutput, error) {
	_, u, i, err := lookupKey(ctx, s.readers, id)
	if err != nil {
		return nil, err
	}
	k := u.AccessKeys[i]
	return &storage.GetAccessKeyLastUsedOutput{
		UserName: u.UserName, LastUsedDate: k.LastUsedDate, ServiceName: k.LastUsedService, Region: k.LastUsedRegion,
	}, nil
}

func (s *userStore) ListAccessKeys(ctx context.Context, input storage.ListAccessKeysInput) (*storage.ListAccessKeysOutput, error) {
	_, u, err := lookup(ctx, s.readers, input.UserName)
	if err != nil {
		return nil, err
	}
	keys := make([]types.AccessKeyMetadata, 0, len(u.AccessKeys))
	for _, k := range u.AccessKeys {
		keys = append(keys, types.AccessKeyMetadata{UserName: u.UserName, AccessKeyId: k.AccessKeyId, Status: k.Status, CreateDate: k.CreateDate})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].AccessKeyId < keys[j].AccessKeyId })
	keys, next, more := pageAfter(keys, input.Marker, input.MaxItems, func(k types.AccessKeyMetadata) string { return k.AccessKeyId }, same)
	return &storage.ListAccessKeysOutput{AccessKeys: keys, IsTruncated: more, Marker: next}, nil
}

// RecordAccessKeyUsage writes only when versitygw's store would: a use
// within a minute of the last one, from the same service and region, is
// not recorded. Every S3 request records one: the check is a read, and
// only a use that is recorded is a write (a transaction that checks
// again).
func (s *userStore) RecordAccessKeyUsage(ctx context.Context, id, service, region string, when time.Time) error {
	_, u, i, err := lookupKey(ctx, s.readers, id)
	if err != nil {
		return err
	}
	if !recordable(u.AccessKeys[i], service, region, when) {
		return nil
	}
	err = s.updateKey(ctx, id, func(u *types.User, i int) error {
		k := &u.AccessKeys[i]
		if !recordable(*k, service, region, when) {
			return errNothingToRecord
		}
		k.LastUsedDate, k.LastUsedService, k.LastUsedRegion = when, service, region
		return nil
	})
	if errors.Is(err, errNothingToRecord) {
		return nil
	}
	return err
}

// errNothingToRecord ends a transaction that finds the use recorded
// since its read: nothing is written, nothing is reported.
var errNothingToRecord = errors.New("use recorded already")

// recordable says whether a use of key is to be recorded.
func recordable(k types.AccessKeyEntry, service, region string, when time.Time) bool {
	return k.LastUsedDate.IsZero() || k.LastUsedService != service || k.LastUsedRegion != region ||
		when.Sub(k.LastUsedDate) >= storage.UsageRecordCoalesceWindow
}

func (s *userStore) PutUserPolicy(ctx context.Context, input storage.PutUserPolicyInput) error {
	return s.update(ctx, input.UserName, func(u *types.User) error {
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

func (s *userStore) GetUserPolicy(ctx context.Context, name, policy string) (*types.PolicyEntry, error) {
	_, u, err := lookup(ctx, s.readers, name)
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

func (s *userStore) DeleteUserPolicy(ctx context.Context, name, policy string) error {
	return s.update(ctx, name, func(u *types.User) error {
		i := slices.IndexFunc(u.Policies.Inline, func(p types.PolicyEntry) bool { return p.PolicyName == policy })
		if i < 0 {
			return iamerr.NoSuchEntityUserPolicy(name, policy)
		}
		u.Policies.Inline = slices.Delete(u.Policies.Inline, i, i+1)
		return nil
	})
}

func (s *userStore) ListUserPolicies(ctx context.Context, input storage.ListUserPoliciesInput) (*storage.ListUserPoliciesOutput, error) {
	_, u, err := lookup(ctx, s.readers, input.UserName)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(u.Policies.Inline))
	for _, p := range u.Policies.Inline {
		names = append(names, p.PolicyName)
	}
	sort.Strings(names)
	names, next, more := pageAfter(names, input.Marker, input.MaxItems, func(n string) string { return n }, same)
	return &storage.ListUserPoliciesOutput{PolicyNames: names, IsTruncated: more, Marker: next}, nil
}
