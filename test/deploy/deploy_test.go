package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	root    string // the repository
	helmBin string
	env     *envtest.Environment
	admin   client.Client
	scheme  = runtime.NewScheme()
	// skipAll, when set, is why no test here can run.
	skipAll string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = harness.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	helmBin = os.Getenv("BUCKETBROKER_TEST_HELM")
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	switch {
	case helmBin == "" && assets == "":
		skipAll = "BUCKETBROKER_TEST_HELM and KUBEBUILDER_ASSETS are unset (run under hack/with-test-servers.sh)"
	case helmBin == "":
		skipAll = "BUCKETBROKER_TEST_HELM is unset (hack/helm.sh builds helm; hack/with-test-servers.sh sets it)"
	case assets == "":
		skipAll = "KUBEBUILDER_ASSETS is unset (hack/envtest-assets.sh; hack/with-test-servers.sh sets it)"
	}
	if skipAll != "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "deploy tests: CI=true but", skipAll)
			return 1
		}
		return m.Run()
	}
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, obv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	useExisting := false
	// No CRDs: the chart installs them.
	env = &envtest.Environment{Scheme: scheme, BinaryAssetsDirectory: assets, UseExistingCluster: &useExisting}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		_ = env.Stop()
		return 1
	}
	defer func() { _ = env.Stop() }()
	defer removeImage()
	if admin, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func needCluster(t *testing.T) {
	t.Helper()
	if skipAll != "" {
		t.Skip(skipAll)
	}
}

// render runs helm template on the chart with the values given as --set
// arguments, and returns the objects it makes.
func render(t *testing.T, release, namespace string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", release, filepath.Join(root, "charts", "bucketbroker"), "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read helm output: %v", err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("helm output is not YAML: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if len(objs) == 0 {
		t.Fatalf("helm %s rendered nothing", strings.Join(args, " "))
	}
	return objs
}

// apply server-side applies objs as helm install would send them: the CRDs
// first (and waits until they are established), then the namespace, then
// the rest. Any rejection fails the test.
func apply(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for pass := 0; pass <= 2; pass++ {
		for _, o := range objs {
			if rank(o) != pass {
				continue
			}
			ac := client.ApplyConfigurationFromUnstructured(o.DeepCopy())
			if err := admin.Apply(ctx, ac, client.FieldOwner("helm"), client.ForceOwnership); err != nil {
				t.Fatalf("server-side apply of %s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
			if pass == 0 {
				waitEstablished(ctx, t, o.GetName())
			}
		}
	}
}

// rank orders objects as helm and kubectl send them: CRDs, namespaces, the
// rest.
func rank(o *unstructured.Unstructured) int {
	switch o.GetKind() {
	case "CustomResourceDefinition":
		return 0
	case "Namespace":
		return 1
	}
	return 2
}

func waitEstablished(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatalf("get CRD %s: %v", name, err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s not established: %v", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	return n
}

// deployment returns the rendered Deployment named name.
func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatalf("Deployment %s: %v", name, err)
			}
			return &d
		}
	}
	t.Fatalf("the chart rendered no Deployment %s (kinds: %v)", name, kinds(objs))
	return nil
}

// TestChartAppliesToAPIServer renders the chart for the main combinations
// of values and applies every object to a real kube-apiserver: an object
// the API server rejects (a bad field, a wrong type, a CRD that does not
// validate) fails here, not in an operator's cluster. Each combination is
// its own release and namespace, as separate installs would be.
func TestChartAppliesToAPIServer(t *testing.T) {
	needCluster(t)
	s3iam := []string{"driver=s3iam", "s3iam.s3Endpoint=https://s3.example.com", "s3iam.iamEndpoint=https://iam.example.com"}
	cases := []struct {
		name        string
		set         []string
		deployments []string
	}{
		{"controller-only", nil, []string{"controller"}},
		{"broker-only", []string{"controller.enabled=false", "broker.enabled=true"}, []string{"broker"}},
		{"both", []string{"broker.enabled=true"}, []string{"controller", "broker"}},
		{"postgres-3-replicas", append([]string{"controller.enabled=false", "broker.enabled=true", "broker.replicas=3",
			"broker.store.secretName=bucketbroker-pg", "broker.encryptionKeySecret=bucketbroker-key"}, s3iam...), []string{"broker"}},
		{"tls", []string{"controller.enabled=false", "broker.enabled=true", "broker.tls.secretName=bucketbroker-tls"}, []string{"broker"}},
		{"s3iam-controller-2-replicas", append([]string{"controller.replicas=2", "controller.installCRDs=false"}, s3iam...), []string{"controller"}},
		{"minio-both", []string{"broker.enabled=true", "controller.installCRDs=false", "driver=minio", "minio.endpoint=https://minio.example.com"}, []string{"controller", "broker"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			release := "bb-" + tc.name
			set := append([]string{"createNamespace=true", "controller.storageClass.name=" + release}, tc.set...)
			objs := render(t, release, release, set...)
			apply(ctx, t, objs)
			for _, d := range tc.deployments {
				var got appsv1.Deployment
				if err := admin.Get(ctx, client.ObjectKey{Namespace: release, Name: release + "-" + d}, &got); err != nil {
					t.Errorf("Deployment %s-%s after apply: %v", release, d, err)
				}
			}
			t.Logf("applied %v", kinds(objs))
		})
	}

	t.Run("refused", func(t *testing.T) {
		// Values that cannot work are refused at render time, with the reason.
		for name, set := range map[string][]string{
			"embedded broker with 3 replicas":   {"broker.enabled=true", "broker.replicas=3"},
			"embedded controller, 2 replicas":   {"controller.replicas=2"},
			"3 replicas without a shared store": append([]string{"broker.enabled=true", "broker.replicas=3"}, s3iam...),
		} {
			args := []string{"template", "x", filepath.Join(root, "charts", "bucketbroker")}
			for _, s := range set {
				args = append(args, "--set", s)
			}
			out, err := exec.Command(helmBin, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "replicas > 1 needs") {
				t.Errorf("%s: helm template: %v, want a refusal that says what replicas need\n%s", name, err, out)
			}
		}
		out, err := exec.Command(helmBin, "template", "x", filepath.Join(root, "charts", "bucketbroker"), "--set", "driver=minio").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "minio.endpoint is required with driver minio") {
			t.Errorf("driver minio without its endpoint: helm template: %v, want the refusal naming minio.endpoint\n%s", err, out)
		}
	})
}

// TestConfigIsTheChart checks that config/ is what the chart renders
// (hack/chart-config.sh --check, also run by make lint), so the manifests
// the README applies and the chart cannot drift apart.
func TestConfigIsTheChart(t *testing.T) {
	needCluster(t)
	cmd := exec.Command(filepath.Join(root, "hack", "chart-config.sh"), "--check")
	cmd.Env = append(os.Environ(), "HELM="+helmBin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/chart-config.sh --check: %v\n%s", err, out)
	}
}

// TestChartLints runs helm lint on the chart, with the defaults and with
// both doors on.
func TestChartLints(t *testing.T) {
	needCluster(t)
	for _, set := range [][]string{nil, {"--set", "broker.enabled=true"}} {
		args := append([]string{"lint", "--strict", filepath.Join(root, "charts", "bucketbroker")}, set...)
		if out, err := exec.Command(helmBin, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestBrokerStartupProbe: the broker's and the controller's containers
// have a startup probe on /healthz that gives a start 10 minutes by
// default (the first start after an upgrade migrates the embedded
// server's IAM users; killed by the liveness probe mid-way, it would start
// over at every restart), set from values.yaml.
func TestBrokerStartupProbe(t *testing.T) {
	needCluster(t)
	for _, tc := range []struct {
		component, port  string
		set              []string
		period, failures int32
	}{
		{"broker", "osb", nil, 10, 60},
		{"broker", "osb", []string{"broker.startupProbe.periodSeconds=5", "broker.startupProbe.failureThreshold=720"}, 5, 720},
		{"controller", "probes", nil, 10, 60},
		{"controller", "probes", []string{"controller.startupProbe.periodSeconds=5", "controller.startupProbe.failureThreshold=720"}, 5, 720},
	} {
		set := []string{"controller.enabled=false", "broker.enabled=true"}
		if tc.component == "controller" {
			set = []string{"controller.enabled=true", "broker.enabled=false"}
		}
		set = append(set, tc.set...)
		d := deployment(t, render(t, "bb", "bb", set...), "bb-"+tc.component)
		c := d.Spec.Template.Spec.Containers[0]
		p := c.StartupProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != tc.port {
			t.Fatalf("--set %v: the %s's startup probe: %+v; want an HTTP GET of /healthz on port %s", tc.set, tc.component, p, tc.port)
		}
		if p.PeriodSeconds != tc.period || p.FailureThreshold != tc.failures {
			t.Errorf("--set %v: startup probe every %d s, %d failures; want %d and %d", tc.set, p.PeriodSeconds, p.FailureThreshold, tc.period, tc.failures)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("--set %v: the liveness probe: %+v; want /healthz", tc.set, c.LivenessProbe)
		}
	}
}
