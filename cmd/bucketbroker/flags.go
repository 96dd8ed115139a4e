package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/storage"
)

// The storage flags are declared here, once, for every command that builds
// a backend (serve, controller, admin audit): each of them names the same
// setting, so it has one name, one default and one help text everywhere.
// storage.Start is the one place that builds the backend from them, for
// serve through broker.Start.

// storageFlagSet says which optional storage flags a command takes.
type storageFlagSet struct {
	// publicEndpoint: the command hands the S3 endpoint to applications
	// (serve's credentials, the controller's ConfigMaps).
	publicEndpoint bool
}

// bindStorageFlags declares the storage flags on cmd, writing into cfg.
func bindStorageFlags(f *pflag.FlagSet, cfg *storage.Config, set storageFlagSet) {
	bindDataDirFlag(f, &cfg.DataDir)
	f.StringVar(&cfg.Driver, "driver", storage.DriverEmbedded, "storage driver: embedded (in-process S3 + IAM server on --data-dir), s3iam (any external S3 + IAM API endpoint, a running serve's included) or minio (a MinIO server at --s3-endpoint: users through its admin API)")
	f.StringVar(&cfg.S3Listen, "s3-listen", "127.0.0.1:9000", "embedded driver: address of the S3 API")
	f.StringVar(&cfg.IAMListen, "iam-listen", "127.0.0.1:9001", "embedded driver: address of the IAM API")
	f.IntVar(&cfg.S3MaxConnections, "s3-max-connections", s3gateway.DefaultS3MaxConnections, "embedded driver: connections the S3 API serves at once; beyond, 503 (a request header must arrive within 10s, its body within 30s + 1s per 64 KiB)")
	f.IntVar(&cfg.IAMMaxConnections, "iam-max-connections", s3gateway.DefaultIAMMaxConnections, "embedded driver: connections the IAM API serves at once; beyond, 503 (timeouts as the S3 API's); bucketbroker's own calls to both APIs do not count")
	f.StringVar(&cfg.S3Endpoint, "s3-endpoint", "", "s3iam and minio drivers: S3 API URL (s3iam: empty means AWS S3; minio: required, its admin API is at the same URL)")
	f.StringVar(&cfg.IAMEndpoint, "iam-endpoint", "", "s3iam driver: IAM API URL (empty: AWS IAM)")
	f.StringVar(&cfg.Region, "region", "us-east-1", "S3 region")
	f.BoolVar(&cfg.PathStyle, "path-style", false, "s3iam driver: path-style bucket addressing (most non-AWS servers need it)")
	f.StringVar(&cfg.Prefix, "name-prefix", "bb", "prefix of backend bucket and user names (1-16 of a-z, 0-9, -); admin audit judges only resources named under it")
	if set.publicEndpoint {
		f.StringVar(&cfg.PublicS3Endpoint, "public-s3-endpoint", "", "S3 URL handed to applications (binding credentials, claims' ConfigMaps), when they reach the backend by another address")
	}
}

// storageFromEnv reads the backend's root keys from the environment (never
// from flags: flags show in process listings), and refuses the s3iam
// and minio drivers without them.
func storageFromEnv(cfg *storage.Config) error {
	cfg.RootAccessKey, cfg.RootSecretKey = os.Getenv("BUCKETBROKER_S3_ROOT_ACCESS_KEY"), os.Getenv("BUCKETBROKER_S3_ROOT_SECRET_KEY")
	if (cfg.Driver == storage.DriverS3IAM || cfg.Driver == storage.DriverMinIO) && (cfg.RootAccessKey == "" || cfg.RootSecretKey == "") {
		return fmt.Errorf("--driver %s needs BUCKETBROKER_S3_ROOT_ACCESS_KEY and BUCKETBROKER_S3_ROOT_SECRET_KEY in the environment", cfg.Driver)
	}
	return nil
}

// bindDataDirFlag declares --data-dir, writing into dir.
func bindDataDirFlag(f *pflag.FlagSet, dir *string) {
	f.StringVar(dir, "data-dir", "./data", "folder of bucketbroker's files: the default SQLite store, the encryption key, and the embedded driver's objects, IAM data and root keys")
}

// bindStoreFlag declares --store, the state store, writing into spec.
func bindStoreFlag(f *pflag.FlagSet, spec *string) {
	f.StringVar(spec, "store", "", "state store: a PostgreSQL DSN (postgres://user@host/db, for several replicas) or a SQLite file (default <data-dir>/bucketbroker.db); also from BUCKETBROKER_STORE")
}

// storeFromEnv fills spec from BUCKETBROKER_STORE unless --store was given:
// a DSN may hold a password, which the environment keeps out of ps.
func storeFromEnv(cmd *cobra.Command, spec *string) {
	if !cmd.Flags().Changed("store") {
		*spec = os.Getenv("BUCKETBROKER_STORE")
	}
}
