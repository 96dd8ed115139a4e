package upstream

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

func TestMetricsAndReadinessPerUpstream(t *testing.T) {
	ib := harness.StartIllBroker(t, illBinary)
	b := front(t, ib)
	want(t, b.Do("PUT", "/v2/service_instances/i-m", illBody(illbroker.PlanSync)), http.StatusCreated)
	want(t, b.Do("GET", "/readyz", nil), http.StatusOK)

	req, _ := http.NewRequest("GET", b.URL()+"/metrics", nil)
	req.SetBasicAuth(harness.User, harness.Pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`bucketbroker_upstream_requests_total{code="201",method="PUT",route="instance",upstream="ill"} 1`,
		`bucketbroker_upstream_requests_total{code="200",method="GET",route="catalog",upstream="ill"}`,
		`bucketbroker_upstream_request_duration_seconds_count{method="PUT",route="instance",upstream="ill"} 1`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("metrics lack %s", line)
		}
	}
	if strings.Contains(string(body), harness.IllPass) {
		t.Error("the upstream's password is in the metrics")
	}

	ib.Stop()
	r := want(t, b.Do("GET", "/readyz", nil), http.StatusServiceUnavailable)
	if r.Body["failed"] != "upstream ill" {
		t.Fatalf("/readyz with the upstream down: %v, want it named", r.Body)
	}
	if strings.Contains(b.Log(), harness.IllPass) {
		t.Error("the upstream's password is in the broker's log")
	}
}
