package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// Config describes one upstream broker.
type Config struct {
	// Name names the upstream in records, logs and metrics: lowercase
	// letters, digits and inner hyphens.
	Name string
	// Client says where the upstream is and how to reach it.
	Client osbclient.Config
	// Services and Plans, when not empty, keep only the services and
	// plans they name (by id or by name).
	Services, Plans []string
	// PollInterval is the pause between two polls of an upstream
	// operation (default 1 second).
	PollInterval time.Duration
	// Metrics, when set, counts the requests to the upstream.
	Metrics *Metrics
}

// ErrFilter means the upstream's catalog leaves nothing to serve, or lacks what
// the service or plan filter names.
var ErrFilter = errors.New("catalog does not fit the filter")

// Upstream is the engine.Backend of one upstream
// broker. Call FetchCatalog before handing it to the engine.
type Upstream struct {
	cfg      Config
	client   *osbclient.Client
	services []osbclient.Service
	byID     map[string]*osbclient.Service
}

// New checks cfg and returns the upstream; it makes no request.
func New(cfg Config) (*Upstream, error) {
	if !validName(cfg.Name) {
		return nil, fmt.Errorf("upstream %q: the name must be 1-63 lowercase letters, digits or inner hyphens", cfg.Name)
	}
	if cfg.Metrics != nil {
		cfg.Client.Wrap = cfg.Metrics.wrap(cfg.Name)
	}
	c, err := osbclient.New(cfg.Client)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", cfg.Name, err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	return &Upstream{cfg: cfg, client: c, byID: map[string]*osbclient.Service{}}, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// Name names the upstream.
func (u *Upstream) Name() string { return u.cfg.Name }

// URL is the upstream's URL, without credentials.
func (u *Upstream) URL() string { return u.client.URL() }

// Client is the upstream's OSB client.
func (u *Upstream) Client() *osbclient.Client { return u.client }

// FetchCatalog reads the upstream's catalog and keeps the services and
// plans the filter lets through. A filter that names nothing the upstream
// offers is an error, as is a catalog with no services left.
func (u *Upstream) FetchCatalog(ctx context.Context) error {
	cat, err := u.client.Catalog(ctx)
	if err != nil {
		return fmt.Errorf("upstream %s: fetch catalog: %w", u.cfg.Name, err)
	}
	services, err := filter(cat.Services, u.cfg.Services, u.cfg.Plans)
	if err != nil {
		return fmt.Errorf("upstream %s: %w: %w", u.cfg.Name, ErrFilter, err)
	}
	u.services = services
	u.byID = map[string]*osbclient.Service{}
	for i := range u.services {
		u.byID[u.services[i].ID] = &u.services[i]
	}
	return nil
}

// filter keeps the services and plans named (by id or name) in services and
// plans (empty: all).
func filter(all []osbclient.Service, services, plans []string) ([]osbclient.Service, error) {
	named := func(list []string, id, name string) bool {
		return len(list) == 0 || slices.Contains(list, id) || slices.Contains(list, name)
	}
	var out []osbclient.Service
	seenS, seenP := map[string]bool{}, map[string]bool{}
	for _, s := range all {
		if !named(services, s.ID, s.Name) {
			continue
		}
		seenS[s.ID], seenS[s.Name] = true, true
		var kept []osbclient.Plan
		for _, p := range s.Plans {
			if named(plans, p.ID, p.Name) {
				seenP[p.ID], seenP[p.Name] = true, true
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			continue
		}
		s.Plans = kept
		out = append(out, s)
	}
	for _, n := range services {
		if !seenS[n] {
			return nil, fmt.Errorf("the service filter names %q, which the upstream's catalog does not offer", n)
		}
	}
	for _, n := range plans {
		if !seenP[n] {
			return nil, fmt.Errorf("the plan filter names %q, which no service of the upstream's catalog kept by the filter offers", n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no service of the upstream's catalog is left to serve")
	}
	return out, nil
}

// Services are the upstream's services kept by the filter, as its catalog
// gave them (Raw included), with only the kept plans decoded.
func (u *Upstream) Services() []osbclient.Service { return u.services }

// ServiceIDs are the ids of Services.
func (u *Upstream) ServiceIDs() []string {
	ids := make([]string, len(u.services))
	for i, s := range u.services {
		ids[i] = s.ID
	}
	return ids
}

func (u *Upstream) service(id string) osbclient.Service {
	if s, ok := u.byID[id]; ok {
		return *s
	}
	return osbclient.Service{ID: id}
}

// refused reports whether err is an upstream answer that no retry changes:
// a 4xx other than 408, 409, 429, the ones that may be the upstream's own
// trouble (401, 403: its credentials are being fixed) and ConcurrencyError.
func refused(err error) bool {
	var e *osbclient.Error
	if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
		return false
	}
	switch e.Status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests,
		http.StatusUnauthorized, http.StatusForbidden:
		return false
	case http.StatusUnprocessableEntity:
		return e.Code != osbclient.CodeConcurrencyError
	}
	return true
}

// classify wraps a refusal for the engine (engine.ErrRefused: the
// operation fails at once, answered 422) and leaves anything else
// transient.
func classify(err error) error {
	if refused(err) {
		return refusal{err}
	}
	return err
}

// refusal is an upstream's refusal, marked engine.ErrRefused without
// adding that error's text to the upstream's.
type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{engine.ErrRefused, r.err} }

// step runs call as the engine's retried step, its errors described for
// the platform (trouble).
func (u *Upstream) step(ctx context.Context, w *engine.Work, what string, call func(context.Context) error) error {
	return w.Step(ctx, what, func(ctx context.Context) error { return u.troubled(call(ctx)) })
}

// troubled wraps err as trouble where it holds no answer of the upstream
// or a 5xx (anywhere in its tree: a look that failed beside a create).
func (u *Upstream) troubled(err error) error {
	var t *trouble
	if err == nil || errors.As(err, &t) {
		return err
	}
	if desc := u.troubleText(err); desc != "" {
		return &trouble{err: err, desc: desc}
	}
	return err
}

// troubleText is what the platform reads of err when err is the upstream's
// trouble, not its answer: a transport failure, a timeout, an answer that
// cannot be read, a 5xx. Empty for anything else (a 4xx says what the
// upstream decided, in its own words, and reaches the platform as it is).
func (u *Upstream) troubleText(err error) string {
	var text string
	walk(err, func(err error) bool {
		var ne net.Error
		var oe *osbclient.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			text = fmt.Sprintf("upstream %s did not answer in time", u.cfg.Name)
		case errors.As(err, new(*url.Error)), errors.As(err, new(*net.OpError)):
			text = fmt.Sprintf("upstream %s is unreachable", u.cfg.Name)
		case errors.As(err, &oe):
			if oe.Status < 500 {
				return false
			}
			text = fmt.Sprintf("upstream %s failed: it answered %d %s", u.cfg.Name, oe.Status, http.StatusText(oe.Status))
		case errors.Is(err, osbclient.ErrResponseTooLarge), errors.As(err, new(*json.SyntaxError)), errors.As(err, new(*json.UnmarshalTypeError)):
			text = fmt.Sprintf("upstream %s gave an answer that cannot be read", u.cfg.Name)
		default:
			return false
		}
		return true
	})
	return text
}

// walk calls f on err and on every error err wraps, depth first, until f
// returns true.
func walk(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	switch x := err.(type) { //nolint:errorlint // walks the tree itself, one error at a time
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if walk(e, f) {
				return true
			}
		}
		return false
	case interface{ Unwrap() error }:
		if walk(x.Unwrap(), f) {
			return true
		}
	}
	return f(err)
}

// trouble is an upstream failure that says nothing about the request: its
// Error is the whole account, for the log; its Description
// (engine.Described) names the upstream and what went wrong, for the
// platform, without addresses or transport details.
type trouble struct {
	err  error
	desc string
}

func (t *trouble) Error() string       { return t.err.Error() }
func (t *trouble) Unwrap() error       { return t.err }
func (t *trouble) Description() string { return t.desc }

// notFound reports whether err is the upstream's 404 or 410.
func notFound(err error) bool {
	return osbclient.IsStatus(err, http.StatusNotFound) || osbclient.IsStatus(err, http.StatusGone)
}

// CatalogSource is the upstream's part of bucketbroker's catalog: the
// services the filter kept, each as the upstream served it but with only
// the plans the filter kept.
func (u *Upstream) CatalogSource() (catalog.Source, error) {
	src := catalog.Source{Upstream: u.cfg.Name}
	for _, s := range u.services {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(s.Raw, &obj); err != nil {
			return src, fmt.Errorf("upstream %s: service %q: %w", u.cfg.Name, s.Name, err)
		}
		var plans []json.RawMessage
		if err := json.Unmarshal(obj["plans"], &plans); err != nil {
			return src, fmt.Errorf("upstream %s: plans of service %q: %w", u.cfg.Name, s.Name, err)
		}
		kept := map[string]bool{}
		for _, p := range s.Plans {
			kept[p.ID] = true
		}
		var out []json.RawMessage
		for _, raw := range plans {
			var p struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return src, fmt.Errorf("upstream %s: a plan of service %q: %w", u.cfg.Name, s.Name, err)
			}
			if kept[p.ID] {
				out = append(out, raw)
			}
		}
		b, err := json.Marshal(out)
		if err != nil {
			return src, fmt.Errorf("upstream %s: encode service %q: %w", u.cfg.Name, s.Name, err)
		}
		obj["plans"] = b
		if b, err = json.Marshal(obj); err != nil {
			return src, fmt.Errorf("upstream %s: encode service %q: %w", u.cfg.Name, s.Name, err)
		}
		src.Services = append(src.Services, b)
	}
	return src, nil
}
