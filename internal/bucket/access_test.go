package bucket

import (
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestCatalogAccessIsTheDrivers: a plan's access modes (catalog.Access)
// are the driver's, spelled the same, since the backend converts one to
// the other.
func TestCatalogAccessIsTheDrivers(t *testing.T) {
	for _, a := range []string{"read-write", "read-only", "write-only", "admin", "", "Read-Write"} {
		if got, want := catalog.Access(a).Valid(), driver.Access(a).Valid(); got != want {
			t.Errorf("access %q: the catalog says valid %v, the driver %v", a, got, want)
		}
	}
	if got := catalog.Default(); got == nil {
		t.Fatal("no default catalog")
	}
	if d := (catalog.PlanConfig{}).DefaultAccess(); driver.Access(d) != driver.AccessReadWrite {
		t.Errorf("default access %q, want the driver's %q", d, driver.AccessReadWrite)
	}
}
