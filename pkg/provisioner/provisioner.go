package provisioner

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/objectbucket"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// DefaultName is the StorageClass provisioner name used when Options
// leaves it empty.
const DefaultName = objectbucket.DefaultProvisionerName

// Client-side limits of the client ManagerOptions makes: a request rate
// the API server's priority and fairness handles, well above what one
// claim's lifecycle (about 15 requests) times a burst of claims needs.
const (
	ClientQPS   = objectbucket.DefaultQPS
	ClientBurst = objectbucket.DefaultBurst
)

// DefaultMaxConcurrentReconciles is the number of claims handled in
// parallel when Options leaves it 0 (measured in docs/performance.md).
const DefaultMaxConcurrentReconciles = objectbucket.DefaultMaxConcurrentReconciles

// Options configure a Provisioner.
type Options struct {
	// Name is the StorageClass provisioner whose claims are served, e.g.
	// "example.com/bucket"; empty means DefaultName.
	Name string
	// NamePrefix starts backend bucket and user names (1-16 of a-z, 0-9,
	// inner -); empty means "bb".
	NamePrefix string
	// Host, Port, Region and SubRegion go into each claim's ConfigMap
	// (BUCKET_HOST, BUCKET_PORT, BUCKET_REGION, BUCKET_SUBREGION): where
	// applications reach the S3 endpoint.
	Host      string
	Port      int32
	Region    string
	SubRegion string
	// MaxConcurrentReconciles bounds claims handled in parallel; 0 means
	// DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
}

// Provisioner is the ObjectBucketClaim controller for one driver.
type Provisioner struct {
	drv  driver.Driver
	opts Options
}

// New returns a Provisioner that provisions through drv.
func New(drv driver.Driver, opts Options) (*Provisioner, error) {
	if drv == nil {
		return nil, fmt.Errorf("provisioner: a driver is required")
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.NamePrefix == "" {
		opts.NamePrefix = "bb"
	}
	if err := driver.ValidatePrefix(opts.NamePrefix); err != nil {
		return nil, err
	}
	return &Provisioner{drv: drv, opts: opts}, nil
}

// SetupWithManager adds the controller to mgr. mgr should be built with
// ManagerOptions (or at least its Scheme and Cache).
func (p *Provisioner) SetupWithManager(mgr ctrl.Manager) error {
	r, err := objectbucket.NewReconciler(mgr, p.drv, p.opts.reconciler())
	if err != nil {
		return err
	}
	return r.SetupWithManager(mgr)
}

// reconciler converts Options to the reconciler's: the one place the two
// meet. Options keeps its own, stable names for vendors, and leaves out
// what the reconciler offers tests only (SkipNameValidation);
// TestOptionsReachTheReconciler fails when a field is added to one and
// not carried over to the other.
func (o Options) reconciler() objectbucket.Options {
	return objectbucket.Options{
		ProvisionerName:         o.Name,
		Prefix:                  o.NamePrefix,
		BucketHost:              o.Host,
		BucketPort:              o.Port,
		Region:                  o.Region,
		SubRegion:               o.SubRegion,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
	}
}

// Scheme returns a scheme with the Kubernetes built-in types and the
// objectbucket.io/v1alpha1 types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := obv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ManagerOptions returns manager options for the provisioner name: the
// Scheme, and a cache that holds only Secrets and ConfigMaps labeled
// bucket-provisioner=<name>, so the controller never keeps the cluster's
// other Secrets in memory; and a client whose client-side rate limits are
// raised to ClientQPS and ClientBurst, so that hundreds of claims created
// at once bind in seconds (docs/performance.md). Callers add metrics,
// health and leader election settings.
func ManagerOptions(name string) (ctrl.Options, error) {
	if name == "" {
		name = DefaultName
	}
	s, err := Scheme()
	if err != nil {
		return ctrl.Options{}, err
	}
	return ctrl.Options{Scheme: s, Cache: objectbucket.CacheOptions(name), NewClient: objectbucket.NewClient}, nil
}

// LabelValue is the value of the bucket-provisioner label on the objects
// the controller creates for the provisioner name.
func LabelValue(name string) string { return objectbucket.LabelValue(name) }
