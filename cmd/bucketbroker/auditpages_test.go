package main

import (
	"context"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// pagesOnly is an audit driver that hands its inventory out in two
// pages and refuses to give it whole.
type pagesOnly struct {
	audit.Driver // nil: only the inventory is called
	t            *testing.T
}

func (d pagesOnly) Inventory(context.Context, string) (driver.Inventory, error) {
	d.t.Error("Inventory: the audit's driver was asked for the whole inventory, want its pages")
	return driver.Inventory{}, nil
}

func (pagesOnly) InventoryPages(_ context.Context, _ string, page func(driver.Inventory) error) error {
	for _, name := range []string{"bb-a", "bb-b"} {
		if err := page(driver.Inventory{Buckets: []driver.OwnedBucket{{Name: name}}}); err != nil {
			return err
		}
	}
	return nil
}

// TestAuditBackendPassesPagesOn: the driver admin audit wraps with its
// backend still hands the audit its inventory a page at a time (the
// embedded interface alone would hide InventoryPages, and the audit
// would take the inventory whole).
func TestAuditBackendPassesPagesOn(t *testing.T) {
	pages := 0
	err := driver.InventoryPages(t.Context(), auditBackend{Driver: pagesOnly{t: t}}, "bb-", func(driver.Inventory) error {
		pages++
		return nil
	})
	if err != nil || pages != 2 {
		t.Errorf("InventoryPages through auditBackend: %d pages, %v; want 2, nil", pages, err)
	}
}
