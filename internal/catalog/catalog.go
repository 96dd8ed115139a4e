package catalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

//go:embed default.yaml
var defaultCatalog []byte

// ErrUnknown is returned by Lookup for a service or plan id the catalog does
// not offer.
var ErrUnknown = errors.New("not in the catalog")

// PlanConfig is bucketbroker's own configuration of a plan.
type PlanConfig struct {
	// Access lists the access modes bindings may ask for; the first is the
	// default. Empty means read-write only.
	Access []Access `json:"access,omitempty"`
	// AsyncRequired makes provision, update and deprovision answer only
	// asynchronously (422 AsyncRequired without accepts_incomplete=true).
	AsyncRequired bool `json:"asyncRequired,omitempty"`
	// PurgeOnDelete is the default of the purge_on_delete parameter.
	PurgeOnDelete bool `json:"purgeOnDelete,omitempty"`
	// Versioning makes the bucket keep every version of its objects. It
	// cannot be turned off again (S3 can only suspend it), so an instance
	// may not change from a plan with versioning to one without.
	Versioning bool `json:"versioning,omitempty"`
	// Quota limits each bucket of the plan. It is applied at provision
	// and at every update (so a plan change changes the limit), and only
	// on a driver that enforces it: bucketbroker refuses to start with a
	// plan whose quota its driver cannot enforce.
	Quota *Quota `json:"quota,omitempty"`
}

// Quota is a plan's limits on each bucket; an absent field sets no limit.
type Quota struct {
	// MaxSize is the most bytes a bucket's objects may hold together: a
	// Kubernetes quantity ("10Gi", "500M") or a number of bytes.
	MaxSize json.RawMessage `json:"maxSize,omitempty"`
	// MaxObjects is the most objects a bucket may hold.
	MaxObjects *int64 `json:"maxObjects,omitempty"`

	maxSize int64 // MaxSize in bytes, once checked
}

// Limits returns the plan's limits in bytes and objects, 0 for none.
func (c PlanConfig) Limits() (maxSize, maxObjects int64) {
	if c.Quota == nil {
		return 0, 0
	}
	if c.Quota.MaxObjects != nil {
		maxObjects = *c.Quota.MaxObjects
	}
	return c.Quota.maxSize, maxObjects
}

// check reads the limits, and refuses one that is not a positive whole
// number.
func (q *Quota) check() error {
	if q == nil {
		return nil
	}
	if q.MaxSize == nil && q.MaxObjects == nil {
		return errors.New("quota: set maxSize, maxObjects or both (leave quota out for no limit)")
	}
	if q.MaxSize != nil {
		n, err := ParseSize(strings.Trim(string(q.MaxSize), `"`))
		if err != nil {
			return fmt.Errorf("quota: maxSize: %w", err)
		}
		q.maxSize = n
	}
	if n := q.MaxObjects; n != nil && *n <= 0 {
		return fmt.Errorf("quota: maxObjects %d is not a positive number", *n)
	}
	return nil
}

// ParseSize reads a size limit in bytes: a Kubernetes quantity ("10Gi",
// "500M", "1048576") that is a positive whole number of bytes.
func ParseSize(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 || q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%q is not a positive whole number of bytes (such as 10Gi, 500M or 1048576)", s)
	}
	return q.Value(), nil
}

// Access is an access mode of a bucket binding: the driver's access modes
// (pkg/driver's Access), spelled the same.
type Access string

// Valid reports whether a is one of the three access modes.
func (a Access) Valid() bool {
	switch a {
	case "read-write", "read-only", "write-only":
		return true
	}
	return false
}

// AllowsAccess reports whether bindings under this plan may have access a.
func (c PlanConfig) AllowsAccess(a Access) bool {
	for _, x := range c.access() {
		if x == a {
			return true
		}
	}
	return false
}

// DefaultAccess is the access of a binding that does not ask for one.
func (c PlanConfig) DefaultAccess() Access { return c.access()[0] }

func (c PlanConfig) access() []Access {
	if len(c.Access) == 0 {
		return []Access{"read-write"}
	}
	return c.Access
}

// Schemas are a plan's JSON Schemas, as OSB spells them.
type Schemas struct {
	ServiceInstance *InstanceSchemas `json:"service_instance,omitempty"`
	ServiceBinding  *BindingSchemas  `json:"service_binding,omitempty"`
}

// InstanceSchemas are the schemas of instance parameters.
type InstanceSchemas struct {
	Create *InputSchema `json:"create,omitempty"`
	Update *InputSchema `json:"update,omitempty"`
}

// BindingSchemas are the schemas of binding parameters.
type BindingSchemas struct {
	Create *InputSchema `json:"create,omitempty"`
}

// InputSchema holds one JSON Schema for parameters.
type InputSchema struct {
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Plan is one OSB plan.
type Plan struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Free        *bool           `json:"free,omitempty"`
	Bindable    *bool           `json:"bindable,omitempty"`
	// BindingRotatable lets a bind name a predecessor_binding_id (OSB
	// v2.17 binding rotation).
	BindingRotatable *bool            `json:"binding_rotatable,omitempty"`
	PlanUpdateable   *bool            `json:"plan_updateable,omitempty"`
	MaintenanceInfo  *MaintenanceInfo `json:"maintenance_info,omitempty"`
	Schemas          *Schemas         `json:"schemas,omitempty"`
	Config           *PlanConfig      `json:"bucketbroker,omitempty"`

	service *Service
	create  *jsonschema.Schema
	update  *jsonschema.Schema
	bind    *jsonschema.Schema
}

// MaintenanceInfo is a plan's OSB maintenance_info: the version of what an
// instance of the plan gets (a semantic version), and what it is. An
// instance provisioned or upgraded under one version keeps it until an
// update asks for the plan's current one.
type MaintenanceInfo struct {
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
}

// semver is Semantic Versioning 2.0.0's own regular expression.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Maintenance returns the plan's maintenance_info; a zero value (empty
// version) when the plan has none.
func (p *Plan) Maintenance() MaintenanceInfo {
	if p.MaintenanceInfo == nil {
		return MaintenanceInfo{}
	}
	return *p.MaintenanceInfo
}

// Rotatable reports whether the plan's bindings may be rotated.
func (p *Plan) Rotatable() bool { return p.BindingRotatable != nil && *p.BindingRotatable }

// Settings returns the plan's bucketbroker configuration.
func (p *Plan) Settings() PlanConfig {
	if p.Config == nil {
		return PlanConfig{}
	}
	return *p.Config
}

// Service returns the service the plan belongs to.
func (p *Plan) Service() *Service { return p.service }

// Updateable reports whether instances may change to or from this plan.
func (p *Plan) Updateable() bool {
	if p.PlanUpdateable != nil {
		return *p.PlanUpdateable
	}
	return p.service.PlanUpdateable
}

// Service is one OSB service offering.
type Service struct {
	ID                   string          `json:"id"`
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	Bindable             bool            `json:"bindable"`
	InstancesRetrievable bool            `json:"instances_retrievable,omitempty"`
	BindingsRetrievable  bool            `json:"bindings_retrievable,omitempty"`
	AllowContextUpdates  bool            `json:"allow_context_updates,omitempty"`
	PlanUpdateable       bool            `json:"plan_updateable,omitempty"`
	Tags                 []string        `json:"tags,omitempty"`
	Requires             []string        `json:"requires,omitempty"`
	Metadata             json.RawMessage `json:"metadata,omitempty"`
	DashboardClient      json.RawMessage `json:"dashboard_client,omitempty"`
	Plans                []*Plan         `json:"plans"`

	// Upstream names the upstream broker that serves the service (see
	// Merge); empty for bucketbroker's own.
	Upstream string `json:"-"`
	// raw is an upstream's service object, served as it is.
	raw json.RawMessage
}

// Catalog is the set of services bucketbroker offers.
type Catalog struct {
	Services []*Service `json:"services"`

	plans map[planKey]*Plan
}

// Default returns the built-in catalog.
func Default() *Catalog {
	c, err := Parse(defaultCatalog)
	if err != nil {
		panic(fmt.Sprintf("built-in catalog: %v", err))
	}
	return c
}

// Load reads a catalog file (YAML or JSON).
func Load(path string) (*Catalog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return c, nil
}

// Parse parses and checks a catalog document (YAML or JSON).
func Parse(doc []byte) (*Catalog, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	c := &Catalog{}
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := c.index(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Catalog) index() error {
	if len(c.Services) == 0 {
		return errors.New("no services")
	}
	c.plans = map[planKey]*Plan{}
	ids := map[string]bool{}
	for _, s := range c.Services {
		if s.ID == "" || s.Name == "" || s.Description == "" {
			return fmt.Errorf("service %q: id, name and description are required", s.Name)
		}
		if ids[s.ID] {
			return fmt.Errorf("service %q: duplicate id %q", s.Name, s.ID)
		}
		ids[s.ID] = true
		if len(s.Plans) == 0 {
			return fmt.Errorf("service %q: no plans", s.Name)
		}
		for _, p := range s.Plans {
			if p.ID == "" || p.Name == "" || p.Description == "" {
				return fmt.Errorf("service %q plan %q: id, name and description are required", s.Name, p.Name)
			}
			if ids[p.ID] {
				return fmt.Errorf("service %q plan %q: duplicate id %q", s.Name, p.Name, p.ID)
			}
			ids[p.ID] = true
			p.service = s
			if err := p.check(); err != nil {
				return err
			}
			c.plans[planKey{s.ID, p.ID}] = p
		}
	}
	return nil
}

// check checks a plan's own fields (access modes, maintenance_info) and
// compiles its parameter schemas.
func (p *Plan) check() error {
	for _, a := range p.Settings().Access {
		if !a.Valid() {
			return fmt.Errorf("plan %q: unknown access mode %q (want read-write, read-only or write-only)", p.Name, a)
		}
	}
	if err := p.Settings().Quota.check(); err != nil {
		return fmt.Errorf("plan %q: %w", p.Name, err)
	}
	if mi := p.MaintenanceInfo; mi != nil && !semver.MatchString(mi.Version) {
		return fmt.Errorf("plan %q: maintenance_info.version %q is not a semantic version (such as 1.2.0)", p.Name, mi.Version)
	}
	if err := p.compile(); err != nil {
		return fmt.Errorf("plan %q: %w", p.Name, err)
	}
	return nil
}

func (p *Plan) compile() error {
	if p.Schemas == nil {
		return nil
	}
	var err error
	if si := p.Schemas.ServiceInstance; si != nil {
		if p.create, err = compile(p.ID+"/instance/create", si.Create); err != nil {
			return err
		}
		if p.update, err = compile(p.ID+"/instance/update", si.Update); err != nil {
			return err
		}
	}
	if sb := p.Schemas.ServiceBinding; sb != nil {
		if p.bind, err = compile(p.ID+"/binding/create", sb.Create); err != nil {
			return err
		}
	}
	return nil
}

func compile(name string, in *InputSchema) (*jsonschema.Schema, error) {
	if in == nil || len(in.Parameters) == 0 {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(in.Parameters))
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	url := "mem://" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	return s, nil
}

// Warnings lists what a catalog leaves open that it should not: a plan
// without a schema for the parameters of provision, update or (when
// bindable) bind accepts any JSON object there, within the broker's own
// limits of size and nesting. The built-in catalog has none; bucketbroker
// serve logs them for a catalog of the operator's.
func (c *Catalog) Warnings() []string {
	var out []string
	for _, s := range c.Services {
		if s.Upstream != "" {
			continue // the upstream checks its own parameters
		}
		for _, p := range s.Plans {
			var missing []string
			if p.create == nil {
				missing = append(missing, "provision")
			}
			if p.update == nil {
				missing = append(missing, "update")
			}
			if p.bindable() && p.bind == nil {
				missing = append(missing, "bind")
			}
			if len(missing) > 0 {
				out = append(out, fmt.Sprintf("plan %q of service %q has no parameters schema for %s: any JSON object is accepted there",
					p.Name, s.Name, strings.Join(missing, ", ")))
			}
		}
	}
	return out
}

func (p *Plan) bindable() bool {
	if p.Bindable != nil {
		return *p.Bindable
	}
	return p.service.Bindable
}

// planKey is a plan's key in Catalog.plans: a struct rather than the ids
// joined, which would cost a string per Lookup (every request) and make
// service "a/b" with plan "c" the same key as service "a" with plan "b/c".
type planKey struct{ serviceID, planID string }

// Lookup returns the plan with the given ids, or an error wrapping
// ErrUnknown that says which id is unknown.
func (c *Catalog) Lookup(serviceID, planID string) (*Plan, error) {
	if p, ok := c.plans[planKey{serviceID, planID}]; ok {
		return p, nil
	}
	for _, s := range c.Services {
		if s.ID == serviceID {
			return nil, fmt.Errorf("plan_id %q is not a plan of service %q: %w", planID, s.Name, ErrUnknown)
		}
	}
	return nil, fmt.Errorf("service_id %q: %w", serviceID, ErrUnknown)
}

// JSON returns the catalog as served on GET /v2/catalog: bucketbroker's own
// plan configuration is left out.
func (c *Catalog) JSON() (json.RawMessage, error) {
	type served Catalog
	out := served{Services: make([]*Service, len(c.Services))}
	var raws []json.RawMessage
	for i, s := range c.Services {
		if s.raw != nil {
			raws = append(raws, s.raw)
			continue
		}
		sc := *s
		sc.Plans = make([]*Plan, len(s.Plans))
		for j, p := range s.Plans {
			pc := *p
			pc.Config = nil
			sc.Plans[j] = &pc
		}
		out.Services[i] = &sc
	}
	if raws == nil {
		return json.Marshal(out)
	}
	var all []json.RawMessage
	for _, s := range out.Services {
		if s == nil {
			continue
		}
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		all = append(all, b)
	}
	return json.Marshal(map[string][]json.RawMessage{"services": append(all, raws...)})
}

// Which parameters a validation is for.
const (
	ForCreate = "create"
	ForUpdate = "update"
	ForBind   = "bind"
)

// Validate checks parameters (a JSON object, or empty) against the plan's
// schema for the given purpose. The error lists every violation.
func (p *Plan) Validate(purpose string, params json.RawMessage) error {
	var s *jsonschema.Schema
	switch purpose {
	case ForCreate:
		s = p.create
	case ForUpdate:
		s = p.update
	case ForBind:
		s = p.bind
	}
	if s == nil || len(params) == 0 {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("parameters do not match the schema of plan %q: %s", p.Name, flatten(ve))
		}
		return fmt.Errorf("parameters: %w", err)
	}
	return nil
}

var englishPrinter = message.NewPrinter(language.English)

// flatten turns a validation error tree into one line: "at /labels: ...; ...".
func flatten(ve *jsonschema.ValidationError) string {
	var msgs []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			msgs = append(msgs, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(englishPrinter)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(msgs, "; ")
}

// HasService reports whether the catalog offers the service with that id.
func (c *Catalog) HasService(id string) bool {
	for _, s := range c.Services {
		if s.ID == id {
			return true
		}
	}
	return false
}
