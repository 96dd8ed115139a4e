package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/upstream"
)

// upstreamSources are the flags that name the upstream brokers and whether
// the bucket service is there too. They are declared here, once, for
// every command that reaches the upstreams (serve, admin audit), as the
// storage flags are in flags.go.
type upstreamSources struct {
	flags         []string
	configFile    string
	bucketService bool
}

func (o *upstreamSources) bind(f *pflag.FlagSet) {
	f.StringArrayVar(&o.flags, "upstream", nil, "serve the services of the OSB broker at URL too, as upstream NAME (NAME=URL; repeatable); its basic auth comes from BUCKETBROKER_UPSTREAM_<NAME>_USERNAME and _PASSWORD")
	f.StringVar(&o.configFile, "upstream-config", "", "YAML or JSON file of upstream brokers (name, url, username, passwordFile or passwordEnv, tls, services and plans filters); see docs/upstream.md")
	f.BoolVar(&o.bucketService, "bucket-service", true, "the bucket service and its storage backend; =false serves (admin audit: audits) only the upstreams' services and starts no storage backend")
}

// configs reads the upstreams from the file and the flags, refusing two of
// one name and --bucket-service=false without any.
func (o *upstreamSources) configs() ([]upstream.Config, error) {
	var ups []upstream.Config
	if o.configFile != "" {
		fromFile, err := upstream.LoadFile(o.configFile)
		if err != nil {
			return nil, err
		}
		ups = append(ups, fromFile...)
	}
	for _, v := range o.flags {
		u, err := upstream.ParseFlag(v)
		if err != nil {
			return nil, err
		}
		ups = append(ups, u)
	}
	seen := map[string]bool{}
	for _, u := range ups {
		if seen[u.Name] {
			return nil, fmt.Errorf("two upstreams are named %q", u.Name)
		}
		seen[u.Name] = true
	}
	if !o.bucketService && len(ups) == 0 {
		return nil, fmt.Errorf("--bucket-service=false needs at least one --upstream or an --upstream-config")
	}
	return ups, nil
}

// upstreamFlags are serve's upstream-mode flags.
type upstreamFlags struct {
	upstreamSources
	catalogTimeout time.Duration
	pollInterval   time.Duration
}

func (o *upstreamFlags) bind(f *pflag.FlagSet) {
	o.upstreamSources.bind(f)
	f.DurationVar(&o.catalogTimeout, "upstream-catalog-timeout", 60*time.Second, "how long start-up tries to fetch each upstream's catalog before it gives up (exit 1)")
	f.DurationVar(&o.pollInterval, "upstream-poll-interval", time.Second, "pause between two polls of an upstream's asynchronous operation")
}

// apply puts the flags into cfg, refusing what cannot work.
func (o *upstreamFlags) apply(cfg *broker.Config) error {
	ups, err := o.configs()
	if err != nil {
		return err
	}
	for i := range ups {
		ups[i].PollInterval = o.pollInterval
	}
	if o.pollInterval <= 0 || o.catalogTimeout <= 0 {
		return fmt.Errorf("--upstream-poll-interval %s and --upstream-catalog-timeout %s: want positive durations", o.pollInterval, o.catalogTimeout)
	}
	cfg.Upstreams, cfg.NoBucketService, cfg.UpstreamCatalogTimeout = ups, !o.bucketService, o.catalogTimeout
	return nil
}

// auditUpstreams connects to each upstream the flags name and fetches its
// catalog once (admin audit reads instances_retrievable and
// bindings_retrievable from it).
func (o *upstreamSources) auditUpstreams(ctx context.Context) ([]audit.Upstream, error) {
	cfgs, err := o.configs()
	if err != nil {
		return nil, err
	}
	var ups []audit.Upstream
	for _, c := range cfgs {
		u, err := upstream.New(c)
		if err != nil {
			return nil, err
		}
		if err := u.FetchCatalog(ctx); err != nil {
			return nil, err
		}
		ups = append(ups, u)
	}
	return ups, nil
}
