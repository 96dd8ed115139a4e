package provisioner

import (
	"context"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

type nopDriver struct{ driver.Driver }

func TestNew(t *testing.T) {
	cases := map[string]struct {
		reason  string
		drv     driver.Driver
		opts    Options
		wantErr bool
	}{
		"Defaults":      {reason: "an empty Options is usable", drv: nopDriver{}},
		"NoDriver":      {reason: "nothing to provision with", wantErr: true},
		"InvalidPrefix": {reason: "backend names must stay valid", drv: nopDriver{}, opts: Options{NamePrefix: "Not_Valid"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.drv, tc.opts)
			if (err != nil) != tc.wantErr {
				t.Errorf("%s: New error = %v, want error %t", tc.reason, err, tc.wantErr)
			}
		})
	}
}

func TestManagerOptionsSelectLabelledObjects(t *testing.T) {
	o, err := ManagerOptions("example.com/bucket")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Cache.ByObject) != 2 {
		t.Fatalf("cache restricts %d kinds, want Secrets and ConfigMaps", len(o.Cache.ByObject))
	}
	for obj, by := range o.Cache.ByObject {
		if got := by.Label.String(); got != "bucket-provisioner=example.com-bucket" {
			t.Errorf("%T cache selector = %q", obj, got)
		}
	}
	if o.NewClient == nil {
		t.Errorf("NewClient unset: the manager's client keeps the caller's client-side limits, not ClientQPS/ClientBurst")
	}
	_ = context.Background()
}
