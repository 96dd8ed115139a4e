package s3gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
	"github.com/versity/versitygw/s3api"
)

const (
	// DefaultRegion is the S3 signing region when Config.Region is empty.
	DefaultRegion = "us-east-1"
	// IAMRegion is the region IAM API requests are signed for: versitygw,
	// like AWS IAM in the aws partition, accepts only us-east-1.
	IAMRegion = "us-east-1"

	defaultListen = "127.0.0.1:0"
	startTimeout  = 30 * time.Second
	pollInterval  = 20 * time.Millisecond
	probeTimeout  = 2 * time.Second
	// portAttempts bounds the retries when a port chosen for a ":0" listen
	// address is taken by another process before versitygw binds it.
	portAttempts = 3
	// maxSocketPath keeps the private socket path below the kernel limit
	// for sockaddr_un (108 bytes with the terminating NUL).
	maxSocketPath = 100
	socketName    = "iam.sock"
	// probeUser is the user the start-up check asks the IAM API about,
	// probeBucket the bucket it asks the S3 server about.
	probeUser   = "bucketbroker-start-up-probe"
	probeBucket = "bucketbroker-start-up-probe"
)

// running guards the versitygw package globals: one Server per process.
var running atomic.Bool

// objectMeta is where versitygw's posix backend keeps the attributes of
// buckets and objects: their extended attributes. A var for tests, which
// stop a call inside versitygw there.
var objectMeta meta.MetadataStorer = meta.XattrMeta{}

// Config configures the embedded servers.
type Config struct {
	// DataDir holds objects/, versions/, iam/ and run/ (the private
	// socket); created (0700) if missing. Nothing is written elsewhere, so
	// the server runs on a read-only root filesystem. versions/ keeps the older versions of objects in buckets
	// with versioning on: versitygw wants it outside the objects root.
	DataDir string
	// S3Listen and IAMListen are host:port addresses; port 0 picks a free
	// port. Empty means 127.0.0.1:0.
	S3Listen  string
	IAMListen string
	// RootAccessKey and RootSecretKey are the root account of both APIs.
	RootAccessKey string
	RootSecretKey string
	// Region is the S3 signing region; empty means us-east-1.
	Region string
	// S3MaxConnections and IAMMaxConnections limit the connections each
	// public listener serves at once (one request each); 0 means
	// DefaultS3MaxConnections and DefaultIAMMaxConnections. The process's
	// own calls go through listeners of their own and are not counted.
	S3MaxConnections, IAMMaxConnections int
	// Logger receives what the start repairs; nil means slog.Default().
	Logger *slog.Logger
}

// defaultLimits fills in the connection limits left 0.
func (cfg *Config) defaultLimits() error {
	if cfg.S3MaxConnections < 0 || cfg.IAMMaxConnections < 0 {
		return errors.New("start embedded S3 server: connection limits must not be negative")
	}
	if cfg.S3MaxConnections == 0 {
		cfg.S3MaxConnections = DefaultS3MaxConnections
	}
	if cfg.IAMMaxConnections == 0 {
		cfg.IAMMaxConnections = DefaultIAMMaxConnections
	}
	return nil
}

// Server is a running S3 gateway and IAM API pair.
type Server struct {
	s3Addr  string
	iamAddr string
	// s3Own and iamOwn are the listeners of this process's own calls
	// (ownPath).
	s3Own, iamOwn string
	region        string
	sockDir       *os.File // open DataDir/run when the socket path goes through /proc (privateSocket)
	lock          *os.File // holds the data directory's lock (lockDataDir)
	dataDir       string
	store         *userStore
	log           *slog.Logger
	// inFlight records the S3 calls in flight; nil if it could not be
	// written.
	inFlight *inFlight
	// crash, set by tests before Stop, makes Stop leave what a kill
	// leaves: no clean-stop marker.
	crash bool

	gw   *component
	iam  *component
	stop chan struct{}
	once sync.Once

	closed chan struct{}
	err    error // set before closed is closed
}

// component is one blocking versitygw Run function in its own goroutine.
type component struct {
	// own is the address of the listener of the process's own calls.
	own    string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

func launch(run func(context.Context) error) *component {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = run(ctx)
	}()
	return c
}

func (c *component) shutdown() error {
	c.cancel()
	<-c.done
	return c.err
}

// Start creates the data directories, starts the IAM API and then the S3
// gateway, and returns once both accept the root credentials. ctx bounds
// the startup only (at most 30s); the servers run until Stop is called or
// one of them fails.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start embedded S3 server: data directory is required")
	}
	if cfg.RootAccessKey == "" || cfg.RootSecretKey == "" {
		return nil, errors.New("start embedded S3 server: root access key and secret key are required")
	}
	if cfg.S3Listen == "" {
		cfg.S3Listen = defaultListen
	}
	if cfg.IAMListen == "" {
		cfg.IAMListen = defaultListen
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if err := cfg.defaultLimits(); err != nil {
		return nil, err
	}
	// posix.New changes the working directory: nothing below may depend on
	// a relative path.
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start embedded S3 server: data directory %q: %w", cfg.DataDir, err)
	}
	objectsDir := filepath.Join(dataDir, "objects")
	versionsDir := filepath.Join(dataDir, "versions")
	iamDir := filepath.Join(dataDir, "iam")
	runDir := filepath.Join(dataDir, "run")
	for _, dir := range []string{dataDir, objectsDir, versionsDir, iamDir, runDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("start embedded S3 server: %w", err)
		}
	}

	if !running.CompareAndSwap(false, true) {
		return nil, errors.New("start embedded S3 server: one is already running in this process (versitygw allows one per process)")
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		running.Store(false)
		return nil, fmt.Errorf("start embedded S3 server: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// After a clean stop nothing is half done: the repair is for what a
	// killed process leaves (cleanstop.go). The marker is gone from here
	// on, so a kill of this server leaves none. After a kill, the calls
	// it interrupted name the buckets to repair (inflight.go).
	clean, marker, err := takeCleanStop(dataDir, log.Warn)
	if err != nil {
		_ = lock.Close()
		running.Store(false)
		return nil, fmt.Errorf("start embedded S3 server: %w", err)
	}
	scope := repairScope{none: clean, all: marker}
	if !clean && !marker {
		scope = readInFlight(dataDir, log.Warn)
	}
	// The repair of the objects runs while the IAM API opens its users
	// (the two grow with the instances and touch different folders); the
	// gateway starts once both are done.
	repaired := make(chan error, 1)
	go func() { repaired <- scope.run(objectsDir, versionsDir, log) }()
	waitRepair := sync.OnceValue(func() error {
		if err := <-repaired; err != nil {
			return fmt.Errorf("start embedded S3 server: %w", err)
		}
		return nil
	})
	// The IAM users' database opens without reading a user, before the
	// listeners' start-up timeout runs.
	store, err := newUserStore(ctx, iamDir)
	if err != nil {
		_ = waitRepair()
		_ = lock.Close()
		running.Store(false)
		return nil, fmt.Errorf("start embedded IAM API: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	s := &Server{
		region: cfg.Region, lock: lock, dataDir: dataDir, store: store, log: log,
		stop: make(chan struct{}), closed: make(chan struct{}),
	}
	if err := s.start(ctx, cfg, store, objectsDir, versionsDir, runDir, waitRepair); err != nil {
		// The repair's error, when it failed, is the one to report.
		if rerr := waitRepair(); rerr != nil {
			err = rerr
		}
		if s.gw != nil {
			_ = s.gw.shutdown() // its error is in err already, or it was healthy
		}
		if s.iam != nil {
			_ = s.iam.shutdown()
		}
		if s.sockDir != nil {
			_ = s.sockDir.Close()
		}
		_ = s.inFlight.close()
		_ = store.Close()
		_ = lock.Close()
		running.Store(false)
		return nil, err
	}
	go s.supervise()
	return s, nil
}

func (s *Server) start(ctx context.Context, cfg Config, store *userStore, objectsDir, versionsDir, runDir string, repaired func() error) error {
	sockPath, sockDir, err := privateSocket(runDir)
	if err != nil {
		return fmt.Errorf("start embedded IAM API: %w", err)
	}
	s.sockDir = sockDir

	creds := credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, "")
	s.iamAddr, s.iam, err = startListener(ctx, "IAM API", cfg.IAMListen, func(addr string) (*component, func(context.Context) error) {
		own, err := openOwnPath()
		if err != nil {
			return failed(err), nil
		}
		c := launch(func(ctx context.Context) error {
			return runIAMAPI(ctx, iamConfig{
				rootAccess: cfg.RootAccessKey, rootSecret: cfg.RootSecretKey,
				addr: addr, socket: sockPath, store: store,
				maxConns: cfg.IAMMaxConnections, own: own,
			})
		})
		c.own = own.addr()
		// The probe goes through the own calls' listener: the public one
		// is bound once that is served (ownPath.start runs as it binds).
		client := iam.NewFromConfig(probeConfig(IAMRegion, creds), func(o *iam.Options) {
			o.BaseEndpoint = aws.String(endpointURL(c.own))
		})
		return c, func(ctx context.Context) error {
			// The gateway needs the private socket as much as clients
			// need the public port.
			if _, err := os.Stat(sockPath); err != nil {
				return fmt.Errorf("private socket: %w", err)
			}
			if err := own.ready(); err != nil {
				return err
			}
			// One user by name: the answer needs the root keys checked
			// and reads at most that user's row. A listing would read
			// every user's (a start at 20,000 users spent 17% of its CPU
			// in this probe). NoSuchEntity is the expected answer; the
			// user, should someone have made it, proves as much.
			_, err := client.GetUser(ctx, &iam.GetUserInput{UserName: aws.String(probeUser)})
			var apiErr smithy.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchEntity" {
				return nil
			}
			return err
		}
	})
	if err != nil {
		return err
	}
	s.iamOwn = s.iam.own
	if err := repaired(); err != nil {
		return err
	}
	// From here on, the calls in flight are recorded: after the bind
	// (run/'s stamp) and the repair (objects/'s).
	inFlight := cfg.S3MaxConnections + ownMaxConnections // versitygw's in-flight limit, shared by both listeners
	if s.inFlight, err = openInFlight(s.dataDir, inFlight); err != nil {
		s.log.Warn("Calls in flight are not recorded: the next start after a kill repairs every bucket", "error", err)
	}

	s.s3Addr, s.gw, err = startListener(ctx, "S3 server", cfg.S3Listen, func(addr string) (*component, func(context.Context) error) {
		own, err := openOwnPath()
		if err != nil {
			return failed(err), nil
		}
		c := launch(func(ctx context.Context) error {
			// A new backend per run: RunVersityGW shuts it down on return.
			be, err := posix.New(objectsDir, objectMeta, posix.PosixOpts{VersioningDir: versionsDir})
			if err != nil {
				return errors.Join(fmt.Errorf("open object store %s: %w", objectsDir, err), own.shutdown())
			}
			tracked := trackedBackend{keyRecorder: keyRecorder{Posix: be, versionsDir: versionsDir}, inFlight: s.inFlight}
			return runGateway(ctx, tracked, &embedgw.Config{
				RootUserAccess: cfg.RootAccessKey,
				RootUserSecret: cfg.RootSecretKey,
				Region:         cfg.Region,
				Ports:          []string{addr},
				// Both limits are the sum of both listeners': ownPath.start
				// sets the public listener's own before it serves.
				MaxConnections:        inFlight,
				MaxRequests:           inFlight,
				MultipartMaxParts:     10000,
				StandaloneIAMEndpoint: sockPath,
				// No KeepAlive (see runIAMAPI): with it, Stop could wait
				// out the whole shutdown timeout.
				Quiet: true,
				S3Options: []s3api.Option{func(srv *s3api.S3ApiServer) {
					s3api.WithOnListen(func() { own.start(srv, cfg.S3MaxConnections, 0) })(srv)
				}},
			}, own)
		})
		c.own = own.addr()
		client := s3.NewFromConfig(probeConfig(cfg.Region, creds), func(o *s3.Options) {
			o.BaseEndpoint = aws.String(endpointURL(c.own))
			o.UsePathStyle = true
		})
		return c, func(ctx context.Context) error {
			if err := own.ready(); err != nil {
				return err
			}
			// One bucket by name, as the IAM API's probe: the answer
			// needs the root keys checked and stats one directory.
			// ListBuckets, even of one, reads and lstats every bucket's
			// directory in versitygw's posix backend (58 % of a clean
			// restart's CPU at 100,000). NotFound is the expected
			// answer; the bucket, should someone have made it, proves
			// as much.
			_, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(probeBucket)})
			var notFound *s3types.NotFound
			if errors.As(err, &notFound) {
				return nil
			}
			return err
		}
	})
	if err != nil {
		return err
	}
	s.s3Own = s.gw.own
	return nil
}

// runGateway runs versitygw's S3 server until ctx ends, and stops the own
// calls' listener before it: that serves the S3 server's handler, which
// must not see its backend shut down under a request.
func runGateway(ctx context.Context, be backend.Backend, cfg *embedgw.Config, own *ownPath) error {
	gwCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- embedgw.RunVersityGW(gwCtx, be, cfg) }()
	select {
	case err := <-done:
		return errors.Join(err, own.shutdown())
	case <-ctx.Done():
	}
	ownErr := own.shutdown()
	cancel()
	return errors.Join(<-done, ownErr)
}

// failed is a component that has already failed with err.
func failed(err error) *component {
	return launch(func(context.Context) error { return err })
}

// startListener runs one versitygw server on listen and waits until probe
// succeeds. A port picked for ":0" that another process grabs first is
// replaced by a new one.
func startListener(ctx context.Context, what, listen string, run func(addr string) (*component, func(context.Context) error)) (string, *component, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", nil, fmt.Errorf("start embedded %s: listen address %q: %w", what, listen, err)
	}
	auto := port == "0"
	for attempt := 1; ; attempt++ {
		addr, err := reserve(host, port)
		if err != nil {
			return "", nil, fmt.Errorf("start embedded %s on %s: %w", what, listen, bindError(err))
		}
		c, probe := run(addr)
		if probe == nil {
			err = c.shutdown()
		} else {
			err = waitReady(ctx, c, probe)
		}
		if err == nil {
			return addr, c, nil
		}
		_ = c.shutdown()
		if auto && errors.Is(err, syscall.EADDRINUSE) && attempt < portAttempts {
			continue
		}
		return "", nil, fmt.Errorf("start embedded %s on %s: %w", what, addr, bindError(err))
	}
}

// reserve checks that host:port can be bound, picking a free port for port
// 0, and returns the address to hand to versitygw. The listener is closed
// again: versitygw only accepts addresses, not listeners.
func reserve(host, port string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if err := ln.Close(); err != nil {
		return "", err
	}
	return addr, nil
}

// waitReady polls probe until it succeeds, the component exits, or ctx ends.
func waitReady(ctx context.Context, c *component, probe func(context.Context) error) error {
	var last error
	for {
		select {
		case <-c.done:
			if c.err == nil {
				return errors.New("server stopped during startup")
			}
			return c.err
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = probe(pctx)
		cancel()
		if last == nil {
			// A bind failure is reported within moments of the probe
			// reaching someone else's listener: look once more.
			select {
			case <-c.done:
				continue
			case <-time.After(pollInterval):
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last check: %w)", ctx.Err(), last)
		case <-c.done:
		case <-time.After(pollInterval):
		}
	}
}

// bindError shortens a listen error to its errno ("address already in use")
// when there is one: the address is already part of the message.
func bindError(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == syscall.EADDRINUSE {
		return errno
	}
	return err
}

// privateSocket returns the path of the IAM API's private socket,
// runDir/iam.sock. runDir is 0700: only this user may ask the IAM API to
// check signatures. A socket file left by a process killed before it could
// remove it is no obstacle: versitygw removes a stale socket before it binds
// (TestStartWritesOnlyUnderDataDir). A unix socket path must fit in
// sockaddr_un (108 bytes); when runDir's path is longer, the socket is reached through an
// open descriptor of runDir, /proc/self/fd/N/iam.sock, and that descriptor
// is returned to be closed after the servers stop.
func privateSocket(runDir string) (string, *os.File, error) {
	sock := filepath.Join(runDir, socketName)
	if len(sock) <= maxSocketPath {
		return sock, nil, nil
	}
	dir, err := os.Open(runDir)
	if err != nil {
		return "", nil, fmt.Errorf("open socket directory (its path is too long for a unix socket): %w", err)
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), socketName), dir, nil
}

func probeConfig(region string, creds aws.CredentialsProvider) aws.Config {
	return aws.Config{
		Region:      region,
		Credentials: creds,
		HTTPClient:  &http.Client{Timeout: probeTimeout},
		Retryer:     func() aws.Retryer { return aws.NopRetryer{} },
	}
}

func endpointURL(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// gatewayDrainLimit is how long the S3 server's shutdown may take and
// still count as drained. versitygw gives its server 10 s
// (s3api.shutDownDuration) and then returns without an error, requests
// still running: a shutdown that took longer than this may not have
// drained. A var for tests.
var gatewayDrainLimit = 9 * time.Second

// supervise stops both servers when Stop is called or either one exits.
// A stop asked for, in which both servers shut down cleanly, leaves what
// saves the next start work: the clean-stop marker (cleanstop.go).
func (s *Server) supervise() {
	asked := false
	select {
	case <-s.stop:
		asked = true
	case <-s.gw.done:
	case <-s.iam.done:
	}
	// The gateway first: it depends on the IAM API, not the other way.
	var errs []error
	began := time.Now()
	if err := s.gw.shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("embedded S3 server on %s: %w", s.s3Addr, err))
	}
	drained := time.Since(began) < gatewayDrainLimit
	if err := s.inFlight.close(); err != nil {
		errs = append(errs, fmt.Errorf("in-flight file: %w", err))
	}
	if err := s.iam.shutdown(); err != nil {
		errs = append(errs, fmt.Errorf("embedded IAM API on %s: %w", s.iamAddr, err))
	}
	if asked && len(errs) == 0 && !s.crash {
		s.leaveCleanStop(drained)
	}
	if s.sockDir != nil {
		if err := s.sockDir.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close the IAM users database: %w", err))
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	s.err = errors.Join(errs...)
	running.Store(false)
	close(s.closed)
}

// leaveCleanStop writes the clean-stop marker. It is not needed: a
// failure is logged and the next start does the full work.
//
// It is fsynced, and the objects and buckets it vouches for are not (the
// store does not fsync): the file systems are synced first (syncfs), so
// that a crash of the machine after the stop cannot keep a marker and
// lose what it describes (a bucket's directory without its ACL). The IAM
// users need neither (their database is closed after, which checkpoints
// it).
//
// drained says the S3 server's shutdown ended before versitygw's own
// limit: its requests had all been answered. A shutdown that waited out
// the limit returned with requests still running (versitygw prints that
// error and returns nil), which die with the process as under a kill, so
// the marker is not left: the next start repairs.
func (s *Server) leaveCleanStop(drained bool) {
	if err := syncFS(filepath.Join(s.dataDir, "objects"), filepath.Join(s.dataDir, "versions")); err != nil {
		s.log.Warn("The next start repairs the data directory as after a kill", "error", err)
		return
	}
	if !drained {
		s.log.Warn("S3 requests were still running when the embedded server stopped; the next start repairs the data directory as after a kill")
		return
	}
	if err := writeCleanStop(s.dataDir); err != nil {
		s.log.Warn("The next start repairs the data directory as after a kill", "error", err)
	}
}

// S3Endpoint is the URL of the S3 API, like http://127.0.0.1:9000.
func (s *Server) S3Endpoint() string { return endpointURL(s.s3Addr) }

// IAMEndpoint is the URL of the IAM API.
func (s *Server) IAMEndpoint() string { return endpointURL(s.iamAddr) }

// OwnS3Endpoint and OwnIAMEndpoint are the URLs for this process's own
// calls: loopback listeners of their own, served by the same handlers as
// the public ones, whose connection limits they do not share (ownPath).
func (s *Server) OwnS3Endpoint() string { return endpointURL(s.s3Own) }

// OwnIAMEndpoint is the IAM API's URL for this process's own calls (see
// OwnS3Endpoint).
func (s *Server) OwnIAMEndpoint() string { return endpointURL(s.iamOwn) }

// Region is the S3 signing region.
func (s *Server) Region() string { return s.region }

// Stop shuts both servers down and waits for them, or for ctx. It returns
// what Wait returns.
func (s *Server) Stop(ctx context.Context) error {
	s.once.Do(func() { close(s.stop) })
	select {
	case <-s.closed:
		return s.err
	case <-ctx.Done():
		return fmt.Errorf("stop embedded S3 server: %w", ctx.Err())
	}
}

// Wait blocks until both servers have returned, after Stop or because one
// of them failed (which stops the other), and returns their errors; nil
// after a clean Stop.
func (s *Server) Wait() error {
	<-s.closed
	return s.err
}
