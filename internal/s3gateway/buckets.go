package s3gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

const (
	// bucketACLXattr is the extended attribute in which versitygw's posix
	// backend keeps a bucket's ACL (meta.XattrMeta's "user." prefix and
	// the backend's "acl" key). A bucket directory has it from the moment
	// CreateBucket succeeds.
	bucketACLXattr = "user.acl"
	// objectETagXattr marks a directory that is an object of its own, put
	// with a key ending in "/" (the backend's "etag" key). Directories
	// without it only hold the objects whose keys pass through them.
	objectETagXattr = "user.etag"
	// tmpDir is versitygw's folder for uploads in progress at the top of
	// each bucket (posix.MetaTmpDir); DeleteBucket ignores it.
	tmpDir = ".sgwtmp"
)

// repair undoes, before the server starts, what a process killed inside
// versitygw can leave in the data directory and what versitygw does not
// repair itself (a start after a clean stop has nothing to repair and
// does not call it: cleanstop.go): the bucket of a killed CreateBucket
// (removeHalfCreatedBuckets), and in each bucket the versions of an
// object whose current version a killed deletion removed without moving
// the next one into its place (restoreVersion) and the directories of a
// killed object deletion (repairBuckets).
//
// Buckets are repaired on every core at once (each bucket's repair is its
// own), and the objects folder and the versions folder are each listed
// once: a broker has a bucket per instance, most of them empty, and at
// 20,000 instances this walk had become most of a restart's CPU
// (BenchmarkRepairEmptyBuckets).
func repair(objectsDir, versionsDir string, log *slog.Logger) error {
	repairRuns.Add(1)
	entries, err := os.ReadDir(objectsDir)
	if err != nil {
		return err
	}
	var buckets []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") { // not versitygw's own (temporary uploads and the like)
			buckets = append(buckets, e.Name())
		}
	}
	versioned := map[string]bool{}
	vers, err := os.ReadDir(versionsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range vers {
		versioned[e.Name()] = true
	}
	return eachFile(len(buckets), func(i int) error {
		return repairOne(objectsDir, versionsDir, buckets[i], versioned[buckets[i]], log)
	})
}

// repairNamed repairs the buckets named, as repair does every bucket: a
// start after a kill repairs those of the calls it interrupted
// (inflight.go). A name with no directory in objectsDir (a CreateBucket
// killed before its mkdir, a DeleteBucket that removed it) has nothing to
// repair.
func repairNamed(objectsDir, versionsDir string, buckets []string, log *slog.Logger) error {
	bucketRepairs.Add(int64(len(buckets)))
	return eachFile(len(buckets), func(i int) error {
		fi, err := os.Lstat(filepath.Join(objectsDir, buckets[i]))
		if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = os.Lstat(filepath.Join(versionsDir, buckets[i]))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return repairOne(objectsDir, versionsDir, buckets[i], err == nil, log)
	})
}

// repairOne removes bucket if a killed CreateBucket left it half made,
// or else repairs what is in it; versioned says it has a versions folder.
func repairOne(objectsDir, versionsDir, bucket string, versioned bool, log *slog.Logger) error {
	removed, err := removeHalfCreatedBucket(objectsDir, bucket, log)
	if err != nil || removed {
		return err
	}
	return repairBucket(objectsDir, versionsDir, bucket, versioned, log)
}

// removeHalfCreatedBucket removes the bucket directory under objectsDir
// if it has no ACL and is empty, and says whether it did. versitygw's CreateBucket makes the
// directory first and then stores its ACL; it undoes the directory when a
// later step fails, but a process killed in between leaves a directory
// that is not a bucket, and every request for that name, a CreateBucket
// retry included, then fails with "get bucket acl: no such key" (500) for
// ever. Such a CreateBucket never answered success, so the directory was
// never anyone's bucket; without an ACL no object could be written in it.
// A directory without an ACL that is not empty is left alone, with a
// warning.
func removeHalfCreatedBucket(objectsDir, bucket string, log *slog.Logger) (bool, error) {
	dir := filepath.Join(objectsDir, bucket)
	_, err := unix.Getxattr(dir, bucketACLXattr, nil)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, unix.ENODATA) {
		return false, fmt.Errorf("read the ACL of bucket %s: %w", bucket, err)
	}
	if err := os.Remove(dir); err != nil { // only an empty directory
		log.Warn("Bucket directory without an ACL is not empty: left as it is, requests for it fail until it is repaired by hand",
			"bucket", bucket, "dir", dir, "error", err)
		return false, nil
	}
	log.Info("Removed a bucket directory a killed CreateBucket left without an ACL", "bucket", bucket)
	return true, nil
}

// repairBucket puts back, in a bucket, the versions of an object
// whose current version a killed deletion removed (restoreVersion, as it
// walks the bucket's versions folder), then removes the empty
// directories that no object needs. versitygw keeps a key with "/" in it
// as nested directories (a/b/c is the file c in a/b) and, when it
// deletes an object, removes the file and then each parent directory
// left empty. A process killed in between leaves empty directories that
// no listing shows and that DeleteBucket counts as content: the bucket
// answers BucketNotEmpty to every deletion, and a purge, which deletes
// what it lists, can never empty it. The same holds in the versions
// folder, where each version sits in directories named after the hash of
// its key. While the server is down nothing else writes, so every empty
// directory found now is such a leftover, except a directory object (a
// key ending in "/", which carries an ETag) and versitygw's own tmpDir. A
// directory that is removed may leave its parent empty: the walk goes
// depth first and removes the parent too. The versions folder goes
// first: a version put back needs the directories of its key. The walk
// reads every directory of every bucket: its cost grows with the number
// of objects and versions, not only with the leftovers. versioned says
// the bucket has a versions folder.
func repairBucket(objectsDir, versionsDir, bucket string, versioned bool, log *slog.Logger) error {
	bucketDir := filepath.Join(objectsDir, bucket)
	removed := 0
	if versioned {
		buf := make([]byte, 4<<10) // a recorded key (S3 keys: 1,024 bytes at most)
		restore := func(dir string, entries []os.DirEntry) (bool, error) {
			return restoreVersion(bucketDir, dir, entries, buf, log)
		}
		n, err := pruneBucket(filepath.Join(versionsDir, bucket), false, restore)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("versions of bucket %s: %w", bucket, err)
		}
		removed += n
	}
	if !hasSubdirs(bucketDir) {
		// Nothing to prune: only directories are, and the objects at
		// the top (files) are not walked.
		if removed > 0 {
			log.Info("Removed empty directories a killed object deletion left in a bucket", "bucket", bucket, "directories", removed)
		}
		return nil
	}
	n, err := pruneBucket(bucketDir, true, nil)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	if removed += n; removed > 0 {
		log.Info("Removed empty directories a killed object deletion left in a bucket", "bucket", bucket, "directories", removed)
	}
	return nil
}

// restorer is called by prune on each folder of versions, with what it
// holds, before prune decides whether it is empty; moved says it moved
// one of the entries out.
type restorer func(dir string, entries []os.DirEntry) (moved bool, err error)

// versionDepth is how deep below a bucket's versions folder the folders
// of versions lie (versionDir: three levels, then the folder).
const versionDepth = 4

// pruneBucket removes the empty directories below root, the bucket's own
// folder or its versions folder, except root itself and its tmpDir. In
// the objects folder (objects true) a directory that is an object stays.
// restore, when not nil, is called on each folder of versions first.
func pruneBucket(root string, objects bool, restore restorer) (int, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == tmpDir {
			continue
		}
		n, _, err := prune(filepath.Join(root, e.Name()), objects, 1, restore)
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// prune removes the empty directories in dir, depth levels below the
// bucket's folder, and dir itself when that leaves it empty and it is
// not an object; it returns how many it removed and whether dir is gone.
func prune(dir string, objects bool, depth int, restore restorer) (int, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, false, err
	}
	removed, left := 0, len(entries)
	if restore != nil && depth == versionDepth {
		moved, err := restore(dir, entries)
		if err != nil {
			return 0, false, err
		}
		if moved {
			left--
		}
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n, gone, err := prune(filepath.Join(dir, e.Name()), objects, depth+1, restore)
		removed += n
		if err != nil {
			return removed, false, err
		}
		if gone {
			left--
		}
	}
	if left > 0 {
		return removed, false, nil
	}
	if objects {
		_, err := unix.Getxattr(dir, objectETagXattr, nil)
		if err == nil {
			return removed, false, nil // a directory object
		}
		if !errors.Is(err, unix.ENODATA) {
			return removed, false, fmt.Errorf("read the ETag of %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil {
		return removed, false, err
	}
	return removed + 1, true, nil
}

// hasSubdirs reports whether dir may hold directories, from its link
// count (one stat instead of reading it): a directory has two links and
// one more per subdirectory on ext4, xfs and tmpfs. A file system that
// does not count them (btrfs reports 1, as ext4 does past 65,000
// subdirectories) or a failed stat answers true: dir is read.
func hasSubdirs(dir string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return true
	}
	return st.Nlink != 2
}

// eachFile calls f(0..n-1) on as many goroutines as there are cores (the
// repair's buckets) and returns the first error. The goroutines take the
// next i as they finish one: a goroutine per call would grow its stack
// anew each time.
func eachFile(n int, f func(i int) error) error {
	var (
		g    errgroup.Group
		next atomic.Int64
	)
	for range min(n, runtime.GOMAXPROCS(0)) {
		g.Go(func() error {
			var first error
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil && first == nil {
					first = err
				}
			}
			return first
		})
	}
	return g.Wait()
}
