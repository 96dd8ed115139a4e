package s3gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/s3response"
	"golang.org/x/sys/unix"
)

// keyXattr names the extended attribute in which the embedded server
// writes, on the folder that holds the older versions of an object, that
// object's key. versitygw names the folder after the SHA-256 of the key
// only, so without it a version whose object is gone cannot be put back.
const keyXattr = "user.bucketbroker.key"

// versionDir is the folder in which versitygw's posix backend keeps the
// older versions of key in bucket (its genObjVersionKey: the hex SHA-256
// of the key, under three levels named after its first six digits).
func versionDir(versionsDir, bucket, key string) string {
	sum := keyHash(key)
	return filepath.Join(versionsDir, bucket, sum[:2], sum[2:4], sum[4:6], sum)
}

func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// keyRecorder is versitygw's posix backend, but a deletion of a given
// version first writes the object's key on the folder of its versions
// (recordKey). Deleting the current version makes versitygw remove the
// object's file and then move the newest older version into its place;
// a kill in between leaves that version in the versions folder with no
// object, where no listing shows it and no deletion reaches it, and the
// recorded key lets the next start finish the move (restoreVersion).
type keyRecorder struct {
	*posix.Posix
	versionsDir string
}

// bucketListings counts the ListBuckets the gateway served in this
// process, for the tests: versitygw's posix backend reads and lstats every
// bucket directory for each (0.3 s of CPU at 100,000 buckets), so the
// start must not ask for one.
var bucketListings atomic.Int64

// ListBuckets implements backend.Backend.
func (k keyRecorder) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	bucketListings.Add(1)
	return k.Posix.ListBuckets(ctx, in)
}

// DeleteObject implements backend.Backend.
func (k keyRecorder) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	if in.Bucket != nil && in.Key != nil && in.VersionId != nil && *in.VersionId != "" {
		if err := recordKey(k.versionsDir, *in.Bucket, *in.Key); err != nil {
			return nil, err
		}
	}
	return k.Posix.DeleteObject(ctx, in)
}

// DeleteObjects implements backend.Backend: versitygw's deletes each
// object with its own DeleteObject, which does not record keys.
func (k keyRecorder) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	if in.Bucket != nil && in.Delete != nil {
		for _, o := range in.Delete.Objects {
			if o.Key == nil || o.VersionId == nil || *o.VersionId == "" {
				continue
			}
			if err := recordKey(k.versionsDir, *in.Bucket, *o.Key); err != nil {
				return s3response.DeleteResult{}, err
			}
		}
	}
	return k.Posix.DeleteObjects(ctx, in)
}

// recordKey writes key on the folder of its versions in bucket, unless it
// is there already. Without that folder the object has no older version
// to move into its place, and nothing is written. A bucket name that is
// not one plain path element is left to versitygw to refuse.
func recordKey(versionsDir, bucket, key string) error {
	if bucket == "" || strings.HasPrefix(bucket, ".") || strings.ContainsRune(bucket, filepath.Separator) {
		return nil
	}
	dir := versionDir(versionsDir, bucket, key)
	buf := make([]byte, len(key))
	n, err := unix.Getxattr(dir, keyXattr, buf)
	switch {
	case err == nil && n == len(key) && string(buf[:n]) == key:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil
	case err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ERANGE):
		return fmt.Errorf("record the key of the versions in %s: %w", dir, err)
	}
	if err := unix.Setxattr(dir, keyXattr, []byte(key), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("record the key of the versions in %s: %w", dir, err)
	}
	return nil
}

// restoreVersion finishes the deletion of a current version that a kill
// interrupted after versitygw removed the object's file and before it
// moved the newest older version into its place. dir is a folder of
// versions of the bucket whose folder is bucketDir, entries what it
// holds, and buf a buffer for the key recorded on it. When dir holds
// versions and a recorded key whose object does not exist, the newest
// version (the last by name, the one versitygw picks) is moved to the
// object's path, where it is the current version again, listed, readable
// and deletable, exactly as if the deletion had completed; moved says so.
// Nothing is deleted. A folder without a recorded key (a deletion this
// server did not record, or no deletion at all) is left alone.
func restoreVersion(bucketDir, dir string, entries []os.DirEntry, buf []byte, log *slog.Logger) (moved bool, err error) {
	var newest string
	for _, e := range entries {
		if !e.IsDir() {
			newest = e.Name() // ReadDir sorts by name
		}
	}
	if newest == "" {
		return false, nil // empty: prune's business
	}
	n, err := unix.Getxattr(dir, keyXattr, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Getxattr(dir, keyXattr, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Getxattr(dir, keyXattr, buf)
		}
	}
	if errors.Is(err, unix.ENODATA) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the key of the versions in %s: %w", dir, err)
	}
	key := string(buf[:n])
	bucket := filepath.Base(bucketDir)
	if keyHash(key) != filepath.Base(dir) {
		log.Warn("Versions whose folder carries a key that is not theirs: left as they are",
			"bucket", bucket, "dir", dir, "key", key)
		return false, nil
	}
	object := filepath.Join(bucketDir, key)
	_, err = os.Lstat(object)
	if err == nil {
		return false, nil // the object is there: nothing was interrupted
	}
	if !errors.Is(err, fs.ErrNotExist) {
		log.Warn("Versions of an object that cannot be read: left as they are", "bucket", bucket, "key", key, "error", err)
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(object), 0o755); err != nil {
		log.Warn("Versions of a deleted object cannot be put back: left as they are", "bucket", bucket, "key", key, "error", err)
		return false, nil
	}
	// The same inode, with the version's data and attributes (its
	// version ID, ETag, a delete marker's mark): what versitygw's copy
	// would have made, in one atomic step.
	if err := os.Rename(filepath.Join(dir, newest), object); err != nil {
		log.Warn("Versions of a deleted object cannot be put back: left as they are", "bucket", bucket, "key", key, "error", err)
		return false, nil
	}
	log.Info("Made the newest version current again after a killed deletion of its object's current version",
		"bucket", bucket, "key", key, "version", newest)
	return true, nil
}
