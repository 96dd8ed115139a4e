package catalog

import (
	"strings"
	"testing"
)

// quotaCatalog is a catalog with one plan whose bucketbroker config is
// config (YAML, indented for the plan).
func quotaCatalog(config string) string {
	return `services:
  - id: s
    name: svc
    description: d
    bindable: true
    plans:
      - id: p
        name: small
        description: d
        bucketbroker:
` + config
}

func TestQuotaLimits(t *testing.T) {
	for _, tc := range []struct {
		config          string
		size, objects   int64
		servedMustLackQ bool
	}{
		{"          quota: {maxSize: 10Gi, maxObjects: 100000}\n", 10 << 30, 100000, true},
		{"          quota: {maxSize: 500M}\n", 500_000_000, 0, true},
		{"          quota: {maxSize: 1048576}\n", 1 << 20, 0, true},
		{"          quota: {maxObjects: 7}\n", 0, 7, true},
		{"          access: [read-write]\n", 0, 0, false},
	} {
		c, err := Parse([]byte(quotaCatalog(tc.config)))
		if err != nil {
			t.Fatalf("%q: %v", tc.config, err)
		}
		p, err := c.Lookup("s", "p")
		if err != nil {
			t.Fatal(err)
		}
		size, objects := p.Settings().Limits()
		if size != tc.size || objects != tc.objects {
			t.Errorf("%q: Limits() = %d, %d; want %d, %d", tc.config, size, objects, tc.size, tc.objects)
		}
		js, err := c.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(js), "quota") || strings.Contains(string(js), "maxSize") {
			t.Errorf("%q: served catalog shows bucketbroker's quota config: %s", tc.config, js)
		}
	}
}

func TestQuotaRejects(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{"          quota: {}\n", "set maxSize, maxObjects or both"},
		{"          quota: {maxSize: 0}\n", `maxSize: "0" is not a positive whole number of bytes`},
		{"          quota: {maxSize: -1Gi}\n", "not a positive whole number of bytes"},
		{"          quota: {maxSize: 100m}\n", "not a positive whole number of bytes"},
		{"          quota: {maxSize: ten gigs}\n", "maxSize"},
		{"          quota: {maxObjects: 0}\n", "maxObjects 0 is not a positive number"},
		{"          quota: {maxObjects: many}\n", "quota.maxObjects of type int64"},
		{"          quota: {maxFiles: 3}\n", "maxFiles"},
	} {
		_, err := Parse([]byte(quotaCatalog(tc.config)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: Parse error %v, want one containing %q", tc.config, err, tc.want)
		}
	}
}
