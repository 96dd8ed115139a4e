package objectbucket

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
)

// cacheOf is a cache as the reconciler reads it: objects by key, at the
// resourceVersion the cache has seen.
type cacheOf map[client.ObjectKey]client.Object

func (c cacheOf) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	o, ok := c[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	obj.SetName(o.GetName())
	obj.SetNamespace(o.GetNamespace())
	obj.SetResourceVersion(o.GetResourceVersion())
	return nil
}

func (c cacheOf) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

func TestWriteSetBehind(t *testing.T) {
	ctx := context.Background()
	claim := &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "u1", ResourceVersion: "10"}}
	ob := &obv1.ObjectBucket{ObjectMeta: metav1.ObjectMeta{Name: NameForClaim("u1"), ResourceVersion: "11"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", ResourceVersion: "12"}}
	at := func(o client.Object, rv string) client.Object {
		o = o.DeepCopyObject().(client.Object)
		o.SetResourceVersion(rv)
		return o
	}

	var w writeSet
	w.changed(claim.UID, claim, "10") // the claim patched from 10 (to 13)
	w.created(claim.UID, sec)         // the Secret created (at 12)
	w.changed(claim.UID, ob, "11")    // the ObjectBucket's status patched from 11 (to 14)
	w.changed("other", claim, "10")   // another claim's writes do not count
	cases := []struct {
		name   string
		claim  client.Object
		cache  cacheOf
		behind bool
	}{
		{"claim at the version written over", at(claim, "10"), cacheOf{}, true},
		{"Secret not in the cache yet", at(claim, "13"), cacheOf{client.ObjectKeyFromObject(ob): at(ob, "14")}, true},
		{"ObjectBucket at the version written over", at(claim, "13"), cacheOf{
			client.ObjectKeyFromObject(ob): at(ob, "11"), client.ObjectKeyFromObject(sec): at(sec, "12")}, true},
		{"caught up", at(claim, "13"), cacheOf{
			client.ObjectKeyFromObject(ob): at(ob, "14"), client.ObjectKeyFromObject(sec): at(sec, "12")}, false},
	}
	for _, tc := range cases {
		behind, wait, err := w.behind(ctx, tc.cache, tc.claim)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if behind != tc.behind || (behind && (wait <= 0 || wait > writesTTL)) {
			t.Errorf("%s: behind = %v (wait %s), want %v", tc.name, behind, wait, tc.behind)
		}
	}
	// Caught up once, the claim's entry is gone: the stale cache of before
	// no longer holds a pass back, and later writes start a new entry.
	if behind, _, _ := w.behind(ctx, cacheOf{}, at(claim, "10")); behind {
		t.Error("an entry the cache caught up with still holds passes back")
	}
	if behind, _, _ := w.behind(ctx, cacheOf{}, &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "other", ResourceVersion: "10"}}); !behind {
		t.Error("another claim's entry was dropped with this one")
	}
}
