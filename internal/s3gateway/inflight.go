package s3gateway

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/s3response"
)

// A start after a kill need not walk every bucket (buckets.go's repair):
// the damage a kill leaves is made by the calls it interrupted, and each
// of them names its bucket. The server therefore keeps, while it runs,
// the in-flight file (DataDir/in-flight): a slot per call that can leave
// what the repair undoes, written with the call's bucket before the call
// reaches versitygw and cleared when it returns. A start after a kill
// repairs the buckets its slots name, and no other.
//
// Which calls: those of versitygw's posix backend that make or remove a
// directory or a file in a bucket (backend/posix, v1.8.0): CreateBucket
// (its mkdir before the ACL), DeleteBucket (the bucket's directory
// removed), PutObject, CopyObject and CompleteMultipartUpload (the
// directories of the key made before the object is linked in; in a
// versioned bucket, the current version moved to the versions folder),
// DeleteObject and DeleteObjects (the object removed before the
// directories it leaves empty; the next version moved into place). The
// other calls set attributes (ACLs, tags, retention, versioning) in one
// setxattr, or write only in versitygw's folder of uploads (.sgwtmp),
// which the repair leaves alone. The posix backend starts no goroutine:
// what a call does is done when it returns, and the slot is cleared
// after that.
//
// A slot is one record (inFlightRecord bytes: a CRC-32C, a length, the
// payload) written by one pwrite at its own offset, within one page: a
// kill ends a write between two pages, never inside one, so a killed
// process leaves each slot as before the write or as after it, and the
// page cache keeps what it wrote for the next start to read. A crash of
// the machine does not: the slot and the directories of the call are
// written back to disk in any order, and the slot may be lost when the
// mkdir is not. An fdatasync before each call would cost a disk flush per
// request; the file instead records the boot it was written in
// (/proc/sys/kernel/random/boot_id), and a start in another boot walks
// every bucket. A clean shutdown of the machine stops the
// server first, which leaves the clean-stop marker, durably.
//
// The file is trusted only if nothing else can have written the data
// directory since the process that kept it started: it records, as the
// clean-stop marker does, the stamp of run/ taken after that process bound
// its socket there (every server start does, of any version), and the
// stamp of objects/ after the last bucket that process made or removed.
// A start finds run/ as recorded, and objects/ as recorded unless a
// CreateBucket or DeleteBucket was in flight; otherwise another server,
// an older bucketbroker or a hand ran on the data directory, and the
// start walks every bucket, with one warning (as it does for a file cut
// short, changed or of another version: a CRC per record).
//
// A start reads the file before it binds its own socket, and replaces it
// (with its own stamps and every slot clear) after the repair and before
// the S3 server serves. A kill in between leaves the old file, which
// still holds, as long as run/ is unchanged, or is stale after the bind.

// inFlightFile, in the data directory, holds the calls in flight of the
// running server (or of the last one, killed).
const inFlightFile = "in-flight"

const inFlightMagic = "bucketbroker in-flight 1\n"

const (
	// inFlightRecord is the size of each record; 4096 is a multiple,
	// so that no record straddles two pages.
	inFlightRecord = 128
	// The records: the header (magic, boot, slots, run/'s stamp), the
	// stamp of objects/, then the slots.
	headerRecord  = 0
	objectsRecord = 1
	firstSlot     = 2
	// maxSlotBucket is the longest bucket name a slot holds (S3 allows
	// 63 bytes); a longer name is recorded as unknown.
	maxSlotBucket = inFlightRecord - 4 - 1 - 1
)

// callOp is the kind of call in a slot.
type callOp byte

const (
	// opObjects writes in a bucket.
	opObjects callOp = 1 + iota
	// opBucket makes or removes the bucket's directory in objects/.
	opBucket
)

// objLockDir is versitygw's folder of object publish locks in objects/
// (posix.objLockDir), a lock file per bucket and key shard.
const objLockDir = ".vgwlocks"

// bootIDFile names the boot: a random id the kernel draws at each boot.
// A var for tests.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

// bootID is the current boot's id, or an error.
func bootID() ([]byte, error) {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return nil, fmt.Errorf("read the boot id: %w", err)
	}
	id, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""))
	if err != nil || len(id) == 0 {
		return nil, fmt.Errorf("read the boot id: %q is not one", b)
	}
	return id, nil
}

// sealRecord fills r with payload: the CRC-32C of the rest, the payload's
// length, the payload, zeros.
func sealRecord(r *[inFlightRecord]byte, payload []byte) {
	clear(r[:])
	r[4] = byte(len(payload))
	copy(r[5:], payload)
	binary.LittleEndian.PutUint32(r[:4], crc32.Checksum(r[4:], crcTable))
}

// objectsStampRecord is the record of objects/'s stamp s, sealed: what
// openInFlight writes first and end after a call made or removed a
// bucket's directory.
func objectsStampRecord(s dirStamp) [inFlightRecord]byte {
	var e encoder
	e.stamp(s)
	var r [inFlightRecord]byte
	sealRecord(&r, e.b)
	return r
}

// openRecord checks a record's CRC and returns its payload.
func openRecord(r []byte) ([]byte, error) {
	if crc32.Checksum(r[4:], crcTable) != binary.LittleEndian.Uint32(r[:4]) {
		return nil, errors.New("checksum mismatch: cut short or changed")
	}
	n := int(r[4])
	if 5+n > len(r) {
		return nil, errors.New("length out of range")
	}
	return r[5 : 5+n], nil
}

func recordOffset(i int) int64 { return int64(i) * inFlightRecord }

// plainBucket reports whether name is one path element the repair may
// join under objects/ (versitygw refuses the others).
func plainBucket(name string) bool {
	return name != "" && !strings.HasPrefix(name, ".") && !strings.ContainsRune(name, filepath.Separator)
}

// inFlight is the open in-flight file of a running server.
type inFlight struct {
	f          *os.File
	objectsDir string
	free       chan int // the slots not in use
	mu         sync.Mutex
}

// openInFlight writes a new in-flight file, every slot clear, with the
// boot's id and the stamps of run/ and objects/ as they are now, and
// keeps it open. It is called after the socket is bound and the repair
// done, before the S3 server serves. It is not fsynced: a crash of the
// machine makes it stale (the boot), and a kill keeps what was written.
//
// slots is the number of slots: as many as the S3 server serves requests
// at once (its in-flight limit), so that no call waits for one.
func openInFlight(dataDir string, slots int) (*inFlight, error) {
	dirs := cleanStopDirs(dataDir)
	// versitygw makes its folder of object locks in objects/ at its first
	// PutObject: made now, it does not change objects/ while it runs.
	if err := os.Mkdir(filepath.Join(dirs[1], objLockDir), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("write in-flight file: %w", err)
	}
	runStamp, err := stampOf(dirs[0])
	if err != nil {
		return nil, fmt.Errorf("write in-flight file: %w", err)
	}
	objStamp, err := stampOf(dirs[1])
	if err != nil {
		return nil, fmt.Errorf("write in-flight file: %w", err)
	}
	boot, err := bootID()
	if err != nil {
		return nil, fmt.Errorf("write in-flight file: %w", err)
	}
	settle(runStamp, objStamp)
	var h encoder
	h.str(inFlightMagic)
	h.str(string(boot))
	h.uint(uint64(slots))
	h.stamp(runStamp)
	b := make([]byte, (firstSlot+slots)*inFlightRecord)
	var r [inFlightRecord]byte
	for i := range firstSlot + slots {
		switch i {
		case headerRecord:
			sealRecord(&r, h.b)
		case objectsRecord:
			r = objectsStampRecord(objStamp)
		default:
			sealRecord(&r, nil)
		}
		copy(b[recordOffset(i):], r[:])
	}

	path := filepath.Join(dataDir, inFlightFile)
	f, err := os.OpenFile(path+tmpSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write in-flight file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		return nil, errors.Join(fmt.Errorf("write in-flight file: %w", err), f.Close(), os.Remove(f.Name()))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return nil, errors.Join(fmt.Errorf("write in-flight file: %w", err), f.Close(), os.Remove(f.Name()))
	}
	t := &inFlight{f: f, objectsDir: dirs[1], free: make(chan int, slots)}
	for i := range slots {
		t.free <- firstSlot + i
	}
	return t, nil
}

// begin writes bucket into a free slot (waiting for one, or for ctx) and
// returns the function that ends the call. An error is the call's: what
// it would do could not be recorded.
func (t *inFlight) begin(ctx context.Context, op callOp, bucket string) (func(), error) {
	if t == nil {
		return func() {}, nil
	}
	var slot int
	select {
	case slot = <-t.free:
	case <-ctx.Done():
		return nil, fmt.Errorf("record the call in flight: %w", ctx.Err())
	}
	payload := []byte{byte(op)}
	if plainBucket(bucket) && len(bucket) <= maxSlotBucket {
		payload = append(payload, bucket...)
	} // else unknown: the next start after a kill walks every bucket
	var r [inFlightRecord]byte
	sealRecord(&r, payload)
	if _, err := t.f.WriteAt(r[:], recordOffset(slot)); err != nil {
		t.free <- slot
		return nil, fmt.Errorf("record the call in flight on bucket %s: %w", bucket, err)
	}
	return func() { t.end(op, slot) }, nil
}

// end clears a slot when its call has returned. A call that made or
// removed a bucket's directory records the stamp of objects/ first, so
// that a kill in between leaves the slot set. Errors are not the call's:
// a slot left set makes the next start repair its bucket for nothing, a
// stamp not recorded makes it walk every bucket.
func (t *inFlight) end(op callOp, slot int) {
	if op == opBucket {
		t.mu.Lock() // the last stamp written is the last taken
		if s, err := stampOf(t.objectsDir); err == nil {
			r := objectsStampRecord(s)
			_, _ = t.f.WriteAt(r[:], recordOffset(objectsRecord))
		}
		t.mu.Unlock()
	}
	var r [inFlightRecord]byte
	sealRecord(&r, nil)
	_, _ = t.f.WriteAt(r[:], recordOffset(slot))
	t.free <- slot
}

// close closes the file when the S3 server has stopped. A call still
// running then (a shutdown that waited out versitygw's limit) can no
// longer clear its slot, which stays set: its bucket is repaired next.
func (t *inFlight) close() error {
	if t == nil {
		return nil
	}
	return t.f.Close()
}

// repairScope is what a start repairs: nothing (after a clean stop),
// every bucket, or those named.
type repairScope struct {
	none, all bool
	buckets   []string
}

// run repairs what the scope says and logs how long it took.
func (sc repairScope) run(objectsDir, versionsDir string, log *slog.Logger) error {
	began := time.Now()
	switch {
	case sc.none:
		return nil
	case sc.all:
		err := repair(objectsDir, versionsDir, log)
		log.Info("Repaired every bucket", "took", time.Since(began).Round(time.Millisecond))
		return err
	default:
		err := repairNamed(objectsDir, versionsDir, sc.buckets, log)
		log.Info("Repaired the buckets of the calls a kill interrupted", "buckets", len(sc.buckets), "took", time.Since(began).Round(time.Millisecond))
		return err
	}
}

// readInFlight says what a start that found no clean-stop marker must
// repair: the buckets the in-flight file names, if it is there, whole,
// of this boot, and nothing else ran on the data directory since;
// otherwise every bucket, and why the file is not used is logged once.
// It is called before the start binds its socket.
func readInFlight(dataDir string, warn func(msg string, args ...any)) repairScope {
	path := filepath.Join(dataDir, inFlightFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return repairScope{all: true} // never served, or removed by hand
	}
	var buckets []string
	if err == nil {
		buckets, err = inFlightBuckets(dataDir, b)
	}
	if err != nil {
		warn("The in-flight file is not used: every bucket is repaired", "file", path, "error", err)
		return repairScope{all: true}
	}
	return repairScope{buckets: buckets}
}

// inFlightBuckets checks an in-flight file's content against the data
// directory now and returns the buckets its slots name, each once.
func inFlightBuckets(dataDir string, b []byte) ([]string, error) {
	if len(b) < firstSlot*inFlightRecord || len(b)%inFlightRecord != 0 {
		return nil, fmt.Errorf("%d bytes: cut short or not a file of this version", len(b))
	}
	header, err := openRecord(b[:inFlightRecord])
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	d := decoder{b: header}
	magic, boot, slots, runStamp := d.str(), d.str(), d.uint(), d.stamp()
	if err := d.done(); err != nil || magic != inFlightMagic {
		return nil, errors.New("not a file of this version")
	}
	if want := uint64(len(b)/inFlightRecord - firstSlot); slots != want {
		return nil, fmt.Errorf("%d slots recorded, %d in the file: cut short", slots, want)
	}
	now, err := bootID()
	if err != nil {
		return nil, err
	}
	if boot != string(now) {
		return nil, errors.New("written before the machine last booted: a crash may have lost slots")
	}
	dirs := cleanStopDirs(dataDir)
	if s, err := stampOf(dirs[0]); err != nil {
		return nil, err
	} else if !s.same(runStamp) {
		return nil, fmt.Errorf("%s changed since (another server ran)", dirs[0])
	}
	objects, err := openRecord(b[recordOffset(objectsRecord):recordOffset(firstSlot)])
	if err != nil {
		return nil, fmt.Errorf("stamp of objects: %w", err)
	}
	d = decoder{b: objects}
	objStamp := d.stamp()
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("stamp of objects: %w", err)
	}
	var buckets []string
	bucketOp := false
	for i := firstSlot; i < len(b)/inFlightRecord; i++ {
		p, err := openRecord(b[recordOffset(i):recordOffset(i+1)])
		if err != nil {
			return nil, fmt.Errorf("slot %d: %w", i-firstSlot, err)
		}
		if len(p) == 0 {
			continue
		}
		op, name := callOp(p[0]), string(p[1:])
		if op != opObjects && op != opBucket {
			return nil, fmt.Errorf("slot %d: no such call", i-firstSlot)
		}
		if !plainBucket(name) {
			return nil, fmt.Errorf("slot %d: a call in flight on a bucket the slot could not hold", i-firstSlot)
		}
		bucketOp = bucketOp || op == opBucket
		buckets = append(buckets, name)
	}
	if s, err := stampOf(dirs[1]); err != nil {
		return nil, err
	} else if !s.same(objStamp) && !bucketOp {
		return nil, fmt.Errorf("%s changed since, with no bucket made or removed in flight (another server ran, or it was changed by hand)", dirs[1])
	}
	slices.Sort(buckets)
	return slices.Compact(buckets), nil
}

// trackedBackend is the gateway's backend: versitygw's posix backend with
// the keys of deleted versions recorded (keyRecorder) and the calls that
// can leave repairable damage recorded in flight.
type trackedBackend struct {
	keyRecorder
	inFlight *inFlight // nil: not recorded
}

// tracked runs call with its bucket in a slot of b's in-flight file.
func tracked[T any](ctx context.Context, b trackedBackend, op callOp, bucket *string, call func() (T, error)) (T, error) {
	end, err := b.inFlight.begin(ctx, op, aws.ToString(bucket))
	if err != nil {
		var none T
		return none, err
	}
	defer end()
	return call()
}

// CreateBucket implements backend.Backend.
func (b trackedBackend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, acl []byte) error {
	_, err := tracked(ctx, b, opBucket, in.Bucket, func() (struct{}, error) {
		return struct{}{}, b.keyRecorder.CreateBucket(ctx, in, acl)
	})
	return err
}

// DeleteBucket implements backend.Backend.
func (b trackedBackend) DeleteBucket(ctx context.Context, bucket string) error {
	_, err := tracked(ctx, b, opBucket, &bucket, func() (struct{}, error) {
		return struct{}{}, b.keyRecorder.DeleteBucket(ctx, bucket)
	})
	return err
}

// PutObject implements backend.Backend.
func (b trackedBackend) PutObject(ctx context.Context, in s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	return tracked(ctx, b, opObjects, in.Bucket, func() (s3response.PutObjectOutput, error) {
		return b.keyRecorder.PutObject(ctx, in)
	})
}

// CopyObject implements backend.Backend: the destination is written.
func (b trackedBackend) CopyObject(ctx context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	return tracked(ctx, b, opObjects, in.Bucket, func() (s3response.CopyObjectOutput, error) {
		return b.keyRecorder.CopyObject(ctx, in)
	})
}

// CompleteMultipartUpload implements backend.Backend.
func (b trackedBackend) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput) (s3response.CompleteMultipartUploadResult, string, error) {
	type result struct {
		out       s3response.CompleteMultipartUploadResult
		versionID string
	}
	r, err := tracked(ctx, b, opObjects, in.Bucket, func() (result, error) {
		out, versionID, err := b.keyRecorder.CompleteMultipartUpload(ctx, in)
		return result{out, versionID}, err
	})
	return r.out, r.versionID, err
}

// DeleteObject implements backend.Backend.
func (b trackedBackend) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	return tracked(ctx, b, opObjects, in.Bucket, func() (*s3.DeleteObjectOutput, error) {
		return b.keyRecorder.DeleteObject(ctx, in)
	})
}

// DeleteObjects implements backend.Backend.
func (b trackedBackend) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	return tracked(ctx, b, opObjects, in.Bucket, func() (s3response.DeleteResult, error) {
		return b.keyRecorder.DeleteObjects(ctx, in)
	})
}
