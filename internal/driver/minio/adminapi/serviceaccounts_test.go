package adminapi

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestServerServiceAccounts: a user's service accounts are keys with the
// user's rights, listed under it, deleted one at a time (a missing one is
// ErrNoSuchServiceAccount) and all at once with the user.
func TestServerServiceAccounts(t *testing.T) {
	cfg := liveConfig(t)
	admin := newClient(t, cfg)
	root := s3Client(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	id := randomHex(6)
	bucket, user, policy := "bbmadm-sa-"+id, "bbsa"+id, "bbpol-sa-"+id
	makeBuckets(t, root, bucket)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.RemoveUser(ctx, user); err != nil && !errors.Is(err, ErrNoSuchUser) {
			t.Errorf("cleanup: RemoveUser: %v", err)
		}
		if err := admin.RemoveCannedPolicy(ctx, policy); err != nil {
			t.Errorf("cleanup: RemoveCannedPolicy: %v", err)
		}
	})

	if _, err := admin.AddServiceAccount(ctx, user); !errors.Is(err, ErrNoSuchUser) {
		t.Errorf("AddServiceAccount for a missing user = %v, want ErrNoSuchUser", err)
	}
	if keys, err := admin.ServiceAccounts(ctx, user); err != nil || len(keys) != 0 {
		t.Errorf("ServiceAccounts of a missing user = %q, %v; want none", keys, err)
	}
	if err := admin.AddUser(ctx, user, randomHex(16)); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	if err := admin.AddCannedPolicy(ctx, policy, bucketPolicy(bucket)); err != nil {
		t.Fatalf("AddCannedPolicy: %v", err)
	}
	if _, err := admin.AttachPolicy(ctx, user, policy); err != nil {
		t.Fatalf("AttachPolicy: %v", err)
	}

	var made []ServiceAccount
	for range 2 {
		sa, err := admin.AddServiceAccount(ctx, user)
		if err != nil {
			t.Fatalf("AddServiceAccount: %v", err)
		}
		if code := put(t, s3Client(cfg.Endpoint, sa.AccessKey, sa.SecretKey), bucket); code != "" {
			t.Errorf("service account %s: PutObject got %q, want success (the user's rights)", sa.AccessKey, code)
		}
		made = append(made, sa)
	}
	keys, err := admin.ServiceAccounts(ctx, user)
	want := []string{made[0].AccessKey, made[1].AccessKey}
	if slices.Sort(keys); err != nil || !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
		t.Errorf("ServiceAccounts = %q, %v; want %q", keys, err, want)
	}

	for i := range 2 {
		err := admin.DeleteServiceAccount(ctx, made[0].AccessKey)
		if i == 1 && !errors.Is(err, ErrNoSuchServiceAccount) {
			t.Errorf("DeleteServiceAccount again = %v, want ErrNoSuchServiceAccount", err)
		}
		if i == 0 && err != nil {
			t.Fatalf("DeleteServiceAccount: %v", err)
		}
	}
	if code := put(t, s3Client(cfg.Endpoint, made[0].AccessKey, made[0].SecretKey), bucket); code != "InvalidAccessKeyId" {
		t.Errorf("deleted service account: PutObject got %q, want InvalidAccessKeyId", code)
	}
	if keys, err := admin.ServiceAccounts(ctx, user); err != nil || !slices.Equal(keys, []string{made[1].AccessKey}) {
		t.Errorf("ServiceAccounts after a deletion = %q, %v; want [%s]", keys, err, made[1].AccessKey)
	}

	if err := admin.RemoveUser(ctx, user); err != nil {
		t.Fatalf("RemoveUser: %v", err)
	}
	if code := put(t, s3Client(cfg.Endpoint, made[1].AccessKey, made[1].SecretKey), bucket); code != "InvalidAccessKeyId" {
		t.Errorf("service account of a removed user: PutObject got %q, want InvalidAccessKeyId", code)
	}
}
