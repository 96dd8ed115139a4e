package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
)

// APIServer is a kube-apiserver and etcd started by envtest, with the
// objectbucket.io CRDs installed, for tests that run `bucketbroker
// controller` as a process against it.
type APIServer struct {
	env *envtest.Environment
	// Client is the test's own (admin) client.
	Client crclient.Client
	// StartedIn is how long envtest took to start, for the log.
	StartedIn time.Duration
}

// StartAPIServer starts envtest from the binaries in assets (the directory
// hack/envtest-assets.sh prints) and installs the objectbucket.io CRDs of
// the repository at root that BUCKETBROKER_TEST_CRDS selects (CRDVariant).
func StartAPIServer(assets, root string) (*APIServer, error) {
	_, crds, err := CRDVariant(root)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, obv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	useExisting := false
	env := &envtest.Environment{
		Scheme:                scheme,
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crds},
		ErrorIfCRDPathMissing: true,
		// Never a developer's cluster: tests create cluster-wide objects.
		UseExistingCluster: &useExisting,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start envtest from %s: %w", assets, err)
	}
	c, err := crclient.New(cfg, crclient.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("create client: %w", err)
	}
	return &APIServer{env: env, Client: c, StartedIn: time.Since(start)}, nil
}

// Stop stops the API server and etcd.
func (a *APIServer) Stop() error { return a.env.Stop() }

// ControllerKubeconfig makes a user bound to nothing but the ClusterRole of
// the repository's config/rbac/role.yaml (the controller's least privilege,
// as deployed) and writes a kubeconfig for it to path.
func (a *APIServer) ControllerKubeconfig(ctx context.Context, root, user, path string) error {
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	first, _, _ := bytes.Cut(data, []byte("\n---"))
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(first, &role); err != nil {
		return fmt.Errorf("read the controller's ClusterRole: %w", err)
	}
	role.Name = "bucketbroker-controller-" + user
	if err := a.Client.Create(ctx, &role); err != nil {
		return fmt.Errorf("create cluster role: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := a.Client.Create(ctx, binding); err != nil {
		return fmt.Errorf("create cluster role binding: %w", err)
	}
	u, err := a.env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		return fmt.Errorf("add user %s: %w", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", user, err)
	}
	return os.WriteFile(path, kc, 0o600)
}

// LeaderElectionRole grants user the Role of the repository's
// config/rbac/role.yaml that leader election needs (Leases, in the
// controller's namespace only) in namespace, as deployed: a Controller
// with LeaseNamespace set runs with no more than that and the ClusterRole
// of ControllerKubeconfig.
func (a *APIServer) LeaderElectionRole(ctx context.Context, root, user, namespace string) error {
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	var role rbacv1.Role
	for doc := range bytes.SplitSeq(data, []byte("\n---")) {
		var r rbacv1.Role
		if err := yaml.Unmarshal(doc, &r); err != nil {
			return fmt.Errorf("read config/rbac/role.yaml: %w", err)
		}
		if r.Kind == "Role" {
			role = r
		}
	}
	if role.Name == "" {
		return fmt.Errorf("config/rbac/role.yaml holds no Role for leader election")
	}
	role.Namespace, role.ResourceVersion = namespace, ""
	if err := a.Client.Create(ctx, &role); err != nil {
		return fmt.Errorf("create role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := a.Client.Create(ctx, binding); err != nil {
		return fmt.Errorf("create role binding: %w", err)
	}
	return nil
}

// Namespace creates a namespace named from prefix. envtest runs no
// namespace controller, so it is never really deleted: names never repeat.
func (a *APIServer) Namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := a.Client.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	return ns.Name, nil
}
