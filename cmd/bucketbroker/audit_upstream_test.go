package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
	"github.com/bucketbroker/bucketbroker/test/harness"
	"github.com/bucketbroker/bucketbroker/test/illbroker"
)

// TestAdminAuditOfAnUpstream runs `admin audit --bucket-service=false
// --upstream` on the data dir of a stopped serve in front of the ill
// broker (a process): a binding deleted upstream behind bucketbroker's
// back is reported missing, --fix leaves it, and no storage backend is
// started.
func TestAdminAuditOfAnUpstream(t *testing.T) {
	bin, err := harness.BuildIllBroker(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ib := harness.StartIllBroker(t, bin)
	ctx := context.Background()
	dir := t.TempDir()
	b, err := broker.Start(ctx, broker.Config{Listen: "127.0.0.1:0", NoBucketService: true, Config: storage.Config{DataDir: dir},
		Upstreams: []upstream.Config{{Name: "ill", Client: osbclient.Config{URL: ib.URL(), Username: harness.IllUser, Password: harness.IllPass}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine().Provision(ctx, engine.ProvisionRequest{InstanceID: "i1", ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	for _, id := range []string{"b1", "b2"} {
		if _, err := b.Engine().Bind(ctx, engine.BindRequest{InstanceID: "i1", BindingID: id, ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
			t.Fatalf("bind: %v", err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	direct, err := osbclient.New(osbclient.Config{URL: ib.URL(), Username: harness.IllUser, Password: harness.IllPass})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Unbind(ctx, "i1", "b2", osbclient.DeleteRequest{ServiceID: illbroker.ServiceID, PlanID: illbroker.PlanSync}); err != nil {
		t.Fatal(err)
	}

	t.Setenv("BUCKETBROKER_UPSTREAM_ILL_USERNAME", harness.IllUser)
	t.Setenv("BUCKETBROKER_UPSTREAM_ILL_PASSWORD", harness.IllPass)
	// No --s3-listen: an embedded server started by mistake would need
	// the data dir's s3 folder, which this serve never made.
	args := []string{"admin", "audit", "--data-dir", dir, "--bucket-service=false", "--upstream", "ill=" + ib.URL(), "--output", "json"}
	before := ib.State()
	for _, extra := range [][]string{nil, {"--fix", "--yes"}} {
		out, stderr, drift, err := runAuditCmd(t, "", append(args, extra...)...)
		if err != nil || !drift {
			t.Fatalf("audit %v: drift %v, %v\n%s", extra, drift, err, stderr)
		}
		var rep audit.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("audit %v output: %v\n%s", extra, err, out)
		}
		type row struct{ Kind, Resource, Record string }
		var got []row
		for _, f := range rep.Findings {
			if f.Fixed {
				t.Errorf("audit %v fixed %+v", extra, f)
			}
			got = append(got, row{string(f.Kind), f.Resource, f.Record})
		}
		if diff := cmp.Diff([]row{{"missing", audit.ResourceUpstreamBinding, "binding/b2"}}, got); diff != "" {
			t.Errorf("audit %v findings (-want +got):\n%s", extra, diff)
		}
	}
	if diff := cmp.Diff(before, ib.State()); diff != "" {
		t.Errorf("the upstream changed during the audits (-before +after):\n%s", diff)
	}
	// Without the upstream flags the records are not judged, saying why.
	out, _, drift, err := runAuditCmd(t, "", "admin", "audit", "--data-dir", dir, "--bucket-service=false")
	if err == nil || drift {
		t.Fatalf("audit with --bucket-service=false and no upstream: drift %v, %v\n%s", drift, err, out)
	}
}
