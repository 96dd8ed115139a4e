package broker

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// chartFiles is the chart's files/, absolute: found before any test runs,
// since the embedded server changes the working directory.
var chartFiles = func() string {
	p, err := filepath.Abs("../../charts/bucketbroker/files")
	if err != nil {
		return ""
	}
	return p
}()

// TestMonitoringNamesExportedMetrics: every metric the chart's alert rules
// (charts/bucketbroker/files/alerts.yaml) and Grafana dashboard
// (files/dashboard.json) query is one a broker exports, counted from the
// registry of a broker serving the bucket service and an upstream, so
// that vectors with no sample yet count too.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	chart := chartFiles
	if chart == "" {
		t.Fatal("the chart's files/ could not be found")
	}
	ctx := context.Background()
	ill := httptest.NewServer(illbroker.New(illbroker.Config{Username: "u", Password: "p"}))
	defer ill.Close()
	b, err := Start(ctx, Config{Listen: "127.0.0.1:0", Config: storage.Config{DataDir: t.TempDir(), S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0"},
		Upstreams: []upstream.Config{{Name: "ill", Client: osbclient.Config{URL: ill.URL, Username: "u", Password: "p"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := b.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc)
	go func() { b.registry.Describe(descs); close(descs) }()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	for _, want := range []string{"bucketbroker_ready", "bucketbroker_backend_retries_total", "bucketbroker_upstream_requests_total"} {
		if !exported[want] {
			t.Fatalf("the registry does not describe %s: the test counts nothing", want)
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	readInto(t, filepath.Join(chart, "alerts.yaml"), func(b []byte, v any) error { return yaml.Unmarshal(b, v) }, &rules)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	readInto(t, filepath.Join(chart, "dashboard.json"), json.Unmarshal, &dash)
	queries := map[string]string{} // what -> expression
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			queries["panel "+p.Title+" query "+string(rune('A'+i))] = tg.Expr
		}
	}
	if len(queries) < 20 {
		t.Fatalf("%d queries read, want the alerts and the dashboard's", len(queries))
	}
	metric := regexp.MustCompile(`\b(?:bucketbroker|process|go)_[a-z0-9_]+\b`)
	for what, expr := range queries {
		names := metric.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s queries no metric: %s", what, expr)
		}
		for _, n := range names {
			if !exported[n] && !exported[histogramBase(n)] {
				t.Errorf("%s queries %s, which the broker does not export", what, n)
			}
		}
	}
}

// histogramBase is the histogram a series name of it belongs to.
func histogramBase(series string) string {
	for _, s := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(series, s); ok {
			return base
		}
	}
	return series
}

func readInto(t *testing.T, path string, unmarshal func([]byte, any) error, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
