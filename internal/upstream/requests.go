package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
)

var _ engine.Backend = (*Upstream)(nil)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrInvalid, fmt.Sprintf(format, args...))
}

// Check checks a request before it is recorded. An instance's parameters
// are the upstream's to judge. A rotation (the predecessor is forwarded
// upstream) needs a plan the upstream's catalog says binding_rotatable.
func (u *Upstream) Check(kind engine.Kind, plan *catalog.Plan, r engine.Request, id string) error {
	if kind != engine.KindBinding {
		return nil
	}
	switch {
	case r.Predecessor != "" && !plan.Rotatable():
		return invalidf("plan %q does not allow binding rotation: the upstream broker's catalog does not say binding_rotatable for it", plan.Name)
	case r.Predecessor != "" && r.Predecessor == id:
		return invalidf("binding %s cannot rotate itself", id)
	}
	return nil
}

// Prepare gives a new record the upstream's part; a failed one retried
// waits for no upstream operation of the attempt before.
func (u *Upstream) Prepare(_ context.Context, rec *engine.Record, _ engine.Preparation) error {
	if rec.Upstream == nil {
		rec.Upstream = &engine.UpstreamState{}
	}
	rec.Upstream.Op = engine.UpstreamOp{}
	return nil
}

// Allows allows every binding: the upstream judges a plan change itself.
func (u *Upstream) Allows(*catalog.Plan, *engine.Record) (string, bool) { return "", true }

// errNoStoredCredentials: the record holds no credentials to answer.
var errNoStoredCredentials = errors.New("no credentials stored")

// Credentials are the JSON object the upstream answered, as it gave it.
func (u *Upstream) Credentials(_ *engine.Record, secret []byte) (*engine.Credentials, json.RawMessage, error) {
	if len(secret) == 0 {
		return nil, nil, errNoStoredCredentials
	}
	return nil, json.RawMessage(secret), nil
}

// errNoState ends an operation of a record without the upstream's part,
// which Prepare gives every record it readies.
var errNoState = errors.New("the record holds no upstream state")
