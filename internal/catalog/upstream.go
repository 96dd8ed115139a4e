package catalog

import (
	"encoding/json"
	"fmt"
)

// Source is an upstream broker's part of the catalog: the service objects
// its catalog served (with only the plans bucketbroker serves), under the
// upstream's name.
type Source struct {
	// Upstream names the upstream broker.
	Upstream string
	// Services are its service objects, as it served them.
	Services []json.RawMessage
}

// Merge returns a catalog of base's services (nil: none) and every
// source's. An upstream's services are served as the upstream served them
// (ids kept, fields bucketbroker does not know included) and carry no
// bucketbroker plan configuration. Two services or plans with the same id
// are an error that names both sides.
func Merge(base *Catalog, sources ...Source) (*Catalog, error) {
	c := &Catalog{}
	origin := map[string]string{} // service or plan id -> "service X of Y"
	claim := func(id, what string) error {
		if prev, dup := origin[id]; dup {
			return fmt.Errorf("id %q is both %s and %s: an id may appear once in the catalog", id, prev, what)
		}
		origin[id] = what
		return nil
	}
	add := func(s *Service, from string) error {
		if err := claim(s.ID, fmt.Sprintf("service %q of %s", s.Name, from)); err != nil {
			return err
		}
		for _, p := range s.Plans {
			if err := claim(p.ID, fmt.Sprintf("plan %q of service %q of %s", p.Name, s.Name, from)); err != nil {
				return err
			}
		}
		c.Services = append(c.Services, s)
		return nil
	}
	if base != nil {
		for _, s := range base.Services {
			if err := add(s, "the bucket catalog"); err != nil {
				return nil, err
			}
		}
	}
	for _, src := range sources {
		from := fmt.Sprintf("upstream %q", src.Upstream)
		for _, raw := range src.Services {
			s, err := decodeUpstreamService(src.Upstream, from, raw)
			if err != nil {
				return nil, err
			}
			if err := add(s, from); err != nil {
				return nil, err
			}
		}
	}
	if err := c.index(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeUpstreamService decodes one service object an upstream served, keeping
// its raw form to serve as it came.
func decodeUpstreamService(upstream, from string, raw json.RawMessage) (*Service, error) {
	var s Service
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("a service of %s: %w", from, err)
	}
	for _, p := range s.Plans {
		if p.Config != nil {
			return nil, fmt.Errorf("plan %q of service %q of %s carries a %q object, which only the bucket catalog may", p.Name, s.Name, from, "bucketbroker")
		}
	}
	s.Upstream, s.raw = upstream, append(json.RawMessage(nil), raw...)
	return &s, nil
}
