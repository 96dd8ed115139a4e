package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

func newAdminCommand() *cobra.Command {
	admin := &cobra.Command{
		Use:   "admin",
		Short: "Maintenance tasks for operators",
	}
	admin.AddCommand(newMigrateCommand(), newAuditCommand(), newRecordsCommand(),
		newInstancesCommand(), newBindingsCommand(), newOperationsCommand(), newShowCommand())
	return admin
}

func newMigrateCommand() *cobra.Command {
	var store, dataDir string
	var newStore bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the state store's schema, then exit",
		Long: `Create or upgrade the state store's schema, then exit.

serve migrates on start as well, and migrations are safe to run from several
replicas at once; run this on its own to upgrade the schema before rolling out
a new version, or to check that the store is reachable.

A store whose database is empty (or missing) is created only where nothing
says that records were kept before: the SQLite store's marker beside its file
(bucketbroker.db.created), or the data dir's state from an earlier start (the
encryption key, the replica id, the embedded server's data). Otherwise the
database was lost, and serve, like this command, refuses to start: restore it
from a backup. --new-store starts over on purpose: it creates a new, empty
store in the empty database. The buckets and users of the lost records stay in
the backend (admin audit lists them as leaks). A store that holds records is
never emptied.`,
		Example: `  BUCKETBROKER_STORE='postgres://bucketbroker@db.internal/bucketbroker' bucketbroker admin migrate
  bucketbroker admin migrate --data-dir ./data

  # Start over with an empty store after the database was lost
  bucketbroker admin migrate --data-dir ./data --new-store`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			storeFromEnv(cmd, &store)
			open := broker.OpenStore
			if newStore {
				open = broker.StartOverStore
			}
			s, err := open(cmd.Context(), store, dataDir)
			if err != nil {
				return err
			}
			if err := s.Close(); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "The store's schema is up to date.")
			return nil
		},
	}
	bindStoreFlag(cmd.Flags(), &store)
	bindDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().BoolVar(&newStore, "new-store", false, "create a new, empty store where the database is empty or missing although records were kept before (starting over on purpose)")
	return cmd
}

// exitDrift ends the process with status 2 once an audit has left drift
// behind (status 1 stays "the audit could not run"). Tests replace it.
var exitDrift = func() { os.Exit(2) }

type auditOptions struct {
	cfg      storage.Config
	store    string
	output   string
	fix, yes bool
	purge    bool
	timeout  time.Duration
	ups      upstreamSources
	// pprofListen serves the profiling endpoints while the audit runs
	// (bindPprofFlag).
	pprofListen string
}

func newAuditCommand() *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Compare the storage backend with the store: leaks, missing resources, unknown keys",
		Long: `Compare the storage backend with the store, and report:

  leak         a bucket or user named under --name-prefix that carries a
               bucketbroker owner mark, and whose mark is not that of a live
               record (no record, or only the tombstone of a deleted one);
  missing      a ready instance without its bucket, a ready binding without its
               user or without the key it handed out;
  unknown-key  a key of a binding's user other than the one its record holds.

Resources without our owner mark are never judged nor touched, nor are those of
records whose operation is in progress (audit again when it has finished), nor
marks of kinds this store does not keep (ObjectBucketClaims).

--fix deletes leaks and unknown keys through the driver, which checks the owner
mark again first: buckets only when empty (unless --purge), users with their keys
and policies. Missing resources are only reported: the platform must deprovision
and provision (unbind and bind) again. --fix asks for confirmation on the
terminal unless --yes; without a terminal it needs --yes.

With serve's --upstream or --upstream-config flags it also compares each ready
record of an upstream's service with the upstream's GET, where its catalog says
instances_retrievable (bindings_retrievable): missing, a record the upstream
does not know; differs, an instance of another service or plan upstream. Where
the catalog does not offer GET, the record is listed as not judged. --fix
never acts on upstream findings (report only). --bucket-service=false audits
the upstreams' records only, without a storage backend.

The storage flags are serve's. With --driver embedded the audit starts the
embedded server on --data-dir itself, on serve's addresses; while serve runs
they are taken, and the audit asks to be pointed at the running server with
--driver s3iam instead.

Exit status: 0 no drift (or all of it fixed), 1 the audit could not run,
2 drift remains (printed).`,
		Example: `  # The embedded server of a stopped serve
  bucketbroker admin audit --data-dir ./data

  # A running serve with the embedded server: audit through its endpoints
  BUCKETBROKER_S3_ROOT_ACCESS_KEY=... BUCKETBROKER_S3_ROOT_SECRET_KEY=... \
    bucketbroker admin audit --data-dir ./data --driver s3iam \
    --s3-endpoint http://127.0.0.1:9000 --iam-endpoint http://127.0.0.1:9001 --path-style

  # Machine-readable, then remove leaks and unknown keys without asking
  bucketbroker admin audit --output json
  bucketbroker admin audit --fix --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "text" && o.output != "json" {
				return fmt.Errorf("--output %q: want text or json", o.output)
			}
			storeFromEnv(cmd, &o.store)
			if err := storageFromEnv(&o.cfg); err != nil {
				return err
			}
			if err := checkPprofFlag(o.pprofListen); err != nil {
				return err
			}
			if o.fix && !o.yes && !isTerminal(cmd.InOrStdin()) {
				return fmt.Errorf("--fix deletes backend resources and asks for confirmation, but standard input is not a terminal: pass --yes to fix without asking")
			}
			drift, err := runAudit(cmd, o)
			if err != nil {
				return err
			}
			if drift {
				exitDrift()
			}
			return nil
		},
	}
	f := cmd.Flags()
	bindStoreFlag(f, &o.store)
	bindStorageFlags(f, &o.cfg, storageFlagSet{})
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.fix, "fix", false, "delete leaks and unknown keys (never missing resources, never anything without our owner mark)")
	f.BoolVar(&o.yes, "yes", false, "with --fix: do not ask for confirmation")
	f.BoolVar(&o.purge, "purge", false, "with --fix: delete leaked buckets that still hold objects, objects and all")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	o.ups.bind(f)
	bindPprofFlag(f, &o.pprofListen)
	return cmd
}

// runAudit audits, fixes when asked, prints the report, and says whether
// drift remains. Every part it started is stopped before it returns.
func runAudit(cmd *cobra.Command, o auditOptions) (drift bool, err error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	// Its one log line (the address) goes to standard error, with the
	// audit's errors: standard output is the report's.
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	prof, err := startPprof(o.pprofListen, logger)
	if err != nil {
		return false, err
	}
	defer stopPprof(prof, logger)
	if o.cfg.DataDir, err = filepath.Abs(o.cfg.DataDir); err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	ups, err := o.ups.auditUpstreams(ctx)
	if err != nil {
		return false, err
	}
	if o.ups.bucketService && (o.cfg.Driver == storage.DriverEmbedded || o.cfg.Driver == "") {
		if err := embeddedDataExists(o.cfg); err != nil {
			return false, err
		}
	}
	store, err := broker.OpenStore(ctx, o.store, o.cfg.DataDir)
	if err != nil {
		return false, err
	}
	defer store.Close()
	opts := audit.Options{Store: store, Upstreams: ups, Prefix: o.cfg.Prefix, Purge: o.purge, Logger: logger}
	if o.ups.bucketService {
		var ab auditBackend
		if ab, err = startAuditBackend(ctx, o.cfg); err != nil {
			return false, err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if serr := ab.be.Stop(sctx); serr != nil && err == nil {
				err = fmt.Errorf("stop the embedded server: %w", serr)
			}
		}()
		opts.Driver = ab
	}
	return auditReport(ctx, cmd, o, opts)
}

// auditBackend is the audit's driver and the backend that serves it.
type auditBackend struct {
	audit.Driver
	be *storage.Storage
}

var _ driver.PagedAuditable = auditBackend{}

// InventoryPages hands the driver's inventory out in its pages
// (driver.InventoryPages), which the embedded interface would hide: the
// audit would take it whole, every bucket and user at once.
func (b auditBackend) InventoryPages(ctx context.Context, namePrefix string, page func(driver.Inventory) error) error {
	return driver.InventoryPages(ctx, b.Driver, namePrefix, page)
}

// startAuditBackend starts the storage backend an audit compares.
func startAuditBackend(ctx context.Context, cfg storage.Config) (auditBackend, error) {
	var be *storage.Storage
	// versitygw prints its start-up lines to standard output, where they
	// would spoil --output json.
	err := withStdoutOnStderr(func() (err error) {
		be, err = storage.Start(ctx, cfg)
		return err
	})
	if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, s3gateway.ErrDataDirInUse) {
		return auditBackend{}, fmt.Errorf("the embedded server's data dir or its address %s or %s is in use: is `bucketbroker serve` running on %s? "+
			"Audit the running server instead: --driver s3iam --s3-endpoint http://%s --iam-endpoint http://%s --path-style, "+
			"with BUCKETBROKER_S3_ROOT_ACCESS_KEY and BUCKETBROKER_S3_ROOT_SECRET_KEY from %s",
			cfg.S3Listen, cfg.IAMListen, cfg.DataDir, cfg.S3Listen, cfg.IAMListen,
			filepath.Join(cfg.DataDir, "s3-root-credentials.json"))
	}
	if err != nil {
		return auditBackend{}, err
	}
	drv, ok := be.Driver.(audit.Driver)
	if !ok {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = be.Stop(sctx)
		return auditBackend{}, fmt.Errorf("driver %T cannot list what it made: no audit", be.Driver)
	}
	return auditBackend{Driver: drv, be: be}, nil
}

// auditReport runs the audit, fixes when asked, prints the report, and
// says whether drift remains.
func auditReport(ctx context.Context, cmd *cobra.Command, o auditOptions, opts audit.Options) (bool, error) {
	rep, err := audit.Run(ctx, opts)
	if err != nil {
		return false, err
	}
	if o.fix && slices.ContainsFunc(rep.Findings, audit.Finding.Fixable) {
		confirmed := o.yes
		if !confirmed {
			if err := rep.WriteText(cmd.ErrOrStderr()); err != nil {
				return false, err
			}
			confirmed, err = confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), fixPrompt(rep))
			if err != nil {
				return false, err
			}
		}
		if !confirmed {
			fmt.Fprintln(cmd.ErrOrStderr(), "Nothing fixed.")
		} else if err := audit.Fix(ctx, opts, rep); err != nil {
			return false, err
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(cmd.OutOrStdout())
		if err == nil && !o.fix && slices.ContainsFunc(rep.Findings, audit.Finding.Fixable) {
			fmt.Fprintln(cmd.OutOrStdout(), "Run again with --fix to delete the leaks and unknown keys.")
		}
	}
	if err != nil {
		return false, err
	}
	return rep.Drift(), nil
}

// embeddedDataExists refuses to audit a data dir that holds no embedded
// server: starting one would create an empty server (and new root keys)
// and report every record's resources missing.
func embeddedDataExists(cfg storage.Config) error {
	need := []string{filepath.Join(cfg.DataDir, "s3")}
	if cfg.RootAccessKey == "" {
		need = append(need, filepath.Join(cfg.DataDir, "s3-root-credentials.json"))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("no embedded server data in %s (%w): point --data-dir at serve's, or use --driver s3iam for an external server", cfg.DataDir, err)
		}
	}
	return nil
}

func fixPrompt(rep *audit.Report) string {
	var buckets, users, keys int
	for _, f := range rep.Findings {
		if !f.Fixable() {
			continue
		}
		switch f.Resource {
		case audit.ResourceBucket:
			buckets++
		case audit.ResourceUser:
			users++
		case audit.ResourceKey:
			keys++
		}
	}
	return fmt.Sprintf("Delete %d leaked buckets, %d leaked users and %d unknown keys listed above? [y/N] ", buckets, users, keys)
}

// confirm asks on out and reads one line from in: only y or yes agrees.
func confirm(in io.Reader, out io.Writer, prompt string) (bool, error) {
	fmt.Fprint(out, prompt)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// withStdoutOnStderr runs f with file descriptor 1 pointing at standard
// error. It works on the descriptor, not on os.Stdout, so that goroutines
// f starts (versitygw's) need no synchronization with the swap.
func withStdoutOnStderr(f func() error) error {
	saved, err := unix.Dup(1)
	if err != nil {
		return f()
	}
	defer unix.Close(saved)
	if err := unix.Dup2(2, 1); err != nil {
		return f()
	}
	defer unix.Dup2(saved, 1) //nolint:errcheck // nothing better to do than keep the redirect
	return f()
}

// storeFlags are the flags of the commands that only need the store.
type storeFlags struct {
	store, dataDir string
}

func (f *storeFlags) bind(cmd *cobra.Command) {
	bindStoreFlag(cmd.Flags(), &f.store)
	bindDataDirFlag(cmd.Flags(), &f.dataDir)
}

// open opens the store as a RawStore.
func (f *storeFlags) open(cmd *cobra.Command) (store.RawStore, func() error, error) {
	storeFromEnv(cmd, &f.store)
	s, err := broker.OpenStore(cmd.Context(), f.store, f.dataDir)
	if err != nil {
		return nil, nil, err
	}
	raw, ok := s.(store.RawStore)
	if !ok {
		_ = s.Close()
		return nil, nil, fmt.Errorf("store %T cannot hand out records undecoded", s)
	}
	return raw, s.Close, nil
}

func newRecordsCommand() *cobra.Command {
	var f storeFlags
	var output string
	cmd := &cobra.Command{
		Use:   "records",
		Short: "List the records the store cannot read (serve skips them)",
		Long: `List the records in the store that cannot be decoded.

serve skips such a record (start-up, the sweep and every other record's
operations go on), logs it, counts it in bucketbroker_store_unreadable_records
and mentions it on /readyz; requests for its own id fail, and the deprovision
of an instance with such a binding waits for it. bucketbroker never
writes such records: they are damaged, or were written to the store
outside bucketbroker (a field nested deeper than a record may be is
repaired by 'bucketbroker admin records repair').

Exit status: 0 none, 1 the store could not be read, 2 unreadable records
remain (printed).`,
		Example: `  bucketbroker admin records --data-dir ./data
  BUCKETBROKER_STORE='postgres://bucketbroker@db.internal/bucketbroker' bucketbroker admin records -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			s, closeStore, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeQuietly(cmd, closeStore)
			found, err := store.FindUnreadable(cmd.Context(), s)
			if err != nil {
				return err
			}
			if err := writeUnreadable(cmd.OutOrStdout(), output, found); err != nil {
				return err
			}
			if len(found) > 0 {
				exitDrift()
			}
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(newRepairCommand())
	return cmd
}

func writeUnreadable(w io.Writer, output string, found []engine.UnreadableRecord) error {
	if output == "json" {
		if found == nil {
			found = []engine.UnreadableRecord{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(found)
	}
	if len(found) == 0 {
		_, err := fmt.Fprintln(w, "Every record is readable.")
		return err
	}
	for _, u := range found {
		instance := ""
		if u.InstanceID != "" {
			instance = " of instance " + u.InstanceID
		}
		if _, err := fmt.Fprintf(w, "%s %s%s (version %d): %s\n", u.Kind, u.ID, instance, u.Version, u.Error); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, "Repair them with: bucketbroker admin records repair --all (or KIND ID)")
	return err
}

func newRepairCommand() *cobra.Command {
	var f storeFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "repair [KIND ID]",
		Short: "Make unreadable records readable again",
		Long: `Make unreadable records readable again: every object or array nested
deeper than a record may be is replaced by null, the rest of the record is
kept, and it is written back with a compare-and-swap on the version it was
read at (a record changed in between is left for another run). The repaired
record's parameters, context or bind_resource lose their too-deep part;
its operation, backend names and credentials are as they were, so the
platform can deprovision or unbind it as usual (a deprovision that waited
for such a binding goes on when sent again).

Safe while serve runs, on any number of replicas. Readable records are
never changed.`,
		Example: `  bucketbroker admin records repair --data-dir ./data --all
  bucketbroker admin records repair binding 2f7c1e0a-9d4b-4d0e-8a53-6c1f0e2b9a77`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all != (len(args) == 0) || (len(args) != 0 && len(args) != 2) {
				return errors.New("give either KIND ID or --all")
			}
			if len(args) == 2 && args[0] != string(engine.KindInstance) && args[0] != string(engine.KindBinding) {
				return fmt.Errorf("kind %q: want instance or binding", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			s, closeStore, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeQuietly(cmd, closeStore)
			var targets []engine.UnreadableRecord
			if all {
				if targets, err = store.FindUnreadable(cmd.Context(), s); err != nil {
					return err
				}
			} else {
				targets = []engine.UnreadableRecord{{Kind: engine.Kind(args[0]), ID: args[1]}}
			}
			out := cmd.OutOrStdout()
			var failed []error
			for _, u := range targets {
				r, err := store.Repair(cmd.Context(), s, u.Kind, u.ID)
				switch {
				case errors.Is(err, store.ErrReadable):
					fmt.Fprintf(out, "%s %s is readable: nothing to repair\n", u.Kind, u.ID)
				case err != nil:
					failed = append(failed, err)
				default:
					fmt.Fprintf(out, "%s %s repaired: %d values nested too deep replaced by null (now version %d)\n", u.Kind, u.ID, r.Pruned, r.Version)
				}
			}
			if all && len(targets) == 0 {
				fmt.Fprintln(out, "Every record is readable.")
			}
			return errors.Join(failed...)
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "repair every unreadable record")
	return cmd
}

// closeQuietly runs a command's deferred close, saying on standard error
// when it fails (the command's own answer is already written).
func closeQuietly(cmd *cobra.Command, closeFn func() error) {
	if err := closeFn(); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "close: %v\n", err)
	}
}
