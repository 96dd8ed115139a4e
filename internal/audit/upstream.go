package audit

import (
	"context"
	"fmt"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Upstream is an upstream OSB broker whose records the audit compares
// with what its GET answers (internal/upstream.Upstream).
type Upstream interface {
	// Name names the upstream, as Record.Backend does.
	Name() string
	// Observe asks the upstream for the record's instance or binding.
	Observe(ctx context.Context, rec *engine.Record) (Observation, error)
}

// Observation is what an upstream's GET says of a record.
type Observation struct {
	// Retrievable: the upstream's catalog offers GET for the record's
	// kind and service (instances_retrievable, bindings_retrievable). The
	// other fields are set only then.
	Retrievable bool
	// Found: the GET answered 200 (not 404 or 410).
	Found bool
	// ServiceID and PlanID are an instance's, as the GET answered them
	// (empty when it did not say).
	ServiceID, PlanID string
}

// Kind of an upstream finding, beside KindMissing.
const (
	// KindDiffers: the upstream's instance is not of the record's service
	// or plan.
	KindDiffers Kind = "differs"
)

// Resource types of upstream findings.
const (
	ResourceUpstreamInstance = "upstream-instance"
	ResourceUpstreamBinding  = "upstream-binding"
)

// upstreamNotFixed is the Action of every upstream finding: the audit only
// reports them (see the package documentation).
const upstreamNotFixed = "not fixed (report only): "

// upstream compares a ready upstream record with its upstream's GET.
func (j *judge) upstream(ctx context.Context, r *engine.Record) {
	if r.Phase == engine.PhaseDeleted {
		return
	}
	if !r.Op.Finished() {
		j.skip(r, fmt.Sprintf("%s in progress (operation %s): not compared with upstream %q; audit again when it has finished", r.Op.Type, r.Op.ID, r.Backend))
		return
	}
	if r.Phase != engine.PhaseReady {
		return
	}
	u := j.ups[r.Backend]
	if u == nil {
		j.skip(r, fmt.Sprintf("it is upstream %q's, which this audit was not given: audit with --upstream or --upstream-config naming it", r.Backend))
		return
	}
	obs, err := u.Observe(ctx, r)
	if err != nil {
		j.skip(r, fmt.Sprintf("upstream %q's GET failed, so it is not compared: %v", r.Backend, err))
		return
	}
	resource, flag := ResourceUpstreamInstance, "instances_retrievable"
	if r.Kind == engine.KindBinding {
		resource, flag = ResourceUpstreamBinding, "bindings_retrievable"
	}
	name := fmt.Sprintf("%s:%s", r.Backend, r.ID)
	switch {
	case !obs.Retrievable:
		j.skip(r, fmt.Sprintf("upstream %q's catalog does not say %s for its service: the record cannot be checked", r.Backend, flag))
	case !obs.Found:
		action := "deprovision and provision the instance again from the platform"
		if r.Kind == engine.KindBinding {
			action = "unbind and bind again from the platform"
		}
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindMissing, Resource: resource, Name: name, Record: recordName(r),
			Detail: fmt.Sprintf("ready %s that upstream %q does not know (its GET answered not found)", r.Kind, r.Backend),
			Action: upstreamNotFixed + action})
	case r.Kind == engine.KindInstance && obs.ServiceID != "" && obs.ServiceID != r.Request.ServiceID:
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindDiffers, Resource: resource, Name: name, Record: recordName(r),
			Detail: fmt.Sprintf("upstream %q has it under service %q, the record under %q", r.Backend, obs.ServiceID, r.Request.ServiceID),
			Action: upstreamNotFixed + "the upstream changed what it was given; see docs/upstream.md"})
	case r.Kind == engine.KindInstance && obs.PlanID != "" && obs.PlanID != r.Request.PlanID:
		j.rep.Findings = append(j.rep.Findings, Finding{Kind: KindDiffers, Resource: resource, Name: name, Record: recordName(r),
			Detail: fmt.Sprintf("upstream %q has it at plan %q, the record at %q", r.Backend, obs.PlanID, r.Request.PlanID),
			Action: upstreamNotFixed + "update the instance's plan from the platform to the one it should have"})
	}
}

func (j *judge) skip(r *engine.Record, reason string) {
	j.skipUpstream = append(j.skipUpstream, Skipped{Record: recordName(r), Reason: reason})
}
