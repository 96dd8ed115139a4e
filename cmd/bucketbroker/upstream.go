package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
)

// upstreamFlags are serve's upstream-mode flags.
type upstreamFlags struct {
	flags          []string
	configFile     string
	bucketService  bool
	catalogTimeout time.Duration
	pollInterval   time.Duration
}

func (o *upstreamFlags) bind(f *pflag.FlagSet) {
	f.StringArrayVar(&o.flags, "upstream", nil, "serve the services of the OSB broker at URL too, as upstream NAME (NAME=URL; repeatable); its basic auth comes from BUCKETBROKER_UPSTREAM_<NAME>_USERNAME and _PASSWORD")
	f.StringVar(&o.configFile, "upstream-config", "", "YAML or JSON file of upstream brokers (name, url, username, passwordFile or passwordEnv, tls, services and plans filters); see docs/upstream.md")
	f.BoolVar(&o.bucketService, "bucket-service", true, "serve the bucket service; =false serves only the upstreams' services and starts no storage backend")
	f.DurationVar(&o.catalogTimeout, "upstream-catalog-timeout", 60*time.Second, "how long start-up tries to fetch each upstream's catalog before it gives up (exit 1)")
	f.DurationVar(&o.pollInterval, "upstream-poll-interval", time.Second, "pause between two polls of an upstream's asynchronous operation")
}

// apply puts the flags into cfg, refusing what cannot work.
func (o *upstreamFlags) apply(cfg *broker.Config) error {
	var ups []upstream.Config
	if o.configFile != "" {
		fromFile, err := upstream.LoadFile(o.configFile)
		if err != nil {
			return err
		}
		ups = append(ups, fromFile...)
	}
	for _, v := range o.flags {
		u, err := upstream.ParseFlag(v)
		if err != nil {
			return err
		}
		ups = append(ups, u)
	}
	seen := map[string]bool{}
	for i := range ups {
		if seen[ups[i].Name] {
			return fmt.Errorf("two upstreams are named %q", ups[i].Name)
		}
		seen[ups[i].Name] = true
		ups[i].PollInterval = o.pollInterval
	}
	if !o.bucketService && len(ups) == 0 {
		return fmt.Errorf("--bucket-service=false needs at least one --upstream or an --upstream-config")
	}
	if o.pollInterval <= 0 || o.catalogTimeout <= 0 {
		return fmt.Errorf("--upstream-poll-interval %s and --upstream-catalog-timeout %s: want positive durations", o.pollInterval, o.catalogTimeout)
	}
	cfg.Upstreams, cfg.NoBucketService, cfg.UpstreamCatalogTimeout = ups, !o.bucketService, o.catalogTimeout
	return nil
}
