package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bucketbroker/bucketbroker/internal/bucket"
	"github.com/bucketbroker/bucketbroker/internal/buildinfo"
	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osb"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/postgres"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/internal/tlsreload"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Drivers bucketbroker can use (see package backend).
const (
	DriverEmbedded = storage.DriverEmbedded
	DriverS3IAM    = storage.DriverS3IAM
)

// Config is everything `bucketbroker serve` needs.
type Config struct {
	// Config is the storage side (driver, data dir, endpoints, root keys,
	// name prefix, logger), which package backend starts. Its DataDir also
	// holds the state file, the encryption key, the generated OSB API
	// password and the replica id.
	storage.Config

	// Listen is the OSB API address.
	Listen string
	// Store names the state store: a PostgreSQL DSN (postgres://...), or a
	// SQLite file; empty means DataDir/bucketbroker.db.
	Store string
	// Username and Password protect the OSB API. An empty Username is
	// "broker"; an empty Password is generated at the first start, kept in
	// DataDir/broker-password (0600) and read back at each later one, so
	// that a platform registered with it keeps working after a restart.
	Username, Password string
	// TLSCertFile and TLSKeyFile, both set, serve the OSB API over HTTPS
	// (TLS 1.2 and newer), reloading the pair when the files change.
	TLSCertFile, TLSKeyFile string
	// CatalogFile replaces the built-in catalog.
	CatalogFile string
	// EncryptionKeyFile holds the key that seals stored secrets; empty
	// means DataDir/encryption.key, created when missing.
	EncryptionKeyFile string

	// AsyncTimeout and SyncTimeout bound operations (see engine.Options).
	AsyncTimeout, SyncTimeout time.Duration
	// SyncBudget is how long a request with accepts_incomplete=true waits
	// to answer synchronously (see engine.Options; zero: 202 at once).
	SyncBudget time.Duration
	// ReplicaID names this process in operation leases; empty means an id
	// generated once and kept in the data dir, so that a restarted process
	// takes its unfinished work back at once.
	ReplicaID string
	// LeaseTTL is how long a dead replica's operations wait before another
	// replica takes them over (see engine.Options).
	LeaseTTL time.Duration
	// BackendCallTimeout bounds each backend call; it must be shorter than
	// LeaseTTL (0: half of it; see engine.Options.CallTimeout).
	BackendCallTimeout time.Duration
	// Workers is how many operations the engine drives at once (0: the
	// engine's default; see engine.Options).
	Workers int
	// Upstreams are OSB brokers whose services are served too, each
	// through the engine (upstream mode, docs/upstream.md).
	Upstreams []upstream.Config
	// NoBucketService leaves the bucket service out: only the upstreams'
	// services are served, and no storage backend is started.
	NoBucketService bool
	// UpstreamCatalogTimeout bounds how long start-up tries to fetch each
	// upstream's catalog (default 60 seconds).
	UpstreamCatalogTimeout time.Duration
}

// Broker is a running bucketbroker.
type Broker struct {
	cfg      Config
	log      *slog.Logger
	store    Store
	storage  *storage.Storage
	upstream []*upstream.Upstream
	engine   *engine.Engine
	server   *http.Server
	listener net.Listener
	registry *prometheus.Registry // what /metrics serves
	// Generated tells which secrets were generated at this start.
	Generated Generated
	// URL is the OSB API base URL; S3Endpoint and IAMEndpoint the backend's.
	URL, S3Endpoint, IAMEndpoint string
	// Username and Password are the OSB API credentials in force.
	Username, Password string
	// RootAccessKey and RootSecretKey are the backend root credentials.
	RootAccessKey, RootSecretKey string
	serveErr                     chan error
}

// Generated says which credentials did not come from the caller, and
// where they are kept (so that the caller can tell the operator where to
// read them: nobody else knows them).
type Generated struct {
	// BrokerCredentials: the OSB API password was generated, now or at an
	// earlier start, and is kept in PasswordFile.
	BrokerCredentials bool
	PasswordFile      string
	// RootCredentials were generated now or at an earlier start, and are
	// kept in RootCredentialsFile.
	RootCredentials     bool
	RootCredentialsFile string
}

// serverTLS is the OSB API's TLS configuration, its certificate reloaded
// when the files change; nil without TLS.
func serverTLS(cfg Config, log *slog.Logger) (*tls.Config, error) {
	if cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, nil
	}
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" {
		return nil, errors.New("TLS needs both a certificate file and a key file")
	}
	rl, err := tlsreload.New(cfg.TLSCertFile, cfg.TLSKeyFile, log)
	if err != nil {
		return nil, err
	}
	return rl.Config(), nil
}

// openSecretBox opens the box that seals binding secrets, with the key
// file's key (made on first start).
func openSecretBox(cfg Config) (*secretbox.Box, error) {
	keyFile := cfg.EncryptionKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "encryption.key")
	}
	key, _, err := secretbox.LoadOrCreateKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	return secretbox.New(key)
}

// startBackend starts the bucket service's storage backend (none with
// cfg.NoBucketService) and returns its driver and the endpoint bindings
// name.
func (b *Broker) startBackend(ctx context.Context, cfg Config) (driver.Driver, bucket.Endpoint, error) {
	if cfg.NoBucketService {
		return nil, bucket.Endpoint{}, nil
	}
	be, err := storage.Start(ctx, cfg.Config)
	if err != nil {
		return nil, bucket.Endpoint{}, err
	}
	b.storage = be
	b.S3Endpoint, b.IAMEndpoint = be.S3Endpoint, be.IAMEndpoint
	b.RootAccessKey, b.RootSecretKey = be.RootAccessKey, be.RootSecretKey
	b.Generated.RootCredentials, b.Generated.RootCredentialsFile = be.GeneratedRootCredentials, be.RootCredentialsFile
	return be.Driver, bucket.Endpoint{URL: be.PublicS3Endpoint, Region: be.Region, PathStyle: be.PathStyle}, nil
}

// setCredentials sets the OSB API's basic-auth credentials: the
// configured ones, or a password generated once and kept in the data dir.
func (b *Broker) setCredentials(cfg Config) error {
	b.Username, b.Password = cfg.Username, cfg.Password
	if b.Username == "" {
		b.Username = "broker"
	}
	if b.Password != "" {
		return nil
	}
	b.Generated.BrokerCredentials, b.Generated.PasswordFile = true, filepath.Join(cfg.DataDir, "broker-password")
	var err error
	b.Password, err = brokerPassword(b.Generated.PasswordFile)
	return err
}

// Start brings every part up, in order, and starts serving the OSB API.
func Start(ctx context.Context, cfg Config) (_ *Broker, err error) {
	b := &Broker{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}
	if b.log == nil {
		b.log = slog.Default()
	}
	defer func() {
		if err != nil {
			b.close(context.Background())
		}
	}()
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil { // the embedded server changes the working directory
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	tlsConfig, err := serverTLS(cfg, b.log)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	b.registry = reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Get().Collector())
	cat, err := b.catalog(ctx, cfg, reg)
	if err != nil {
		return nil, err
	}
	for _, w := range cat.Warnings() {
		b.log.Warn("Catalog leaves parameters unchecked", "catalog", cfg.CatalogFile, "detail", w)
	}
	catJSON, err := cat.JSON()
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	// The store first: the key (like everything else this start writes)
	// is state that OpenStore takes as a sign of an earlier start.
	if b.store, err = OpenStore(ctx, cfg.Store, cfg.DataDir); err != nil {
		return nil, err
	}
	box, err := openSecretBox(cfg)
	if err != nil {
		return nil, err
	}

	drv, endpoint, err := b.startBackend(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var backends []engine.Backend
	if drv != nil {
		bb, err := bucket.New(bucket.Options{Driver: drv, Catalog: cat, Endpoint: endpoint, Prefix: cfg.Prefix})
		if err != nil {
			return nil, err
		}
		backends = append(backends, bb)
	}
	for _, u := range b.upstream {
		backends = append(backends, u)
	}

	replica := cfg.ReplicaID
	if replica == "" {
		if replica, err = replicaID(filepath.Join(cfg.DataDir, "replica-id")); err != nil {
			return nil, err
		}
	}

	b.engine, err = engine.New(engine.Options{
		Store: b.store, Catalog: cat, Box: box, Backends: backends,
		AsyncTimeout: cfg.AsyncTimeout, SyncTimeout: cfg.SyncTimeout, SyncBudget: cfg.SyncBudget, Logger: b.log, Registerer: reg,
		ReplicaID: replica, LeaseTTL: cfg.LeaseTTL, CallTimeout: cfg.BackendCallTimeout, Workers: cfg.Workers,
	})
	if err != nil {
		return nil, err
	}
	if err := b.engine.Start(ctx); err != nil {
		return nil, err
	}

	if err := b.setCredentials(cfg); err != nil {
		return nil, err
	}
	unreadable := func() int { return 0 }
	if rep, ok := b.store.(engine.UnreadableReporter); ok {
		unreadable = func() int { return len(rep.Unreadable()) }
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bucketbroker_store_unreadable_records",
		Help: "Records the store cannot decode and skips; list and repair them with `bucketbroker admin records`.",
	}, func() float64 { return float64(unreadable()) }))
	h, err := osb.NewHandler(osb.Options{
		Instances: b.engine, Bindings: b.engine, Catalog: catJSON,
		Username: b.Username, Password: b.Password, Logger: b.log,
		Registerer: reg, Gatherer: reg, Ready: b.ready(),
		Warnings: func() []string {
			if n := unreadable(); n > 0 {
				return []string{fmt.Sprintf("%d records in the store cannot be read and are skipped: run `bucketbroker admin records`", n)}
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	if b.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen for the OSB API on %s: %w", cfg.Listen, err)
	}
	b.URL = "http://" + b.listener.Addr().String()
	if tlsConfig != nil {
		b.listener = tls.NewListener(b.listener, tlsConfig)
		b.URL = "https://" + b.listener.Addr().String()
	}
	b.server = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute, // a sync request may wait for its operation
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(httpServerLog{b.log}, "", 0),
	}
	go func() { b.serveErr <- b.server.Serve(b.listener) }()
	return b, nil
}

// catalog is the catalog served: the bucket service's (the built-in one or
// cfg.CatalogFile), unless cfg.NoBucketService, and each upstream's
// services, fetched now.
func (b *Broker) catalog(ctx context.Context, cfg Config, reg prometheus.Registerer) (*catalog.Catalog, error) {
	var base *catalog.Catalog
	if !cfg.NoBucketService {
		base = catalog.Default()
		if cfg.CatalogFile != "" {
			var err error
			if base, err = catalog.Load(cfg.CatalogFile); err != nil {
				return nil, err
			}
		}
		if len(cfg.Upstreams) == 0 {
			return base, nil
		}
	} else if len(cfg.Upstreams) == 0 {
		return nil, errors.New("without the bucket service, at least one upstream is needed")
	}
	timeout := cfg.UpstreamCatalogTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	metrics, err := upstream.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	var sources []catalog.Source
	for _, uc := range cfg.Upstreams {
		uc.Metrics = metrics
		u, err := upstream.New(uc)
		if err != nil {
			return nil, err
		}
		if err := fetchCatalog(ctx, u, timeout, b.log); err != nil {
			return nil, err
		}
		src, err := u.CatalogSource()
		if err != nil {
			return nil, err
		}
		b.upstream = append(b.upstream, u)
		sources = append(sources, src)
		b.log.Info("Serving an upstream broker's services", "upstream", u.Name(), "url", u.URL(), "services", len(src.Services))
	}
	cat, err := catalog.Merge(base, sources...)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return cat, nil
}

// fetchCatalog fetches an upstream's catalog, trying again with backoff
// until timeout has passed (the upstream may be starting beside us).
func fetchCatalog(ctx context.Context, u *upstream.Upstream, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := u.FetchCatalog(ctx)
		if err == nil || !retryableCatalogError(err) {
			return err
		}
		log.Warn("Cannot fetch an upstream broker's catalog; will retry", "upstream", u.Name(), "url", u.URL(), "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("upstream %s (%s): no catalog within %s: %w", u.Name(), u.URL(), timeout, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// retryableCatalogError reports whether a failed catalog fetch may succeed
// later: no answer, or a 5xx. A 401 or a catalog that does not fit the
// filter will not change by waiting.
func retryableCatalogError(err error) bool {
	var oe *osbclient.Error
	if errors.As(err, &oe) {
		return oe.Status >= 500
	}
	return !errors.Is(err, upstream.ErrFilter)
}

// httpServerLog routes net/http's own messages through the structured
// logger. A failed TLS handshake (a client that does not trust the
// certificate, plain HTTP on the HTTPS port, a port scan) is the client's
// problem, logged at info; anything else at warn.
type httpServerLog struct{ log *slog.Logger }

func (l httpServerLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		l.log.Info("TLS handshake failed", "error", strings.TrimPrefix(msg, "http: "))
	} else {
		l.log.Warn("OSB API server error", "error", strings.TrimPrefix(msg, "http: "))
	}
	return len(p), nil
}

// Store is a state store the broker closes on shutdown.
type Store interface {
	engine.Store
	// Writable returns nil unless the store's writes fail for want of
	// space (engine.ErrFull), cheaply enough for every readiness check.
	Writable(ctx context.Context) error
	Close() error
}

// OpenStore opens (and migrates) the store spec names: a PostgreSQL DSN
// (postgres:// or postgresql://), or a SQLite file path; empty means
// <dataDir>/bucketbroker.db.
//
// A store whose database holds no schema is created only where nothing
// says that records were kept before: neither the SQLite store's marker
// nor dataDir's state from an earlier start (earlierState). Otherwise the
// database was lost or emptied, and a new store would forget every record
// while the buckets and users they made stay in the backend: OpenStore
// fails with store.ErrLost and changes nothing. StartOverStore is the
// explicit act of starting over.
func OpenStore(ctx context.Context, spec, dataDir string) (Store, error) {
	return openStore(ctx, spec, dataDir, store.OpenOptions{Earlier: func() error { return earlierState(dataDir) }})
}

// OpenStoreReadOnly opens the store as OpenStore does, for reading only
// (store.OpenOptions.ReadOnly), beside a running serve: it creates and
// migrates nothing, and refuses a store that is not there.
func OpenStoreReadOnly(ctx context.Context, spec, dataDir string) (Store, error) {
	return openStore(ctx, spec, dataDir, store.OpenOptions{ReadOnly: true})
}

// StartOverStore is OpenStore that creates a new, empty store where the
// database holds no schema, whatever says that records were kept before
// (`bucketbroker admin migrate --new-store`). A store that holds a schema
// is opened as it is: nothing is ever deleted.
func StartOverStore(ctx context.Context, spec, dataDir string) (Store, error) {
	return openStore(ctx, spec, dataDir, store.OpenOptions{StartOver: true})
}

func openStore(ctx context.Context, spec, dataDir string, opts store.OpenOptions) (Store, error) {
	var s Store
	var err error
	switch {
	case strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://"):
		s, err = postgres.OpenWith(ctx, spec, opts)
	case spec == "":
		s, err = sqlite.OpenWith(ctx, filepath.Join(dataDir, "bucketbroker.db"), opts)
	default:
		s, err = sqlite.OpenWith(ctx, spec, opts)
	}
	if errors.Is(err, store.ErrLost) {
		return nil, fmt.Errorf("open store: %w: restore the database from a backup; "+
			"to start over with an empty store on purpose, run `bucketbroker admin migrate --new-store` with serve's --data-dir and --store "+
			"(the buckets and users of the lost records stay in the backend, and `bucketbroker admin audit` lists them as leaks)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

// earlierState returns an error naming what in dataDir was written by an
// earlier start after its store was open, or nil for none: the encryption
// key, the replica id, the embedded server's data. Start opens the store
// before it writes any of them, so a start that was cut short leaves none
// behind a store it did not create.
func earlierState(dataDir string) error {
	var found []string
	for _, name := range []string{"encryption.key", "replica-id", "s3"} {
		if _, err := os.Lstat(filepath.Join(dataDir, name)); err == nil {
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("the data dir %s holds %s from an earlier start", dataDir, strings.Join(found, ", "))
}

// readyTimeout bounds one readiness check: a probe must answer before the
// kubelet's own timeout gives up on it.
const readyTimeout = 5 * time.Second

func (b *Broker) ready() func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		if _, err := b.store.Get(ctx, engine.KindInstance, "readiness-probe"); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return &osb.CheckError{Check: "store", Err: err}
		}
		// A store that answers reads may still refuse every write.
		if err := b.store.Writable(ctx); err != nil {
			return &osb.CheckError{Check: "store", Err: err}
		}
		if b.storage != nil {
			if err := b.storage.Ready(ctx); err != nil {
				return &osb.CheckError{Check: "storage backend", Err: err}
			}
		}
		for _, u := range b.upstream {
			if _, err := u.Client().Catalog(ctx); err != nil {
				return &osb.CheckError{Check: "upstream " + u.Name(), Err: err}
			}
		}
		return nil
	}
}

// Upstreams describes the upstream brokers served ("name url", no
// credentials).
func (b *Broker) Upstreams() []string {
	out := make([]string, len(b.upstream))
	for i, u := range b.upstream {
		out[i] = u.Name() + " " + u.URL()
	}
	return out
}

// Engine returns the running engine.
func (b *Broker) Engine() *engine.Engine { return b.engine }

// Done is closed with the error that stopped the HTTP server.
func (b *Broker) Done() <-chan error { return b.serveErr }

// Shutdown stops the broker: no new requests, workers stopped (their
// operations resume on the next start), embedded server stopped, store
// closed.
func (b *Broker) Shutdown(ctx context.Context) error {
	return b.close(ctx)
}

func (b *Broker) close(ctx context.Context) error {
	var errs []error
	if b.server != nil {
		errs = append(errs, b.server.Shutdown(ctx))
	}
	if b.engine != nil {
		errs = append(errs, b.engine.Shutdown(ctx))
	}
	errs = append(errs, b.storage.Stop(ctx))
	if b.store != nil {
		errs = append(errs, b.store.Close())
	}
	return errors.Join(errs...)
}

// brokerPassword reads the OSB API password generated for this data dir,
// or generates one and keeps it in path (0600). The file is written under
// another name and renamed into place, so that a crash leaves either no
// file (a new password at the next start, which nobody has seen yet) or a
// whole one.
func brokerPassword(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		pw := strings.TrimSpace(string(data))
		if pw == "" {
			return "", fmt.Errorf("broker password file %s is empty: remove it to generate a new password, or set BUCKETBROKER_PASSWORD", path)
		}
		return pw, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read broker password: %w", err)
	}
	pw := randomString(24)
	if err := writeFileAtomic(path, []byte(pw+"\n")); err != nil {
		return "", fmt.Errorf("store broker password: %w", err)
	}
	return pw, nil
}

// writeFileAtomic writes data to path (0600) through a temporary file in
// the same folder, synced before the rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// replicaID reads this data dir's replica id, or makes one: the host name
// and a random suffix, so that processes on one host differ.
func replicaID(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read replica id: %w", err)
	}
	host, _ := os.Hostname()
	id := host + "-" + randomString(8)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store replica id: %w", err)
	}
	return id, nil
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	s := base64.RawURLEncoding.EncodeToString(b)
	s = strings.NewReplacer("-", "a", "_", "b").Replace(s)
	return s[:n]
}
