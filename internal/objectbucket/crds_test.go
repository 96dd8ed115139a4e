package objectbucket

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// The tests in this file are about the CRD set the suite runs on
// (BUCKETBROKER_TEST_CRDS); every other claim test runs on each set too.

// TestSchemaReadBack: on every CRD set, the controller's writes draw no
// warning from the API server, a bound claim's later passes write no
// status, and each field the installed schema prunes is said once (an
// Event naming the CRD and the field), however many claims and passes.
// NooBaa's set prunes spec.claimRef and the status fields but phase; the
// others prune nothing the controller writes.
func TestSchemaReadBack(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	counter := &requestCounter{}
	run := startController(t, runOptions{provisioner: newProvisioner(), wrap: func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	}})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)

	var claims []*obv1.ObjectBucketClaim
	for _, name := range []string{"first", "second"} {
		obc := newClaim(ns, name, class, nil)
		b := bind(ctx, t, obc)
		checkCredentials(ctx, t, b, "")
		claims = append(claims, obc)
	}
	_, _ = counter.take()

	// More passes over bound claims: pokes, then drift that the controller
	// repairs, so that the passes after the pokes are known to have run.
	for _, obc := range claims {
		for i := range 5 {
			patchAnnotation(ctx, t, obc, "test/poke", fmt.Sprint(i))
		}
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), cm); err != nil {
			t.Fatal(err)
		}
		deleteObj(ctx, t, cm)
		waitFor(ctx, t, "the ConfigMap recreated", func(ctx context.Context) (bool, string) {
			now := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), now); err != nil {
				return false, err.Error()
			}
			return now.UID != cm.UID && now.DeletionTimestamp.IsZero(), "the old one"
		})
	}
	_, by := counter.take()
	for _, k := range []string{"PATCH objectbucketclaims/status", "PATCH objectbuckets/status"} {
		if by[k] != 0 {
			t.Errorf("%d %s requests for bound claims (all requests: %v), want none: nothing in their status changed", by[k], k, by)
		}
	}
	if w := run.warnings.all(); len(w) != 0 {
		t.Errorf("the API server warned the controller %d times under %s's CRDs: %q", len(w), crdVariant, w)
	}

	want := []string(nil)
	if harness.PrunesClaimRef(crdVariant) {
		want = append(want, crdBuckets+" prunes spec.claimRef")
	}
	if harness.PrunesStatus(crdVariant) {
		want = append(want, crdClaims+" prunes status.conditions", crdClaims+" prunes status.observedGeneration",
			crdBuckets+" prunes status.observedGeneration")
	}
	var got []string
	waitFor(ctx, t, "the schema's Events", func(ctx context.Context) (bool, string) {
		got = schemaEvents(ctx, t, ns)
		return len(got) >= len(want), fmt.Sprint(got)
	})
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("SchemaPrunesField Events under %s's CRDs:\n got %q\nwant %q (each once)", crdVariant, got, want)
	}
}

// schemaEvents returns "<crd> prunes <field>" for each field each
// SchemaPrunesField Event in namespace ns names (series counted), sorted.
func schemaEvents(ctx context.Context, t *testing.T, ns string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason != "SchemaPrunesField" {
			continue
		}
		what, _, _ := strings.Cut(strings.TrimPrefix(e.Note, "CRD "), ":")
		crd, fields, _ := strings.Cut(what, " prunes ")
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		for range n {
			for f := range strings.SplitSeq(fields, " and ") {
				out = append(out, crd+" prunes "+f)
			}
		}
	}
	slices.Sort(out)
	return out
}
