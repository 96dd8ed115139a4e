package s3iam

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"

	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// deleteBatch is the most keys one DeleteObjects call takes.
const deleteBatch = 1000

// bucketState is what one look at a bucket shows.
type bucketState struct {
	exists bool
	// hidden: the bucket exists but the driver's credentials may not look
	// at it (HTTP 403), so it is someone else's.
	hidden bool
	// tags is the bucket's tag set, empty when it has none.
	tags map[string]string
}

func (b bucketState) owner() string { return b.tags[OwnerTagKey] }

func (d *Driver) observeBucket(ctx context.Context, name string) (bucketState, error) {
	_, err := d.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &name})
	switch {
	case err == nil:
	case hasCode(err, codesNoBucket...) || httpStatus(err) == http.StatusNotFound:
		return bucketState{}, nil
	case httpStatus(err) == http.StatusForbidden:
		return bucketState{exists: true, hidden: true}, nil
	case httpStatus(err) == http.StatusBadRequest:
		// A HEAD answer has no body to say what was wrong (an invalid
		// name, a wrong region): GetBucketTagging below will tell.
	default:
		return bucketState{}, mapBucketErr(err, "head bucket %q", name)
	}

	tags, err := d.observeTags(ctx, name)
	switch {
	case errors.Is(err, errNoBucket):
		return bucketState{}, nil // deleted since HeadBucket
	case err != nil:
		return bucketState{}, err
	}
	return bucketState{exists: true, tags: tags}, nil
}

// errNoBucket is observeTags's answer for a bucket that does not exist.
var errNoBucket = errors.New("no such bucket")

// observeTags reads a bucket's tags: empty when it has none, errNoBucket
// when it does not exist.
func (d *Driver) observeTags(ctx context.Context, name string) (map[string]string, error) {
	out, err := d.s3.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &name})
	switch {
	case err == nil:
	case hasCode(err, codesNoTags...):
		return map[string]string{}, nil
	case hasCode(err, codesNoBucket...):
		return nil, fmt.Errorf("get tags of bucket %q: %w", name, errNoBucket)
	default:
		return nil, mapBucketErr(err, "get tags of bucket %q", name)
	}
	tags := make(map[string]string, len(out.TagSet))
	for _, t := range out.TagSet {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return tags, nil
}

// ownedByOther explains why the bucket is not ours to touch.
func (b bucketState) ownedByOther(name string) error {
	switch {
	case b.hidden:
		return fmt.Errorf("bucket %q exists and the driver's credentials may not read it: %w", name, driver.ErrOwnedByOther)
	case b.owner() == "":
		return fmt.Errorf("bucket %q exists without an owner mark: %w", name, driver.ErrOwnedByOther)
	}
	return fmt.Errorf("bucket %q carries owner mark %q: %w", name, b.owner(), driver.ErrOwnedByOther)
}

// EnsureBucket implements driver.Driver. The S3 API has no bucket quota,
// so a spec with one is refused before anything is made.
func (d *Driver) EnsureBucket(ctx context.Context, spec driver.BucketSpec) error {
	if err := driver.RequireNames("bucket name", spec.Name, "owner", spec.Owner); err != nil {
		return err
	}
	if err := driver.CheckQuota(d, spec.Quota); err != nil {
		return fmt.Errorf("bucket %q: %w", spec.Name, err)
	}
	created, err := d.ensureMarkedBucket(ctx, spec)
	if err != nil || !spec.Versioning || created {
		return err
	}
	return d.ensureVersioning(ctx, spec.Name)
}

// ensureMarkedBucket makes the bucket exist with spec's owner mark and tags,
// and reports whether this call created it. A bucket it creates also has
// its versioning turned on when spec asks for it (markCreated).
func (d *Driver) ensureMarkedBucket(ctx context.Context, spec driver.BucketSpec) (bool, error) {
	want := map[string]string{OwnerTagKey: spec.Owner}
	for k, v := range spec.Tags {
		if strings.HasPrefix(k, reservedTagPrefix) {
			return false, driver.Invalidf("bucket %q: tag %q is in the reserved %s namespace", spec.Name, k, reservedTagPrefix)
		}
		want[k] = v
	}
	// Before any call: a tag set the server refuses would otherwise be
	// refused after the bucket was created.
	if err := driver.CheckTags(spec.Tags, 1); err != nil {
		return false, fmt.Errorf("bucket %q: %w", spec.Name, err)
	}

	if d.createFirst {
		// The common case, a new bucket, in one call (with the mark in it)
		// or two, as it would be by hand.
		created, sent, err := d.createBucket(ctx, spec.Name, want)
		if err != nil {
			return false, err
		}
		if created {
			return true, d.markCreated(ctx, spec, want, sent)
		}
	}
	b, err := d.observeBucket(ctx, spec.Name)
	if err != nil {
		return false, err
	}
	if !b.exists {
		created, sent, err := d.createBucket(ctx, spec.Name, want)
		if err != nil {
			return false, err
		}
		if created {
			return true, d.markCreated(ctx, spec, want, sent)
		}
		// Someone (a retry of ours, or the operator with the same keys)
		// created it in between: judge it by its mark like any other.
		if b, err = d.observeBucket(ctx, spec.Name); err != nil {
			return false, err
		}
		if !b.exists {
			return false, fmt.Errorf("bucket %q: reported as already owned, then as missing", spec.Name)
		}
	}

	switch {
	case b.hidden:
		return false, b.ownedByOther(spec.Name)
	case b.owner() == spec.Owner:
		if maps.Equal(b.tags, want) {
			return false, nil
		}
	case b.owner() == "" && spec.AdoptUnmarked:
		// Our own creation, marked by this call after a crash.
	default:
		return false, b.ownedByOther(spec.Name)
	}
	return false, d.putBucketTags(ctx, spec.Name, want)
}

// ensureVersioning turns versioning on unless it is on already, so that a
// repeated call writes nothing.
func (d *Driver) ensureVersioning(ctx context.Context, name string) error {
	out, err := d.s3.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &name})
	if err != nil {
		return mapVersioningErr(err, "get versioning of bucket %q", name)
	}
	if out.Status == types.BucketVersioningStatusEnabled {
		return nil
	}
	return d.putVersioning(ctx, name)
}

// putVersioning turns versioning on.
func (d *Driver) putVersioning(ctx context.Context, name string) error {
	_, err := d.s3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
		Bucket:                  &name,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	})
	if err != nil {
		return mapVersioningErr(err, "turn on versioning of bucket %q", name)
	}
	return nil
}

// mapVersioningErr reports a server without versioning as driver.ErrInvalid:
// no retry makes it keep versions. versitygw's posix backend answers
// VersioningNotConfigured when started without a versioning directory.
func mapVersioningErr(err error, format string, args ...any) error {
	if hasCode(err, codesNoVersioning...) {
		return &refusal{msg: fmt.Sprintf(format, args...), note: "the server does not support versioning", err: err}
	}
	return mapBucketErr(err, format, args...)
}

// createBucket creates the bucket and reports false if it already existed
// under the driver's own account. It sends tags in the create itself
// (CreateBucketConfiguration.Tags) unless the server is known to drop
// them, and sent says whether the create that made the bucket carried
// them. A server that refuses the element (an answer a tagless create
// would not get: a malformed request, a missing permission, an action it
// does not implement) is asked again without it, and, if that succeeds,
// known to drop them: the caller writes the mark in its own call
// (markCreated). A refused create that made the bucket after all is found
// by the tagless one (BucketAlreadyOwnedByYou) and judged by its mark, as
// for any bucket that exists.
func (d *Driver) createBucket(ctx context.Context, name string, tags map[string]string) (created, sent bool, err error) {
	sent = len(tags) > 0 && !d.bucketMarks.dropped()
	if sent {
		created, err = d.create(ctx, name, tags)
		if !refusedTags(err) {
			return created, sent, err
		}
	}
	created, err = d.create(ctx, name, nil)
	if sent && err == nil {
		d.bucketMarks.saw(false)
	}
	return created, false, err
}

// refusedTags reports whether a create that carried tags may have been
// refused for them.
func refusedTags(err error) bool {
	switch httpStatus(err) {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotImplemented:
		return true
	}
	return false
}

// create is one CreateBucket, with tags when there are any.
func (d *Driver) create(ctx context.Context, name string, tags map[string]string) (bool, error) {
	in := &s3.CreateBucketInput{Bucket: &name}
	var cfg types.CreateBucketConfiguration
	// us-east-1 is the one region that refuses an explicit constraint.
	if d.region != defaultRegion {
		cfg.LocationConstraint = types.BucketLocationConstraint(d.region)
	}
	if len(tags) > 0 {
		cfg.Tags = tagSet(tags)
	}
	if cfg.LocationConstraint != "" || cfg.Tags != nil {
		in.CreateBucketConfiguration = &cfg
	}
	_, err := d.s3.CreateBucket(ctx, in)
	switch {
	case err == nil:
		return true, nil
	case hasCode(err, "BucketAlreadyOwnedByYou"):
		return false, nil
	case hasCode(err, "BucketAlreadyExists"):
		return false, fmt.Errorf("bucket %q exists in another account: %w", name, driver.ErrOwnedByOther)
	}
	return false, mapBucketErr(err, "create bucket %q", name)
}

// markCreated makes sure a bucket this call has just created carries its
// owner mark and tags, and turns its versioning on if spec asks for it.
// sent says whether the create carried the tags:
//
//   - sent, to a server known to keep them: nothing to write. The bucket
//     and its mark were written by one call, so no crash of the driver's
//     process leaves it unmarked. A crash of the server may: versitygw's
//     posix backend makes the directory, then writes its ACL, then its
//     tags, so a server killed in between leaves a bucket without them.
//     The caller's recorded attempt (internal/ensure: written before any
//     create, for buckets always) lets the retry adopt it, as it adopts a
//     bucket left unmarked between two calls.
//   - sent, to a server not known yet (the process's first new bucket):
//     the tags are read back (GetBucketTagging) in place of the separate
//     write, and the server is known from then on to keep them or not;
//     if not, the mark is written now.
//   - not sent (a server that dropped or refused them): the mark is
//     written in its own call (PutBucketTagging). A crash before it lands
//     leaves the bucket unmarked, and only the caller's AdoptUnmarked (its
//     durable record of the attempt) lets a retry take it back.
//
// The crash point "bucket/created-unmarked" is a crash right after the
// create: the bucket is unmarked there unless the create carried the mark.
//
// The mark and the versioning are independent once the bucket exists (a
// bucket this call created has never had versioning on, so there is
// nothing to look at first), and are made at once: one round trip, not
// two. Every way it can stop is one a retry already meets: a crash or a
// failure between them leaves the bucket marked without versioning (the
// retry finds it ours and turns versioning on after looking) or versioned
// and unmarked (adopted under AdoptUnmarked, as an unmarked bucket is
// today; versioning on an empty bucket grants nothing). Both are waited
// for whatever either answers, so that a versioning the server refuses
// (ErrInvalid, the caller then deletes the bucket) never cuts the mark
// short: the bucket the caller deletes carries it.
func (d *Driver) markCreated(ctx context.Context, spec driver.BucketSpec, tags map[string]string, sent bool) error {
	crashpoint.Hit(crashpoint.BucketCreatedUnmarked)
	mark := func() error {
		switch {
		case sent && d.bucketMarks.kept():
			return nil
		case sent:
			return d.checkCreateTags(ctx, spec.Name, tags)
		}
		return d.putBucketTags(ctx, spec.Name, tags)
	}
	if !spec.Versioning {
		return mark()
	}
	var verErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		verErr = d.putVersioning(ctx, spec.Name)
	}()
	tagErr := mark()
	wg.Wait()
	if tagErr != nil {
		return tagErr
	}
	return verErr
}

// checkCreateTags reads back the tags a create sent to a server not known
// to keep them, learns from them whether it does, and writes them when
// it did not keep them all.
func (d *Driver) checkCreateTags(ctx context.Context, name string, tags map[string]string) error {
	b, err := d.observeTags(ctx, name)
	if err != nil {
		return err
	}
	kept := maps.Equal(b, tags)
	d.bucketMarks.saw(kept)
	if kept {
		return nil
	}
	return d.putBucketTags(ctx, name, tags)
}

func (d *Driver) putBucketTags(ctx context.Context, name string, tags map[string]string) error {
	_, err := d.s3.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{
		Bucket:  &name,
		Tagging: &types.Tagging{TagSet: tagSet(tags)},
	})
	if err != nil {
		return mapBucketErr(err, "tag bucket %q", name)
	}
	return nil
}

// tagSet is tags as S3 takes them.
func tagSet(tags map[string]string) []types.Tag {
	set := make([]types.Tag, 0, len(tags))
	for k, v := range tags {
		set = append(set, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	return set
}

// DeleteBucket implements driver.Driver.
func (d *Driver) DeleteBucket(ctx context.Context, name, owner string, purge bool) error {
	if err := driver.RequireNames("bucket name", name, "owner", owner); err != nil {
		return err
	}
	b, err := d.observeBucket(ctx, name)
	if err != nil {
		return err
	}
	if !b.exists {
		return nil
	}
	if b.hidden || b.owner() != owner {
		return b.ownedByOther(name)
	}
	if purge {
		if err := d.purge(ctx, name); err != nil {
			return err
		}
	}
	_, err = d.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name})
	switch {
	case err == nil, hasCode(err, codesNoBucket...):
		return nil
	case hasCode(err, "BucketNotEmpty") && purge:
		held, listed := d.contents(ctx, name)
		if !listed {
			// A retry cannot help until the server repairs what it
			// keeps; the embedded one does at its next start.
			return fmt.Errorf("delete bucket %q: the server reports it not empty after the purge but %s: %w", name, held, err)
		}
		// Written while we purged: a retry purges them too.
		return fmt.Errorf("delete bucket %q: objects were written during the purge (%s): %w", name, held, err)
	case hasCode(err, "BucketNotEmpty"):
		held, _ := d.contents(ctx, name)
		return fmt.Errorf("delete bucket %q (%s): %w", name, held, driver.ErrBucketNotEmpty)
	}
	return mapBucketErr(err, "delete bucket %q", name)
}

// contentsShown is how many keys of each kind contents names.
const contentsShown = 3

// contents describes, for an error, what a bucket that DeleteBucket found
// not empty holds: the first keys of its objects, of its versions and
// delete markers when it lists no current object, and of its unfinished
// uploads. listed is false when it lists none of these: then what keeps
// the bucket from being deleted is something only the server sees.
func (d *Driver) contents(ctx context.Context, name string) (held string, listed bool) {
	var parts []string
	objs, err := d.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &name, MaxKeys: aws.Int32(contentsShown)})
	if err != nil {
		return fmt.Sprintf("its objects could not be listed: %v", err), true
	}
	var keys []string
	for _, o := range objs.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	if len(keys) > 0 {
		parts = append(parts, "objects "+quoteKeys(keys, aws.ToBool(objs.IsTruncated)))
	} else {
		vs, err := d.s3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &name, MaxKeys: aws.Int32(contentsShown)})
		if err == nil {
			for _, v := range vs.Versions {
				keys = append(keys, aws.ToString(v.Key))
			}
			for _, m := range vs.DeleteMarkers {
				keys = append(keys, aws.ToString(m.Key))
			}
			if len(keys) > 0 {
				parts = append(parts, "versions of "+quoteKeys(keys, aws.ToBool(vs.IsTruncated)))
			}
		}
	}
	ups, err := d.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &name, MaxUploads: aws.Int32(contentsShown)})
	if err == nil && len(ups.Uploads) > 0 {
		keys = keys[:0]
		for _, u := range ups.Uploads {
			keys = append(keys, aws.ToString(u.Key))
		}
		parts = append(parts, "unfinished uploads of "+quoteKeys(keys, aws.ToBool(ups.IsTruncated)))
	}
	if len(parts) == 0 {
		return "it lists no object, version or upload", false
	}
	return "it holds " + strings.Join(parts, "; "), true
}

// quoteKeys lists keys quoted, and says when there are more.
func quoteKeys(keys []string, more bool) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	s := strings.Join(q, ", ")
	if more {
		s += " and more"
	}
	return s
}

// purge removes everything a bucket holds: unfinished multipart uploads,
// every object version and delete marker where versioning was ever on,
// and every current object. Its three first reads (the uploads, the
// versioning status and the first page of objects) are made at once, so
// an empty bucket is purged in one round trip; nothing is deleted from
// the listing of current objects before the versioning status is known,
// since in a versioned bucket such a deletion would only add a delete
// marker.
func (d *Driver) purge(ctx context.Context, name string) error {
	var (
		versioned bool
		first     *s3.ListObjectsV2Output
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.abortUploads(gctx, name) })
	g.Go(func() (err error) {
		versioned, err = d.versioned(gctx, name)
		return err
	})
	g.Go(func() (err error) {
		first, err = d.listObjects(gctx, &s3.ListObjectsV2Input{Bucket: &name})
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if versioned {
		if err := d.deleteVersions(ctx, name); err != nil {
			return err
		}
		first = nil // what the first page listed is gone: list again
	}
	return d.deleteCurrent(ctx, name, first)
}

// deleteCurrent deletes every current object of a bucket, starting with
// the page first when the caller listed it already.
func (d *Driver) deleteCurrent(ctx context.Context, name string, first *s3.ListObjectsV2Output) error {
	in := &s3.ListObjectsV2Input{Bucket: &name}
	page := first
	for {
		if page == nil {
			var err error
			if page, err = d.listObjects(ctx, in); err != nil {
				return err
			}
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		if err := d.deleteObjects(ctx, name, ids); err != nil {
			return err
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			return nil
		}
		in.ContinuationToken = page.NextContinuationToken
		page = nil
	}
}

func (d *Driver) listObjects(ctx context.Context, in *s3.ListObjectsV2Input) (*s3.ListObjectsV2Output, error) {
	out, err := d.s3.ListObjectsV2(ctx, in)
	if err != nil {
		return nil, mapBucketErr(err, "purge bucket %q: list objects", aws.ToString(in.Bucket))
	}
	return out, nil
}

func (d *Driver) abortUploads(ctx context.Context, name string) error {
	pages := s3.NewListMultipartUploadsPaginator(d.s3, &s3.ListMultipartUploadsInput{Bucket: &name})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if hasCode(err, codesNotSupported...) {
			return nil
		}
		if err != nil {
			return mapBucketErr(err, "purge bucket %q: list multipart uploads", name)
		}
		for _, u := range page.Uploads {
			_, err := d.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &name, Key: u.Key, UploadId: u.UploadId})
			if err != nil && !hasCode(err, "NoSuchUpload") {
				return mapBucketErr(err, "purge bucket %q: abort upload of %q", name, aws.ToString(u.Key))
			}
		}
	}
	return nil
}

// versioned reports whether versioning is, or was, on for a bucket. A
// server without versioning support has current objects only.
func (d *Driver) versioned(ctx context.Context, name string) (bool, error) {
	v, err := d.s3.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &name})
	if hasCode(err, codesNotSupported...) {
		return false, nil
	}
	if err != nil {
		return false, mapBucketErr(err, "purge bucket %q: get versioning", name)
	}
	return v.Status != "", nil // never enabled: no versions beside current objects
}

// deleteVersions deletes all versions and delete markers of a bucket that
// has, or had, versioning on.
func (d *Driver) deleteVersions(ctx context.Context, name string) error {
	pages := s3.NewListObjectVersionsPaginator(d.s3, &s3.ListObjectVersionsInput{Bucket: &name})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if hasCode(err, codesNotSupported...) {
			return nil
		}
		if err != nil {
			return mapBucketErr(err, "purge bucket %q: list object versions", name)
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Versions)+len(page.DeleteMarkers))
		for _, o := range page.Versions {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key, VersionId: o.VersionId})
		}
		for _, o := range page.DeleteMarkers {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key, VersionId: o.VersionId})
		}
		if err := d.deleteObjects(ctx, name, ids); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) deleteObjects(ctx context.Context, name string, ids []types.ObjectIdentifier) error {
	for len(ids) > 0 {
		n := min(len(ids), deleteBatch)
		out, err := d.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &name,
			Delete: &types.Delete{Objects: ids[:n], Quiet: aws.Bool(true)},
		})
		if err != nil {
			return mapBucketErr(err, "purge bucket %q: delete objects", name)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" || aws.ToString(e.Code) == "NoSuchVersion" {
				continue
			}
			return fmt.Errorf("purge bucket %q: delete %q: %s: %s (and %d more in the batch)",
				name, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
		}
		driver.Purged(ctx, n)
		ids = ids[n:]
	}
	return nil
}
