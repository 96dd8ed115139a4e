package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/bucketbroker/bucketbroker/internal/broker"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "bucketbroker",
		Short: "Object-bucket provisioner: OSB API broker for S3 buckets and scoped credentials",
		Long: `bucketbroker hands out S3 buckets (OSB service instances) and credentials scoped
to one bucket (OSB bindings). Every request may be retried, duplicated or cut
by a crash: the outcome is still one bucket and one credential per id.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newAdminCommand(), newControllerCommand())
	return root
}

type logOptions struct {
	level, format string
}

func (o *logOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.level, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&o.format, "log-format", "auto", "log format: json, text, or auto (text on a terminal, json otherwise)")
}

func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level)
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch o.format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "auto":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			return slog.New(slog.NewTextHandler(w, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json, text or auto", o.format)
}

// checkLeaseFlags refuses lease, call and worker settings the engine
// cannot keep its promises with, before anything starts.
func checkLeaseFlags(cfg broker.Config) error {
	switch {
	case cfg.LeaseTTL <= 0:
		return fmt.Errorf("--lease-ttl %s: want a positive duration", cfg.LeaseTTL)
	case cfg.BackendCallTimeout < 0:
		return fmt.Errorf("--backend-call-timeout %s: want a positive duration, or 0 for half of --lease-ttl", cfg.BackendCallTimeout)
	case cfg.BackendCallTimeout >= cfg.LeaseTTL:
		return fmt.Errorf("--backend-call-timeout %s must be shorter than --lease-ttl %s: a call cut off when the lease is lost must end before another replica takes over", cfg.BackendCallTimeout, cfg.LeaseTTL)
	case cfg.Workers < 1:
		return fmt.Errorf("--workers %d: want at least 1", cfg.Workers)
	case cfg.SyncBudget < 0 || cfg.SyncBudget >= cfg.SyncTimeout:
		return fmt.Errorf("--sync-budget %s: want 0 (answer 202 at once) or a duration shorter than --sync-timeout %s", cfg.SyncBudget, cfg.SyncTimeout)
	}
	return nil
}

func newServeCommand() *cobra.Command {
	cfg := broker.Config{}
	var logOpts logOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the OSB broker",
		Long: `Run the OSB API broker.

With no flags it needs nothing else: it starts an embedded S3 server with real
SigV4 authentication and per-user IAM policies (and its IAM API), keeps state in
a SQLite file, and prints the broker URL, the broker credentials and the S3
endpoint. Restarting on the same --data-dir keeps every instance, binding and
object, and resumes operations that were in flight.

Credentials come from the environment (never from flags):
  BUCKETBROKER_USERNAME, BUCKETBROKER_PASSWORD
      OSB API basic auth; generated and printed when unset.
  BUCKETBROKER_S3_ROOT_ACCESS_KEY, BUCKETBROKER_S3_ROOT_SECRET_KEY
      Root keys of the S3/IAM backend. For the embedded server they are
      generated on first start, stored in the data dir and printed when unset.
      For --driver s3iam they are required.`,
		Example: `  # Everything embedded, state in ./data
  bucketbroker serve

  # An external S3 + IAM API endpoint (versitygw, SeaweedFS, Ceph RGW, AWS)
  BUCKETBROKER_S3_ROOT_ACCESS_KEY=... BUCKETBROKER_S3_ROOT_SECRET_KEY=... \
    bucketbroker serve --driver s3iam --s3-endpoint http://s3.internal:7070 \
    --iam-endpoint http://s3.internal:7071 --path-style`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logOpts.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg.Logger = log
			if err := checkLeaseFlags(cfg); err != nil {
				return err
			}
			cfg.Username, cfg.Password = os.Getenv("BUCKETBROKER_USERNAME"), os.Getenv("BUCKETBROKER_PASSWORD")
			if !cmd.Flags().Changed("store") {
				cfg.Store = os.Getenv("BUCKETBROKER_STORE") // a DSN may hold a password: keep it out of ps
			}
			cfg.RootAccessKey, cfg.RootSecretKey = os.Getenv("BUCKETBROKER_S3_ROOT_ACCESS_KEY"), os.Getenv("BUCKETBROKER_S3_ROOT_SECRET_KEY")
			if cfg.Driver == broker.DriverS3IAM && (cfg.RootAccessKey == "" || cfg.RootSecretKey == "") {
				return fmt.Errorf("--driver s3iam needs BUCKETBROKER_S3_ROOT_ACCESS_KEY and BUCKETBROKER_S3_ROOT_SECRET_KEY in the environment")
			}
			return serve(cmd, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address of the OSB API")
	f.StringVar(&cfg.DataDir, "data-dir", "./data", "folder for state, the encryption key and (embedded driver) objects")
	f.StringVar(&cfg.Store, "store", "", "state store: a PostgreSQL DSN (postgres://user@host/db, for several replicas) or a SQLite file (default <data-dir>/bucketbroker.db); also from BUCKETBROKER_STORE")
	f.StringVar(&cfg.CatalogFile, "catalog", "", "OSB catalog file, YAML or JSON (default: the built-in s3-bucket service)")
	f.StringVar(&cfg.EncryptionKeyFile, "encryption-key-file", "", "file with the AES-256 key that seals stored secrets, base64 (default <data-dir>/encryption.key, created when missing)")
	f.StringVar(&cfg.Driver, "driver", broker.DriverEmbedded, "storage driver: embedded (in-process S3 + IAM server) or s3iam (any external S3 + IAM API endpoint)")
	f.StringVar(&cfg.S3Listen, "s3-listen", "127.0.0.1:9000", "embedded driver: address of the S3 API")
	f.StringVar(&cfg.IAMListen, "iam-listen", "127.0.0.1:9001", "embedded driver: address of the IAM API")
	f.StringVar(&cfg.S3Endpoint, "s3-endpoint", "", "s3iam driver: S3 API URL (empty: AWS S3)")
	f.StringVar(&cfg.IAMEndpoint, "iam-endpoint", "", "s3iam driver: IAM API URL (empty: AWS IAM)")
	f.StringVar(&cfg.Region, "region", "us-east-1", "S3 region")
	f.BoolVar(&cfg.PathStyle, "path-style", false, "s3iam driver: path-style bucket addressing (most non-AWS servers need it)")
	f.StringVar(&cfg.PublicS3Endpoint, "public-s3-endpoint", "", "S3 URL put into binding credentials, when applications reach the backend by another address")
	f.StringVar(&cfg.Prefix, "name-prefix", "bb", "prefix of backend bucket and user names (1-16 of a-z, 0-9, -)")
	f.DurationVar(&cfg.AsyncTimeout, "async-timeout", 30*time.Minute, "an asynchronous operation that has not finished by then fails")
	f.DurationVar(&cfg.SyncTimeout, "sync-timeout", 60*time.Second, "a synchronous operation that has not finished by then fails")
	f.DurationVar(&cfg.SyncBudget, "sync-budget", 5*time.Second, "with accepts_incomplete=true, how long a request waits for an operation its plan does not require to be asynchronous: finished by then, it is answered synchronously (credentials included), else 202 (0: always 202)")
	f.StringVar(&cfg.ReplicaID, "replica-id", "", "name of this process in operation leases; replicas sharing a store need distinct ids (default: generated once, kept in the data dir)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 60*time.Second, "how long operations of a replica that died wait before another replica takes them over")
	f.DurationVar(&cfg.BackendCallTimeout, "backend-call-timeout", 0, "deadline of each backend call, shorter than --lease-ttl; a call that runs out is retried (default: half of --lease-ttl)")
	f.IntVar(&cfg.Workers, "workers", 32, "operations driven at once; the others wait in a queue, those a request has just started first")
	logOpts.bind(cmd)
	return cmd
}

func serve(cmd *cobra.Command, cfg broker.Config) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := broker.Start(ctx, cfg)
	if err != nil {
		return err
	}
	printBanner(cmd.OutOrStdout(), b)
	select {
	case <-ctx.Done():
	case err = <-b.Done():
		err = fmt.Errorf("OSB API server: %w", err)
	}
	cfg.Logger.Info("Shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := b.Shutdown(sctx); serr != nil && err == nil {
		err = serr
	}
	return err
}

func printBanner(w io.Writer, b *broker.Broker) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "bucketbroker is serving the OSB API v2.17\n")
	fmt.Fprintf(&sb, "  broker URL:    %s\n", b.URL)
	if b.Generated.BrokerCredentials {
		fmt.Fprintf(&sb, "  broker user:   %s\n  broker pass:   %s   (generated; set BUCKETBROKER_USERNAME/BUCKETBROKER_PASSWORD to choose)\n", b.Username, b.Password)
	} else {
		fmt.Fprintf(&sb, "  broker user:   %s   (password from BUCKETBROKER_PASSWORD)\n", b.Username)
	}
	fmt.Fprintf(&sb, "  S3 endpoint:   %s\n", b.S3Endpoint)
	fmt.Fprintf(&sb, "  IAM endpoint:  %s\n", b.IAMEndpoint)
	if b.Generated.RootCredentials {
		fmt.Fprintf(&sb, "  S3 root key:   %s\n  S3 root secret: %s   (kept in the data dir; set BUCKETBROKER_S3_ROOT_* to choose)\n", b.RootAccessKey, b.RootSecretKey)
	}
	fmt.Fprint(w, sb.String())
}
