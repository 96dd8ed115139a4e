package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// shown is one record as `admin show` prints it: every field of the
// record but its secret and the free-form JSON the platform sent
// (parameters, context, bind_resource), of which only the keys are shown:
// either may hold a password.
type shown struct {
	row
	Fingerprint      string   `json:"fingerprint"`
	OrganizationGUID string   `json:"organizationGuid,omitempty"`
	SpaceGUID        string   `json:"spaceGuid,omitempty"`
	AppGUID          string   `json:"appGuid,omitempty"`
	ParameterKeys    []string `json:"parameterKeys,omitempty"`
	ContextKeys      []string `json:"contextKeys,omitempty"`
	Maintenance      string   `json:"maintenance,omitempty"`
	Predecessor      string   `json:"predecessor,omitempty"`
	// DashboardURL without its user information, query and fragment.
	DashboardURL string `json:"dashboardUrl,omitempty"`
	// Identity is the originating identity of the latest operation.
	Identity string                `json:"identity,omitempty"`
	Async    bool                  `json:"async,omitempty"`
	Bucket   *bucketShown          `json:"bucketState,omitempty"`
	Upstream *engine.UpstreamState `json:"upstreamState,omitempty"`
	// SecretSealed says whether the record holds a sealed secret (never
	// what it is).
	SecretSealed bool    `json:"secretSealed"`
	History      []opRow `json:"history,omitempty"`
	// Bindings are an instance's bindings' ids.
	Bindings []string `json:"bindings,omitempty"`
	// Marks is what the storage backend holds under the record's names,
	// with --check-marks; nil without.
	Marks *marksShown `json:"marks,omitempty"`
}

// bucketShown is engine.BucketState, which holds no secret.
type bucketShown = engine.BucketState

// marksShown is what the storage backend holds under a bucket record's
// names, as the audit observes it (driver Observe).
type marksShown struct {
	// Resource is "bucket" or "user"; Name its name.
	Resource string `json:"resource"`
	Name     string `json:"name"`
	Exists   bool   `json:"exists"`
	// Mark is the owner mark it carries (empty: none); Ours whether it is
	// the record's.
	Mark string `json:"mark,omitempty"`
	Ours bool   `json:"ours"`
	// KeyHeld says whether a binding's user has the key its record
	// handed out.
	KeyHeld *bool `json:"keyHeld,omitempty"`
}

func newShowCommand() *cobra.Command {
	var (
		cfg        storage.Config
		store      string
		output     string
		kind       string
		checkMarks bool
		stuckAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one instance or binding: its record, operations, backend names and owner marks",
		Long: `Show one instance or binding: the request it was made with, its phase,
its latest operation and the earlier ones the record keeps, the backend's
names for it (bucket, user, owner mark) and what its creation attempts
left recorded, its lease, and an instance's bindings.

No secret is printed: a binding's secret stays sealed (only whether there
is one is said), and of the parameters and context the platform sent only
the keys are shown. The store is opened read-only, so this is safe beside
a running serve.

--check-marks also asks the storage backend whether the bucket (or the
binding's user and key) exists and carries the record's owner mark, as
'admin audit' does, with serve's storage flags: --driver embedded starts
the embedded server on --data-dir, which works only while serve is stopped;
beside a running serve, point it at serve's endpoints with --driver s3iam
and the root keys in the environment. Without --check-marks the backend is
not asked, and the marks are reported as not checked. Upstream records
carry no mark of ours: there is nothing to check.`,
		Example: `  bucketbroker admin show 3f0c2a9e-5b1d-4c7e-9f0a-1b2c3d4e5f60 --data-dir ./data
  bucketbroker admin show 3f0c2a9e-5b1d-4c7e-9f0a-1b2c3d4e5f60 -o json

  # With the owner marks, against a running serve with the embedded server
  BUCKETBROKER_S3_ROOT_ACCESS_KEY=... BUCKETBROKER_S3_ROOT_SECRET_KEY=... \
    bucketbroker admin show 3f0c2a9e-5b1d-4c7e-9f0a-1b2c3d4e5f60 --check-marks --driver s3iam \
    --s3-endpoint http://127.0.0.1:9000 --iam-endpoint http://127.0.0.1:9001 --path-style`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			if kind != "" && kind != string(engine.KindInstance) && kind != string(engine.KindBinding) {
				return fmt.Errorf("--kind %q: want instance or binding", kind)
			}
			storeFromEnv(cmd, &store)
			if checkMarks {
				if err := storageFromEnv(&cfg); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			s, err := broker.OpenStoreReadOnly(ctx, store, cfg.DataDir)
			if err != nil {
				return err
			}
			defer closeQuietly(cmd, s.Close)
			r, err := findRecord(ctx, s, engine.Kind(kind), args[0])
			if err != nil {
				return err
			}
			sh := showOf(r, time.Now(), stuckAfter)
			if r.Kind == engine.KindInstance {
				if sh.Bindings, err = bindingsOf(ctx, s, r.ID); err != nil {
					return err
				}
			}
			if checkMarks && r.Bucket != nil {
				if sh.Marks, err = observeMarks(ctx, cfg, r); err != nil {
					return err
				}
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sh)
			}
			return writeShown(cmd.OutOrStdout(), sh, checkMarks, time.Now())
		},
	}
	f := cmd.Flags()
	bindStoreFlag(f, &store)
	bindStorageFlags(f, &cfg, storageFlagSet{})
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.StringVar(&kind, "kind", "", "instance or binding, where both an instance and a binding have the id (default: the instance)")
	f.BoolVar(&checkMarks, "check-marks", false, "ask the storage backend whether the record's bucket or user carries its owner mark (serve's storage flags)")
	f.DurationVar(&stuckAfter, "stuck-after", defaultStuckAfter, "as admin operations --stuck-after")
	return cmd
}

// findRecord returns the record of kind and id, or with no kind the
// instance of that id, else the binding.
func findRecord(ctx context.Context, s engine.Store, kind engine.Kind, id string) (*engine.Record, error) {
	kinds := []engine.Kind{engine.KindInstance, engine.KindBinding}
	if kind != "" {
		kinds = []engine.Kind{kind}
	}
	for _, k := range kinds {
		r, err := s.Get(ctx, k, id)
		if err == nil || !errors.Is(err, engine.ErrNotFound) {
			return r, err
		}
	}
	return nil, fmt.Errorf("no instance or binding has the id %q", id)
}

func bindingsOf(ctx context.Context, s engine.Store, instanceID string) ([]string, error) {
	var ids []string
	err := eachRecord(ctx, s, engine.ListOptions{Kind: engine.KindBinding, InstanceID: instanceID}, func(b *engine.Record) error {
		ids = append(ids, b.ID)
		return nil
	})
	return ids, err
}

func showOf(r *engine.Record, now time.Time, stuckAfter time.Duration) shown {
	sh := shown{row: rowOf(r, now, stuckAfter), Fingerprint: r.Fingerprint,
		OrganizationGUID: r.Request.OrganizationGUID, SpaceGUID: r.Request.SpaceGUID, AppGUID: r.Request.AppGUID,
		ParameterKeys: jsonKeys(r.Request.Parameters), ContextKeys: jsonKeys(r.Request.Context),
		Maintenance: r.Request.Maintenance, Predecessor: r.Request.Predecessor, DashboardURL: bareURL(r.DashboardURL),
		Identity: r.Op.Identity, Async: r.Op.Async, Bucket: r.Bucket, Upstream: r.Upstream, SecretSealed: len(r.SealedSecret) > 0}
	for _, o := range r.History {
		sh.History = append(sh.History, opRowOf(o))
	}
	return sh
}

// jsonKeys returns the keys of a JSON object, sorted; nil for anything else.
func jsonKeys(raw json.RawMessage) []string {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// bareURL returns u without user information, query or fragment, where
// a dashboard's token would be.
func bareURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || u == "" {
		return ""
	}
	p.User, p.RawQuery, p.Fragment, p.RawFragment = nil, "", "", ""
	return p.String()
}

// observeMarks starts the storage backend as admin audit does and asks
// it, as the audit confirms a finding, what it holds under r's name.
func observeMarks(ctx context.Context, cfg storage.Config, r *engine.Record) (*marksShown, error) {
	var err error
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.Driver == storage.DriverEmbedded || cfg.Driver == "" {
		if err := embeddedDataExists(cfg); err != nil {
			return nil, err
		}
	}
	ab, err := startAuditBackend(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = ab.be.Stop(sctx)
	}()
	req := driver.ObserveRequest{Bucket: r.Bucket.Bucket}
	m := &marksShown{Resource: "bucket", Name: r.Bucket.Bucket}
	if r.Kind == engine.KindBinding {
		req = driver.ObserveRequest{UserName: r.Bucket.UserName}
		m = &marksShown{Resource: "user", Name: r.Bucket.UserName}
	}
	obs, err := ab.Observe(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("look at the %s %s: %w", m.Resource, m.Name, err)
	}
	m.Exists, m.Mark = obs.BucketExists, obs.BucketOwner
	if r.Kind == engine.KindBinding {
		m.Exists, m.Mark = obs.UserExists, obs.UserOwner
		held := r.Bucket.AccessKeyID != "" && slices.Contains(obs.KeyIDs, r.Bucket.AccessKeyID)
		m.KeyHeld = &held
	}
	m.Ours = m.Exists && m.Mark == r.Bucket.Owner
	return m, nil
}

func writeShown(w io.Writer, sh shown, checked bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	ago := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		if t.After(now) {
			return stamp(t) + " (in " + duration.HumanDuration(t.Sub(now)) + ")"
		}
		return stamp(t) + " (" + duration.HumanDuration(now.Sub(t)) + " ago)"
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	line("Kind", string(sh.Kind))
	line("ID", sh.ID)
	line("Instance", sh.InstanceID)
	line("Service", sh.ServiceID)
	line("Plan", sh.PlanID)
	line("Organization", sh.OrganizationGUID)
	line("Space", sh.SpaceGUID)
	line("App", sh.AppGUID)
	line("Parameters", keysLine(sh.ParameterKeys))
	line("Context", keysLine(sh.ContextKeys))
	line("Maintenance", sh.Maintenance)
	line("Rotates", sh.Predecessor)
	line("Fingerprint", sh.Fingerprint)
	line("Phase", string(sh.Phase))
	line("Created", ago(sh.CreatedAt))
	line("Updated", ago(sh.UpdatedAt))
	line("Version", fmt.Sprint(sh.Version))
	lease := "none"
	if sh.Lease != "" {
		lease = sh.Lease + " until " + ago(sh.LeaseUntil)
	}
	line("Lease", lease)
	line("Backend", sh.Backend)
	if b := sh.Bucket; b != nil {
		line("Bucket", b.Bucket)
		if sh.Kind == engine.KindInstance {
			line("Bucket attempted", yes(b.BucketAttempted))
			line("Bucket created", yes(b.BucketCreated))
		} else {
			line("User", b.UserName)
			line("User attempted", yes(b.UserAttempted))
			line("User created", yes(b.UserCreated))
			line("Access", b.Access)
			line("Access key id", b.AccessKeyID)
		}
		line("Owner mark", b.Owner)
	}
	if u := sh.Upstream; u != nil {
		line("Upstream attempted", yes(u.Attempted))
		if u.Op.OpID != "" {
			line("Upstream operation", fmt.Sprintf("%q, polled for operation %s", u.Op.Operation, u.Op.OpID))
		}
	}
	line("Dashboard", sh.DashboardURL)
	if sh.Kind == engine.KindBinding {
		line("Secret", map[bool]string{true: "sealed (not shown)", false: "none"}[sh.SecretSealed])
	}
	switch {
	case sh.Bucket == nil:
		line("Owner marks", "none to check (not a bucket record)")
	case !checked:
		line("Owner marks", "not checked (--check-marks asks the storage backend)")
	case sh.Marks != nil:
		marks := marksLine(sh.Marks)
		if sh.Phase == engine.PhaseDeleted && !sh.Marks.Exists {
			marks += " (as expected: the record is deleted)"
		}
		line("Owner marks", marks)
	}
	o := sh.Operation
	line("Operation", fmt.Sprintf("%s %s (id %s)", o.Type, o.State, o.ID))
	line("  Description", o.Description)
	line("  Started", ago(o.StartedAt))
	if o.State == engine.OpInProgress {
		line("  Deadline", ago(o.Deadline))
	}
	line("  Ended", ago(o.EndedAt))
	if sh.Async {
		line("  Async", "yes")
	}
	line("  Identity", sh.Identity)
	line("  Stuck", sh.Stuck)
	if sh.Kind == engine.KindInstance {
		bindings := "none"
		if len(sh.Bindings) > 0 {
			bindings = fmt.Sprintf("%d: %s", len(sh.Bindings), strings.Join(sh.Bindings, " "))
		}
		line("Bindings", bindings)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(sh.History) == 0 {
		return nil
	}
	fmt.Fprintln(w, "Earlier operations, newest first:")
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  OPERATION\tSTATE\tSTARTED\tENDED\tDESCRIPTION")
	for _, h := range sh.History {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", h.Type, h.State, stamp(h.StartedAt), stamp(h.EndedAt), truncate(h.Description, 80))
	}
	return tw.Flush()
}

func keysLine(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return strings.Join(keys, ", ") + " (values not shown)"
}

func marksLine(m *marksShown) string {
	switch {
	case !m.Exists:
		return fmt.Sprintf("the %s %s does not exist", m.Resource, m.Name)
	case m.Ours && m.KeyHeld != nil && !*m.KeyHeld:
		return fmt.Sprintf("the %s %s carries the record's mark, but lacks the record's key", m.Resource, m.Name)
	case m.Ours:
		return fmt.Sprintf("the %s %s carries the record's mark", m.Resource, m.Name)
	case m.Mark == "":
		return fmt.Sprintf("the %s %s carries no owner mark", m.Resource, m.Name)
	}
	return fmt.Sprintf("the %s %s carries another owner's mark %s", m.Resource, m.Name, m.Mark)
}
