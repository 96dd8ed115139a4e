package storage

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Drivers bucketbroker can use.
const (
	// DriverEmbedded starts an S3 + IAM server in-process and uses the
	// s3iam driver against it.
	DriverEmbedded = "embedded"
	// DriverS3IAM uses any external S3 + IAM API endpoint.
	DriverS3IAM = "s3iam"
	// DriverMinIO uses a MinIO server: buckets through its S3 API, users
	// and their keys through its admin API, both at S3Endpoint.
	DriverMinIO = "minio"
)

// Config is the storage side's settings: what the storage flags set.
type Config struct {
	// Driver is DriverEmbedded (also when empty), DriverS3IAM or
	// DriverMinIO.
	Driver string
	// DataDir holds, for the embedded driver, objects and IAM data (in
	// DataDir/s3) and generated root keys. Callers keep their own files
	// there too (serve's state and encryption key).
	DataDir string
	// S3Listen and IAMListen are the embedded server's addresses;
	// S3MaxConnections and IAMMaxConnections their connection limits (0:
	// s3gateway's defaults).
	S3Listen, IAMListen                 string
	S3MaxConnections, IAMMaxConnections int
	// S3Endpoint, IAMEndpoint, Region and PathStyle are the s3iam driver's
	// external endpoint; the minio driver uses S3Endpoint and Region.
	S3Endpoint, IAMEndpoint, Region string
	PathStyle                       bool
	// PublicS3Endpoint is the S3 URL given to applications (credentials,
	// claims' ConfigMaps); empty means the endpoint the driver uses.
	PublicS3Endpoint string
	// RootAccessKey and RootSecretKey are the server's root credentials;
	// for the embedded driver, empty ones are generated and kept in the
	// data dir.
	RootAccessKey, RootSecretKey string
	// Prefix starts the names of the buckets and users made there.
	Prefix string
	// Logger receives the embedded server's messages.
	Logger *slog.Logger
}

// Storage is a running storage side.
type Storage struct {
	// Driver is the driver for the server: s3iam's, or minio's.
	Driver driver.Driver
	// S3Endpoint and IAMEndpoint are the server's endpoints: for the
	// embedded driver its public listeners, which the driver does not use
	// (it has listeners of its own, s3gateway.Server.OwnS3Endpoint).
	S3Endpoint, IAMEndpoint string
	// PublicS3Endpoint is Config.PublicS3Endpoint, or S3Endpoint when that
	// is empty; Region and PathStyle are what applications need with it.
	PublicS3Endpoint, Region string
	PathStyle                bool
	// RootAccessKey and RootSecretKey are the root credentials in force.
	RootAccessKey, RootSecretKey string
	// GeneratedRootCredentials: the root keys were generated, now or at an
	// earlier start, and are kept in RootCredentialsFile.
	GeneratedRootCredentials bool
	RootCredentialsFile      string

	gateway *s3gateway.Server
}

// Start starts what cfg names (for the embedded driver, the server on
// cfg.DataDir, which it creates when missing) and checks that it answers.
// A listen address already in use fails with an error wrapping
// syscall.EADDRINUSE; a data dir another process serves, with
// s3gateway.ErrDataDirInUse.
func Start(ctx context.Context, cfg Config) (_ *Storage, err error) {
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil { // the embedded server changes the working directory
		return nil, fmt.Errorf("data dir: %w", err)
	}
	b := &Storage{}
	defer func() {
		if err != nil {
			_ = b.Stop(context.Background())
		}
	}()
	dcfg := s3iam.Config{Region: cfg.Region, PathStyle: cfg.PathStyle}
	switch cfg.Driver {
	case DriverEmbedded, "":
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		if cfg.RootAccessKey == "" || cfg.RootSecretKey == "" {
			b.RootCredentialsFile = filepath.Join(cfg.DataDir, "s3-root-credentials.json")
			cfg.RootAccessKey, cfg.RootSecretKey, err = rootCredentials(b.RootCredentialsFile)
			if err != nil {
				return nil, err
			}
			b.GeneratedRootCredentials = true
		}
		b.gateway, err = s3gateway.Start(ctx, s3gateway.Config{
			DataDir: filepath.Join(cfg.DataDir, "s3"), S3Listen: cfg.S3Listen, IAMListen: cfg.IAMListen,
			RootAccessKey: cfg.RootAccessKey, RootSecretKey: cfg.RootSecretKey, Region: cfg.Region,
			S3MaxConnections: cfg.S3MaxConnections, IAMMaxConnections: cfg.IAMMaxConnections,
			Logger: cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		// The driver's calls go through listeners of their own, which no
		// public client can fill.
		dcfg.S3Endpoint, dcfg.IAMEndpoint, dcfg.Region, dcfg.PathStyle = b.gateway.OwnS3Endpoint(), b.gateway.OwnIAMEndpoint(), b.gateway.Region(), true
		b.S3Endpoint, b.IAMEndpoint = b.gateway.S3Endpoint(), b.gateway.IAMEndpoint()
	case DriverS3IAM:
		dcfg.S3Endpoint, dcfg.IAMEndpoint = cfg.S3Endpoint, cfg.IAMEndpoint
		b.S3Endpoint, b.IAMEndpoint = dcfg.S3Endpoint, dcfg.IAMEndpoint
	case DriverMinIO:
		if cfg.S3Endpoint == "" {
			return nil, errors.New("--driver minio needs --s3-endpoint, the MinIO server's URL")
		}
		// MinIO addresses buckets by path, and serves its admin API on
		// the S3 port.
		dcfg.S3Endpoint, dcfg.PathStyle = cfg.S3Endpoint, true
		b.S3Endpoint = cfg.S3Endpoint
	default:
		return nil, fmt.Errorf("unknown driver %q (want %s, %s or %s)", cfg.Driver, DriverEmbedded, DriverS3IAM, DriverMinIO)
	}
	dcfg.AccessKeyID, dcfg.SecretAccessKey = cfg.RootAccessKey, cfg.RootSecretKey
	b.RootAccessKey, b.RootSecretKey = cfg.RootAccessKey, cfg.RootSecretKey
	if cfg.Driver == DriverMinIO {
		b.Driver, err = minio.New(minio.Config{Endpoint: dcfg.S3Endpoint, Region: dcfg.Region,
			AccessKeyID: dcfg.AccessKeyID, SecretAccessKey: dcfg.SecretAccessKey})
	} else {
		b.Driver, err = s3iam.New(dcfg)
	}
	if err != nil {
		return nil, err
	}
	b.Region, b.PathStyle = dcfg.Region, dcfg.PathStyle
	if b.Region == "" {
		b.Region = "us-east-1"
	}
	b.PublicS3Endpoint = cfg.PublicS3Endpoint
	if b.PublicS3Endpoint == "" {
		b.PublicS3Endpoint = b.S3Endpoint
	}
	obsCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = b.Driver.Observe(obsCtx, driver.ObserveRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("storage backend check failed: %w", err)
	}
	return b, nil
}

// readyTimeout bounds one readiness check: a probe must answer before the
// kubelet's own timeout gives up on it.
const readyTimeout = 5 * time.Second

// Ready checks that the server answers with the root credentials, within
// a few seconds: serve's /readyz and the controller's run it.
func (b *Storage) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	_, err := b.Driver.Observe(ctx, driver.ObserveRequest{})
	return err
}

// Stop stops the embedded server, if there is one.
func (b *Storage) Stop(ctx context.Context) error {
	if b == nil || b.gateway == nil {
		return nil
	}
	return b.gateway.Stop(ctx)
}

// rootCredentials loads the embedded server's root keys from path, or
// generates and stores them (0600) on first start.
func rootCredentials(path string) (access, secret string, err error) {
	var c struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	data, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(data, &c); err != nil || c.AccessKey == "" || c.SecretKey == "" {
			return "", "", fmt.Errorf("embedded S3 root credentials file %s is corrupt; remove it only together with the data dir's s3 folder", path)
		}
		return c.AccessKey, c.SecretKey, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("read embedded S3 root credentials: %w", err)
	}
	c.AccessKey = "BBROOT" + strings.ToUpper(randomString(14))[:14]
	c.SecretKey = randomString(40)
	data, _ = json.Marshal(c)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", "", fmt.Errorf("store embedded S3 root credentials: %w", err)
	}
	return c.AccessKey, c.SecretKey, nil
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	s := base64.RawURLEncoding.EncodeToString(b)
	s = strings.NewReplacer("-", "a", "_", "b").Replace(s)
	return s[:n]
}
