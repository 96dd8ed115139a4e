package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
)

func newAdminCommand() *cobra.Command {
	admin := &cobra.Command{
		Use:   "admin",
		Short: "Maintenance tasks for operators",
	}
	admin.AddCommand(newMigrateCommand(), newAuditCommand())
	return admin
}

func newMigrateCommand() *cobra.Command {
	var store, dataDir string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the state store's schema, then exit",
		Long: `Create or upgrade the state store's schema, then exit.

serve migrates on start as well, and migrations are safe to run from several
replicas at once; run this on its own to upgrade the schema before rolling out
a new version, or to check that the store is reachable.`,
		Example: `  BUCKETBROKER_STORE='postgres://bucketbroker@db.internal/bucketbroker' bucketbroker admin migrate
  bucketbroker admin migrate --data-dir ./data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("store") {
				store = os.Getenv("BUCKETBROKER_STORE")
			}
			s, err := broker.OpenStore(cmd.Context(), store, dataDir)
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
	cmd.Flags().StringVar(&store, "store", "", "state store: a PostgreSQL DSN or a SQLite file (default <data-dir>/bucketbroker.db); also from BUCKETBROKER_STORE")
	cmd.Flags().StringVar(&dataDir, "data-dir", "./data", "folder of the default SQLite file")
	return cmd
}

// exitDrift ends the process with status 2 once an audit has left drift
// behind (status 1 stays "the audit could not run"). Tests replace it.
var exitDrift = func() { os.Exit(2) }

type auditOptions struct {
	cfg      broker.Config
	output   string
	fix, yes bool
	purge    bool
	timeout  time.Duration
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
			if !cmd.Flags().Changed("store") {
				o.cfg.Store = os.Getenv("BUCKETBROKER_STORE")
			}
			o.cfg.RootAccessKey, o.cfg.RootSecretKey = os.Getenv("BUCKETBROKER_S3_ROOT_ACCESS_KEY"), os.Getenv("BUCKETBROKER_S3_ROOT_SECRET_KEY")
			if o.cfg.Driver == broker.DriverS3IAM && (o.cfg.RootAccessKey == "" || o.cfg.RootSecretKey == "") {
				return fmt.Errorf("--driver s3iam needs BUCKETBROKER_S3_ROOT_ACCESS_KEY and BUCKETBROKER_S3_ROOT_SECRET_KEY in the environment")
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
	f.StringVar(&o.cfg.DataDir, "data-dir", "./data", "serve's --data-dir: the default SQLite store and (embedded driver) the embedded server's data")
	f.StringVar(&o.cfg.Store, "store", "", "state store: a PostgreSQL DSN or a SQLite file (default <data-dir>/bucketbroker.db); also from BUCKETBROKER_STORE")
	f.StringVar(&o.cfg.Driver, "driver", broker.DriverEmbedded, "storage driver: embedded (start the embedded server on --data-dir) or s3iam (any S3 + IAM API endpoint, a running serve's included)")
	f.StringVar(&o.cfg.S3Listen, "s3-listen", "127.0.0.1:9000", "embedded driver: address of the S3 API (serve's)")
	f.StringVar(&o.cfg.IAMListen, "iam-listen", "127.0.0.1:9001", "embedded driver: address of the IAM API (serve's)")
	f.StringVar(&o.cfg.S3Endpoint, "s3-endpoint", "", "s3iam driver: S3 API URL (empty: AWS S3)")
	f.StringVar(&o.cfg.IAMEndpoint, "iam-endpoint", "", "s3iam driver: IAM API URL (empty: AWS IAM)")
	f.StringVar(&o.cfg.Region, "region", "us-east-1", "S3 region")
	f.BoolVar(&o.cfg.PathStyle, "path-style", false, "s3iam driver: path-style bucket addressing")
	f.StringVar(&o.cfg.Prefix, "name-prefix", "bb", "serve's --name-prefix: only resources named under it are judged")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.fix, "fix", false, "delete leaks and unknown keys (never missing resources, never anything without our owner mark)")
	f.BoolVar(&o.yes, "yes", false, "with --fix: do not ask for confirmation")
	f.BoolVar(&o.purge, "purge", false, "with --fix: delete leaked buckets that still hold objects, objects and all")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}

// runAudit audits, fixes when asked, prints the report, and says whether
// drift remains. Every part it started is stopped before it returns.
func runAudit(cmd *cobra.Command, o auditOptions) (drift bool, err error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	if o.cfg.DataDir, err = filepath.Abs(o.cfg.DataDir); err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	if o.cfg.Driver == broker.DriverEmbedded || o.cfg.Driver == "" {
		if err := embeddedDataExists(o.cfg); err != nil {
			return false, err
		}
	}
	store, err := broker.OpenStore(ctx, o.cfg.Store, o.cfg.DataDir)
	if err != nil {
		return false, err
	}
	defer store.Close()

	var backend *broker.Backend
	// versitygw prints its start-up lines to standard output, where they
	// would spoil --output json.
	err = withStdoutOnStderr(func() error {
		backend, err = broker.StartBackend(ctx, o.cfg)
		return err
	})
	if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, s3gateway.ErrDataDirInUse) {
		return false, fmt.Errorf("the embedded server's data dir or its address %s or %s is in use: is `bucketbroker serve` running on %s? "+
			"Audit the running server instead: --driver s3iam --s3-endpoint http://%s --iam-endpoint http://%s --path-style, "+
			"with BUCKETBROKER_S3_ROOT_ACCESS_KEY and BUCKETBROKER_S3_ROOT_SECRET_KEY from %s",
			o.cfg.S3Listen, o.cfg.IAMListen, o.cfg.DataDir, o.cfg.S3Listen, o.cfg.IAMListen,
			filepath.Join(o.cfg.DataDir, "s3-root-credentials.json"))
	}
	if err != nil {
		return false, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := backend.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("stop the embedded server: %w", serr)
		}
	}()
	drv, ok := backend.Driver.(audit.Driver)
	if !ok {
		return false, fmt.Errorf("driver %T cannot list what it made: no audit", backend.Driver)
	}
	opts := audit.Options{Store: store, Driver: drv, Prefix: o.cfg.Prefix, Purge: o.purge}
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
func embeddedDataExists(cfg broker.Config) error {
	need := []string{filepath.Join(cfg.DataDir, "s3")}
	if cfg.RootAccessKey == "" {
		need = append(need, filepath.Join(cfg.DataDir, "s3-root-credentials.json"))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("no embedded server data in %s (%v): point --data-dir at serve's, or use --driver s3iam for an external server", cfg.DataDir, err)
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

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// withStdoutOnStderr runs f with file descriptor 1 pointing at standard
// error. It works on the descriptor, not on os.Stdout, so that goroutines
// f starts (versitygw's) need no synchronisation with the swap.
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
