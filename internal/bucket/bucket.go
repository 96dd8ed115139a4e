package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Name names the bucket backend in records (engine.Record.Backend).
const Name = "bucket"

// Endpoint is how applications reach the buckets: it goes into every
// binding's credentials.
type Endpoint struct {
	URL       string
	Region    string
	PathStyle bool
}

// Options configure a Backend. Driver and Catalog are required.
type Options struct {
	Driver driver.Driver
	// Catalog is the engine's; the backend serves its services that are
	// no upstream's, and reads their plans' settings.
	Catalog  *catalog.Catalog
	Endpoint Endpoint
	// Prefix starts every bucket and user name (default "bb").
	Prefix string
}

// Backend is the engine.Backend of the bucket service: an instance is a
// bucket, a binding a user with one key scoped to it, made through the
// driver with internal/ensure's ownership rules.
type Backend struct {
	driver   driver.Driver
	catalog  *catalog.Catalog
	endpoint Endpoint
	prefix   string
}

// New checks opts and returns the backend.
func New(opts Options) (*Backend, error) {
	if opts.Driver == nil || opts.Catalog == nil {
		return nil, errors.New("bucket backend: driver and catalog are required")
	}
	if opts.Prefix == "" {
		opts.Prefix = "bb"
	}
	if err := driver.ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if err := checkQuotas(opts.Driver, opts.Catalog); err != nil {
		return nil, err
	}
	return &Backend{driver: opts.Driver, catalog: opts.Catalog, endpoint: opts.Endpoint, prefix: opts.Prefix}, nil
}

var _ engine.Backend = (*Backend)(nil)

// checkQuotas refuses a catalog with a plan whose quota the driver cannot
// enforce: a limit promised is never ignored.
func checkQuotas(d driver.Driver, c *catalog.Catalog) error {
	for _, s := range c.Services {
		if s.Upstream != "" {
			continue
		}
		for _, p := range s.Plans {
			size, objects := p.Settings().Limits()
			if err := driver.CheckQuota(d, driver.Quota{MaxSize: size, MaxObjects: objects}); err != nil {
				return fmt.Errorf("plan %q of service %q asks for a bucket quota: %w", p.Name, s.Name, err)
			}
		}
	}
	return nil
}

// Name names the backend: Name.
func (b *Backend) Name() string { return Name }

// ServiceIDs are the catalog's services that are no upstream's.
func (b *Backend) ServiceIDs() []string {
	var ids []string
	for _, s := range b.catalog.Services {
		if s.Upstream == "" {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// instanceParams are the instance parameters the backend acts on; the
// plan's schema has already checked them.
type instanceParams struct {
	PurgeOnDelete *bool             `json:"purge_on_delete"`
	Labels        map[string]string `json:"labels"`
}

type bindingParams struct {
	Access string `json:"access"`
}

func decodeParams(raw json.RawMessage, into any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, into)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrInvalid, fmt.Sprintf(format, args...))
}

// Check refuses labels an instance's parameters ask for that the driver
// would refuse as bucket tags, and a bind the plan does not allow: its
// access, or a rotation.
func (b *Backend) Check(kind engine.Kind, plan *catalog.Plan, r engine.Request, id string) error {
	if kind == engine.KindInstance {
		var p instanceParams
		if err := decodeParams(r.Parameters, &p); err != nil {
			return invalidf("parameters: %v", err)
		}
		if err := driver.CheckTags(p.Labels, 1); err != nil { // 1: the owner mark
			return invalidf("labels: %v", err)
		}
		return nil
	}
	access, err := b.access(plan, r)
	if err != nil {
		return err
	}
	if !plan.Settings().AllowsAccess(catalog.Access(access)) {
		return invalidf("plan %q does not allow %s bindings", plan.Name, access)
	}
	pred := r.Predecessor
	if pred != "" && !plan.Rotatable() {
		return invalidf("plan %q does not allow binding rotation", plan.Name)
	}
	if pred == id && pred != "" {
		return invalidf("binding %s cannot rotate itself", pred)
	}
	return nil
}

// access is the access a bind of plan asks for: its parameters', else the
// plan's default.
func (b *Backend) access(plan *catalog.Plan, r engine.Request) (driver.Access, error) {
	var bp bindingParams
	if err := decodeParams(r.Parameters, &bp); err != nil {
		return "", invalidf("parameters: %v", err)
	}
	if bp.Access != "" {
		return driver.Access(bp.Access), nil
	}
	return driver.Access(plan.Settings().DefaultAccess()), nil
}

// Prepare names the record's bucket or user and, where p.Look allows,
// looks whether the name is free (or already carries the record's mark):
// only then may the operation adopt an unmarked bucket or user under that
// name later, one its own attempt created and crashed before marking.
// When the driver cannot tell now, the operation's worker looks first.
func (b *Backend) Prepare(ctx context.Context, rec *engine.Record, p engine.Preparation) error {
	if rec.Kind == engine.KindInstance {
		if rec.Bucket == nil {
			rec.Bucket = &engine.BucketState{
				Bucket: driver.BucketName(b.prefix, string(engine.KindInstance), rec.ID),
				Owner:  driver.OwnerMark(string(engine.KindInstance), rec.ID),
			}
			rec.Bucket.BucketAttempted = b.free(ctx, p.Look, ensure.Names{Bucket: rec.Bucket.Bucket, Owner: rec.Bucket.Owner})
		}
		return nil
	}
	access, err := b.bindAccess(rec, p)
	if err != nil {
		return err
	}
	if p.Instance.Bucket == nil {
		return fmt.Errorf("%w: instance %s is not the bucket service's", engine.ErrInvalid, p.Instance.ID)
	}
	if rec.Bucket == nil {
		rec.Bucket = &engine.BucketState{
			UserName: driver.UserName(b.prefix, string(engine.KindBinding), rec.ID),
			Owner:    driver.OwnerMark(string(engine.KindBinding), rec.ID),
		}
		// Where the driver marks a new user in the same write
		// (ensure.UserLookNeeded), nobody looks and no attempt is
		// recorded.
		if ensure.UserLookNeeded(b.driver) {
			rec.Bucket.UserAttempted = b.free(ctx, p.Look, ensure.Names{User: rec.Bucket.UserName, Owner: rec.Bucket.Owner})
		}
	}
	rec.Bucket.Bucket, rec.Bucket.Access = p.Instance.Bucket.Bucket, string(access)
	return nil
}

// bindAccess is the access of a new binding: a rotation's is its
// predecessor's.
func (b *Backend) bindAccess(rec *engine.Record, p engine.Preparation) (driver.Access, error) {
	plan, err := b.catalog.Lookup(rec.Request.ServiceID, rec.Request.PlanID)
	if err != nil {
		return "", invalidf("%v", err)
	}
	access, err := b.access(plan, rec.Request)
	if err != nil || p.Predecessor == nil {
		return access, err
	}
	var bp bindingParams
	_ = decodeParams(rec.Request.Parameters, &bp) // decoded by access
	prev := ""
	if p.Predecessor.Bucket != nil {
		prev = p.Predecessor.Bucket.Access
	}
	if bp.Access != "" && driver.Access(bp.Access) != driver.Access(prev) {
		return "", invalidf("a rotation keeps its predecessor's access (%s); the parameters ask for %s", prev, bp.Access)
	}
	return driver.Access(prev), nil
}

// free looks whether the names are free (or carry the owner's mark),
// within look; false when it cannot tell by then or look is zero.
func (b *Backend) free(ctx context.Context, look time.Duration, n ensure.Names) bool {
	if look <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, look)
	defer cancel()
	v, err := ensure.Look(ctx, b.driver, n)
	if n.User != "" {
		return err == nil && v.UserFree
	}
	return err == nil && v.BucketFree
}

// Allows reports whether plan allows the binding's access.
func (b *Backend) Allows(plan *catalog.Plan, binding *engine.Record) (string, bool) {
	if binding.Bucket == nil {
		return "", true
	}
	return binding.Bucket.Access, plan.Settings().AllowsAccess(catalog.Access(binding.Bucket.Access))
}

// Credentials are the binding's key, its secret and where its bucket is.
func (b *Backend) Credentials(rec *engine.Record, secret []byte) (*engine.Credentials, json.RawMessage, error) {
	s := rec.Bucket
	if s == nil {
		return nil, nil, fmt.Errorf("binding %s has no bucket", rec.ID)
	}
	c := &engine.Credentials{
		Bucket: s.Bucket, Endpoint: b.endpoint.URL, Region: b.endpoint.Region, PathStyle: b.endpoint.PathStyle,
		AccessKeyID: s.AccessKeyID, SecretAccessKey: string(secret), Access: s.Access,
	}
	if u, err := url.Parse(b.endpoint.URL); err == nil && u.Host != "" {
		c.URI = (&url.URL{Scheme: "s3", User: url.UserPassword(c.AccessKeyID, c.SecretAccessKey), Host: u.Host, Path: "/" + s.Bucket}).String()
	}
	return c, nil, nil
}

// kinds maps the driver's and ensure's errors to the engine's kinds of
// step failure, keeping their text.
func kinds(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, driver.ErrInvalid):
		return engine.Mark(err, engine.ErrRefused)
	case errors.Is(err, driver.ErrOwnedByOther):
		return engine.Mark(err, engine.ErrNotOurs)
	case errors.Is(err, driver.ErrBucketNotEmpty), errors.Is(err, ensure.ErrMarkLost):
		return engine.Mark(err, engine.ErrPermanent)
	}
	return err
}

// step is w.Step with the driver's errors mapped to the engine's kinds.
func step(ctx context.Context, w *engine.Work, what string, call func(context.Context) error) error {
	return w.Step(ctx, what, func(ctx context.Context) error { return kinds(call(ctx)) })
}

// finish ends the operation; a provision or bind that succeeded records
// that its bucket or user is there with our mark: from then on a missing
// mark is someone's change (internal/ensure).
func finish(ctx context.Context, w *engine.Work, err error) error {
	if s := w.Rec.Bucket; err == nil && s != nil {
		switch w.Rec.Op.Type {
		case engine.OpProvision:
			s.BucketCreated = true
		case engine.OpBind:
			s.UserCreated = true
		}
	}
	return w.Finish(ctx, err)
}

// errNoState ends an operation of a record without the backend's part,
// which Prepare gives every record it readies.
var errNoState = errors.New("the record holds no bucket or user")

// bucketCreation is what the record says of its bucket's creation.
func bucketCreation(s *engine.BucketState) ensure.Creation {
	return ensure.CreationOf(s.BucketAttempted, s.BucketCreated)
}

// userCreation is what the record says of its user's creation.
func userCreation(s *engine.BucketState) ensure.Creation {
	return ensure.CreationOf(s.UserAttempted, s.UserCreated)
}
