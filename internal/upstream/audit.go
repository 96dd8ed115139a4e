package upstream

import (
	"context"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// Observe asks the upstream for rec's instance or binding by GET, where
// its catalog offers that (an audit.Upstream). A binding's credentials
// are fetched by the GET and dropped unread.
func (u *Upstream) Observe(ctx context.Context, rec *engine.Record) (audit.Observation, error) {
	s := u.service(rec.Request.ServiceID)
	poll := osbclient.PollRequest{ServiceID: rec.Request.ServiceID, PlanID: rec.Request.PlanID}
	if rec.Kind == engine.KindBinding {
		if !s.BindingsRetrievable {
			return audit.Observation{}, nil
		}
		_, err := u.client.GetBinding(ctx, rec.InstanceID, rec.ID, poll)
		if notFound(err) {
			return audit.Observation{Retrievable: true}, nil
		}
		if err != nil {
			return audit.Observation{}, err
		}
		return audit.Observation{Retrievable: true, Found: true}, nil
	}
	if !s.InstancesRetrievable {
		return audit.Observation{}, nil
	}
	in, err := u.client.GetInstance(ctx, rec.ID, poll)
	if notFound(err) {
		return audit.Observation{Retrievable: true}, nil
	}
	if err != nil {
		return audit.Observation{}, err
	}
	return audit.Observation{Retrievable: true, Found: true, ServiceID: in.ServiceID, PlanID: in.PlanID}, nil
}

var _ audit.Upstream = (*Upstream)(nil)
