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
	"github.com/bucketbroker/bucketbroker/internal/buildinfo"
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
	root.AddCommand(newServeCommand(), newAdminCommand(), newControllerCommand(), newVersionCommand())
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
	var pprofListen string
	var ups upstreamFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the OSB broker",
		Long: `Run the OSB API broker.

With no flags it needs nothing else: it starts an embedded S3 server with real
SigV4 authentication and per-user IAM policies (and its IAM API), keeps state in
a SQLite file, and prints the broker URL, the broker credentials and the S3
endpoint. Restarting on the same --data-dir keeps every instance, binding and
object, and resumes operations that were in flight. A store found empty or
missing where the data dir shows an earlier start (a failed restore or copy)
stops the start: restore it, or start over on purpose with
bucketbroker admin migrate --new-store.

Credentials come from the environment (never from flags):
  BUCKETBROKER_USERNAME, BUCKETBROKER_PASSWORD
      OSB API basic auth. The user defaults to "broker"; an unset password
      is generated on first start and kept in <data-dir>/broker-password
      (0600), so that it stays the same across restarts.
  BUCKETBROKER_S3_ROOT_ACCESS_KEY, BUCKETBROKER_S3_ROOT_SECRET_KEY
      Root keys of the S3/IAM backend. For the embedded server they are
      generated on first start and kept in <data-dir>/s3-root-credentials.json
      when unset. For --driver s3iam they are required.
Generated secrets are printed only when standard output is a terminal;
otherwise (a pod's log, a service manager's journal) the banner says which
file keeps them.

With --tls-cert-file and --tls-key-file the OSB API serves HTTPS (TLS 1.2
and newer); the first connection after the files change gets the new
certificate, so a rotation (cert-manager) needs no restart.

Upstream mode (docs/upstream.md): with --upstream or --upstream-config it also
serves the services of other OSB brokers, through the same exactly-once
engine. The basic-auth credentials of a --upstream NAME=URL come from
BUCKETBROKER_UPSTREAM_<NAME>_USERNAME and BUCKETBROKER_UPSTREAM_<NAME>_PASSWORD
(NAME in upper case, hyphens as underscores); those of a config file's
upstream from its passwordFile or passwordEnv.`,
		Example: `  # Everything embedded, state in ./data
  bucketbroker serve

  # Only the services of an upstream OSB broker, made exactly-once
  BUCKETBROKER_UPSTREAM_DB_USERNAME=admin BUCKETBROKER_UPSTREAM_DB_PASSWORD=... \
    bucketbroker serve --bucket-service=false --upstream db=https://db-broker.internal

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
			storeFromEnv(cmd, &cfg.Store)
			if err := storageFromEnv(&cfg.Config); err != nil {
				return err
			}
			if err := checkPprofFlag(pprofListen); err != nil {
				return err
			}
			if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
				return fmt.Errorf("--tls-cert-file and --tls-key-file go together: give both, or neither for plain HTTP")
			}
			if err := ups.apply(&cfg); err != nil {
				return err
			}
			return serve(cmd, cfg, pprofListen)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address of the OSB API")
	bindStoreFlag(f, &cfg.Store)
	f.StringVar(&cfg.CatalogFile, "catalog", "", "OSB catalog file, YAML or JSON (default: the built-in s3-bucket service)")
	f.StringVar(&cfg.EncryptionKeyFile, "encryption-key-file", "", "file with the AES-256 key that seals stored secrets, base64 (default <data-dir>/encryption.key, created when missing)")
	bindStorageFlags(f, &cfg.Config, storageFlagSet{publicEndpoint: true})
	f.DurationVar(&cfg.AsyncTimeout, "async-timeout", 30*time.Minute, "an asynchronous operation that has not finished by then fails")
	f.DurationVar(&cfg.SyncTimeout, "sync-timeout", 60*time.Second, "a synchronous operation that has not finished by then fails")
	f.DurationVar(&cfg.SyncBudget, "sync-budget", 5*time.Second, "with accepts_incomplete=true, how long a request waits for an operation its plan does not require to be asynchronous: finished by then, it is answered synchronously (credentials included), else 202 (0: always 202)")
	f.StringVar(&cfg.ReplicaID, "replica-id", "", "name of this process in operation leases; replicas sharing a store need distinct ids (default: generated once, kept in the data dir)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 60*time.Second, "how long operations of a replica that died wait before another replica takes them over")
	f.DurationVar(&cfg.BackendCallTimeout, "backend-call-timeout", 0, "deadline of each backend call, shorter than --lease-ttl; a call that runs out is retried (default: half of --lease-ttl)")
	f.IntVar(&cfg.Workers, "workers", 32, "operations driven at once; the others wait in a queue, those a request has just started first")
	f.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) of the OSB API; with --tls-key-file it serves HTTPS, TLS 1.2+, reloaded when the files change")
	f.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	ups.bind(f)
	bindPprofFlag(f, &pprofListen)
	logOpts.bind(cmd)
	return cmd
}

func serve(cmd *cobra.Command, cfg broker.Config, pprofListen string) error {
	out := cmd.OutOrStdout()
	if stdout, err := stdoutThroughLogger(cfg.Logger); err != nil {
		return err
	} else if out == os.Stdout {
		out = stdout
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prof, err := startPprof(pprofListen, cfg.Logger)
	if err != nil {
		return err
	}
	defer stopPprof(prof, cfg.Logger)
	b, err := broker.Start(ctx, cfg)
	if err != nil {
		return err
	}
	printBanner(out, b, isTerminal(out))
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

// printBanner tells the operator where the broker serves and with which
// credentials. Generated secrets are shown only on a terminal (secrets
// says so): anywhere else the output is kept (a pod's log, a journal), so
// the banner names the file that holds them instead.
func printBanner(w io.Writer, b *broker.Broker, secrets bool) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "bucketbroker is serving the OSB API v2.17\n")
	fmt.Fprintf(&sb, "  broker URL:    %s\n", b.URL)
	fmt.Fprintf(&sb, "  broker user:   %s\n", b.Username)
	switch g := b.Generated; {
	case !g.BrokerCredentials:
		fmt.Fprintf(&sb, "  broker pass:   from BUCKETBROKER_PASSWORD\n")
	case secrets:
		fmt.Fprintf(&sb, "  broker pass:   %s   (generated, kept in %s; set BUCKETBROKER_PASSWORD to choose)\n", b.Password, g.PasswordFile)
	default:
		fmt.Fprintf(&sb, "  broker pass:   in %s   (generated; set BUCKETBROKER_PASSWORD to choose)\n", g.PasswordFile)
	}
	if b.S3Endpoint != "" {
		fmt.Fprintf(&sb, "  S3 endpoint:   %s\n", b.S3Endpoint)
		fmt.Fprintf(&sb, "  IAM endpoint:  %s\n", b.IAMEndpoint)
	}
	for _, u := range b.Upstreams() {
		fmt.Fprintf(&sb, "  upstream:      %s\n", u)
	}
	switch g := b.Generated; {
	case !g.RootCredentials:
	case secrets:
		fmt.Fprintf(&sb, "  S3 root key:   %s\n  S3 root secret: %s   (generated, kept in %s; set BUCKETBROKER_S3_ROOT_* to choose)\n", b.RootAccessKey, b.RootSecretKey, g.RootCredentialsFile)
	default:
		fmt.Fprintf(&sb, "  S3 root keys:  in %s   (generated; set BUCKETBROKER_S3_ROOT_* to choose)\n", g.RootCredentialsFile)
	}
	fmt.Fprint(w, sb.String())
}

// isTerminal tells whether a command's input or output is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.Get())
			return err
		},
	}
}
