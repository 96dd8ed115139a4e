package s3gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// bucketACLXattr is the extended attribute in which versitygw's posix
// backend keeps a bucket's ACL (meta.XattrMeta's "user." prefix and the
// backend's "acl" key). A bucket directory has it from the moment
// CreateBucket succeeds.
const bucketACLXattr = "user.acl"

// removeHalfCreatedBuckets removes the bucket directories under objectsDir
// that have no ACL and are empty. versitygw's CreateBucket makes the
// directory first and then stores its ACL; it undoes the directory when a
// later step fails, but a process killed in between leaves a directory
// that is not a bucket, and every request for that name, a CreateBucket
// retry included, then fails with "get bucket acl: no such key" (500) for
// ever. Such a CreateBucket never answered success, so the directory was
// never anyone's bucket; without an ACL no object could be written in it.
// A directory without an ACL that is not empty is left alone, with a
// warning.
func removeHalfCreatedBuckets(objectsDir string, log *slog.Logger) error {
	entries, err := os.ReadDir(objectsDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue // versitygw's own (temporary uploads and the like)
		}
		dir := filepath.Join(objectsDir, e.Name())
		_, err := unix.Getxattr(dir, bucketACLXattr, nil)
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("read the ACL of bucket %s: %w", e.Name(), err)
		}
		if err := os.Remove(dir); err != nil { // only an empty directory
			log.Warn("Bucket directory without an ACL is not empty: left as it is, requests for it fail until it is repaired by hand",
				"bucket", e.Name(), "dir", dir, "error", err)
			continue
		}
		log.Info("Removed a bucket directory a killed CreateBucket left without an ACL", "bucket", e.Name())
	}
	return nil
}
