// Package osbclient is bucketbroker's own small client for the Open Service
// Broker API v2.17: the calls upstream mode makes to the brokers it fronts
// (catalog; provision, update, deprovision, fetch and last_operation of an
// instance; bind, unbind, fetch and last_operation of a binding).
//
// The model is one request, one answer, nothing hidden. The client never
// retries (net/http itself may resend a GET once when a kept-alive
// connection turns out closed; never a PUT, PATCH or DELETE) and keeps no
// state: whether a timeout on a create is followed by
// an orphan-mitigation DELETE, or a 409 on a re-sent create means "adopt
// it", is the caller's decision, because only the caller holds the record
// that decides it. Each method therefore returns either the upstream's
// success answer (with its status code, so 200 "already exists" and 201
// "created" stay apart) or an error:
//
//   - *Error: the upstream answered with another status. It carries the
//     status, the spec's error code (AsyncRequired, ConcurrencyError,
//     RequiresApp, MaintenanceInfoConflict) and the upstream's description,
//     so that the caller branches with errors.As or IsStatus / IsCode and
//     hands the description on to the platform.
//   - anything else: no usable answer (connection refused or dropped, the
//     deadline passed, a body over the limit, a body that is not JSON). The
//     request may or may not have taken effect upstream.
//
// Every call runs under a deadline (the context's, or Config.Timeout when
// the context has none), every response body is read through a limit, and
// every request carries X-Broker-API-Version, basic auth and, when given,
// the platform's X-Broker-API-Originating-Identity. Credentials the upstream
// returns are kept as raw JSON and never formatted into an error. The
// request and answer bodies are internal/osbapi's, which the door shares;
// the names here are aliases of them.
package osbclient
