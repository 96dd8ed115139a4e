package audit

// SetPageSize sets how many records the audit reads at once, until the
// test ends.
func SetPageSize(t interface{ Cleanup(func()) }, n int) {
	old := pageSize
	pageSize = n
	t.Cleanup(func() { pageSize = old })
}
