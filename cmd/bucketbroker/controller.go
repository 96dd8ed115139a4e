package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bucketbroker/bucketbroker/internal/buildinfo"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/pkg/provisioner"
)

type controllerOptions struct {
	kubeconfig       string
	provisionerName  string
	leaderElect      bool
	leaderElectionNS string
	metricsAddr      string
	probeAddr        string
	pprofListen      string
	maxConcurrent    int
	subRegion        string
	storage          storage.Config
	log              logOptions
}

func newControllerCommand() *cobra.Command {
	o := controllerOptions{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the Kubernetes ObjectBucketClaim controller",
		Long: `Run the ObjectBucketClaim controller (objectbucket.io/v1alpha1, the API Rook and
NooBaa users already have). Claims whose StorageClass provisioner is
--provisioner-name get a bucket, a credential scoped to it, an ObjectBucket,
and a Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and a ConfigMap
(BUCKET_HOST, BUCKET_NAME, BUCKET_PORT, BUCKET_REGION, BUCKET_SUBREGION)
named like the claim.

The storage flags are serve's. With no flags it starts the embedded S3 + IAM
server on --data-dir, so a development cluster needs nothing else; the
ConfigMaps then point at --public-s3-endpoint, or at the embedded server's
address. The embedded server lives inside this process: run one replica.

Credentials come from the environment (never from flags):
  BUCKETBROKER_S3_ROOT_ACCESS_KEY, BUCKETBROKER_S3_ROOT_SECRET_KEY
      Root keys of the S3/IAM backend; generated and kept in the data dir
      for the embedded server, required for --driver s3iam.`,
		Example: `  # Against the current kubeconfig, embedded S3 server, no leader election
  bucketbroker controller --kubeconfig ~/.kube/config --leader-elect=false

  # An external S3 + IAM endpoint
  BUCKETBROKER_S3_ROOT_ACCESS_KEY=... BUCKETBROKER_S3_ROOT_SECRET_KEY=... \
    bucketbroker controller --driver s3iam --s3-endpoint http://s3.internal:7070 \
    --iam-endpoint http://s3.internal:7071 --path-style`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := storageFromEnv(&o.storage); err != nil {
				return err
			}
			if err := checkPprofFlag(o.pprofListen); err != nil {
				return err
			}
			return runController(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&o.provisionerName, "provisioner-name", provisioner.DefaultName, "StorageClass provisioner whose claims this controller serves")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect one active replica through a Lease")
	f.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables them)")
	f.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", provisioner.DefaultMaxConcurrentReconciles, "claims handled in parallel")
	f.StringVar(&o.subRegion, "sub-region", "", "value of BUCKET_SUBREGION in claims' ConfigMaps")
	bindStorageFlags(f, &o.storage, storageFlagSet{publicEndpoint: true})
	bindPprofFlag(f, &o.pprofListen)
	o.log.bind(cmd)
	return cmd
}

func runController(cmd *cobra.Command, o controllerOptions) error {
	log, err := o.log.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	// client-go logs through klog (leader election, event broadcasting):
	// into the same handler, in the same format.
	klog.SetSlogLogger(log)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cfg *rest.Config
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS, cfg.Burst = provisioner.ClientQPS, provisioner.ClientBurst

	o.storage.Logger = log
	if _, err := stdoutThroughLogger(log); err != nil {
		return err
	}
	prof, err := startPprof(o.pprofListen, log)
	if err != nil {
		return err
	}
	defer stopPprof(prof, log)
	be, err := storage.Start(ctx, o.storage)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := be.Stop(sctx); err != nil {
			log.Error("Stopping the embedded S3 server failed", "error", err)
		}
	}()
	host, port, err := hostPort(be.PublicS3Endpoint)
	if err != nil {
		return err
	}

	mopts, err := provisioner.ManagerOptions(o.provisionerName)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(o.provisionerName))
	mopts.LeaderElection = o.leaderElect
	mopts.LeaderElectionID = "bucketbroker-" + hex.EncodeToString(sum[:])[:12]
	mopts.LeaderElectionNamespace = o.leaderElectionNS
	mopts.LeaderElectionReleaseOnCancel = true
	mopts.Metrics = metricsserver.Options{BindAddress: o.metricsAddr}
	mopts.HealthProbeBindAddress = o.probeAddr
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	p, err := provisioner.New(be.Driver, provisioner.Options{
		Name: o.provisionerName, NamePrefix: o.storage.Prefix, Host: host, Port: port,
		Region: o.storage.Region, SubRegion: o.subRegion, MaxConcurrentReconciles: o.maxConcurrent,
	})
	if err != nil {
		return err
	}
	if err := p.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready as serve is: when the backend answers. A controller that
	// cannot reach it binds no claim, and a rollout should stop there.
	if err := mgr.AddReadyzCheck("storage-backend", func(req *http.Request) error { return be.Ready(req.Context()) }); err != nil {
		return err
	}
	if err := ctrlmetrics.Registry.Register(buildinfo.Get().Collector()); err != nil {
		return fmt.Errorf("register build info metric: %w", err)
	}
	log.Info("Starting the ObjectBucketClaim controller", "provisioner", o.provisionerName,
		"s3_endpoint", be.S3Endpoint, "bucket_host", host, "bucket_port", port, "leader_election", o.leaderElect)
	return mgr.Start(ctx)
}

// hostPort splits an S3 endpoint URL into what BUCKET_HOST and BUCKET_PORT
// hold; the port defaults from the scheme.
func hostPort(endpoint string) (string, int32, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return "", 0, fmt.Errorf("S3 endpoint %q: want a URL such as http://host:port", endpoint)
	}
	p := u.Port()
	if p == "" {
		p = "443"
		if u.Scheme == "http" {
			p = "80"
		}
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("S3 endpoint %q: port: %w", endpoint, err)
	}
	return u.Hostname(), int32(n), nil
}
