// Package osb is bucketbroker's Open Service Broker API v2.17 door: an
// http.Handler that turns platform requests into engine calls and engine
// answers into OSB status codes.
//
// Every /v2 request goes through the same four steps:
//
//  1. Gate. Basic auth first (401 with a WWW-Authenticate challenge), then
//     X-Broker-API-Version, which must be 2.13 or a later 2.x (412).
//     Authentication comes first so that an unauthenticated caller learns
//     nothing, not even which versions the broker speaks; the credentials are
//     compared as SHA-256 digests in constant time, so neither their content
//     nor their length leaks through timing.
//  2. Parse and validate. Path ids, the query string (accepts_incomplete is
//     "true", "false" or absent) and the JSON body, limited to MaxBodyBytes
//     (413), are decoded into an engine request. Missing or empty required
//     fields, wrong JSON types and parameters, context or bind_resource that
//     are not objects, or nest deeper or are larger than the engine's limits
//     for free-form values (engine.CheckFreeForm: the engine stores them
//     inside a record, which must stay readable), are a 400 whose
//     description names the field but never echoes a value. A request that
//     fails here never reaches the engine. The body is decoded by
//     encoding/json, whose errors become those descriptions;
//     testdata/decode.golden pins what the door makes of a corpus of valid,
//     invalid and hostile bodies (TestDecodeGolden; FuzzDecodeBody fuzzes
//     it).
//  3. Call the engine, once, with the decoded request; the
//     X-Broker-API-Originating-Identity header travels along as Identity.
//  4. Map the answer. An engine Outcome becomes 201, 202 (with the operation
//     id, and never credentials) or 200; an engine sentinel error becomes its
//     OSB status and error code (ErrConcurrency is 422 ConcurrencyError,
//     ErrAsyncRequired is 422 AsyncRequired, ErrMaintenanceInfoConflict 422
//     MaintenanceInfoConflict). Those three carry the spec's description
//     word for word, which clients compare, and the engine's text in a
//     detail field. An unknown error is a 500 with a generic description:
//     its text stays in the log.
//
// The door does not decide anything about idempotency, fingerprints,
// catalogs or plans: whether a re-sent PUT is a 200, a 202 with the same
// operation or a 409 is the engine's call, made from its durable record. The
// door keeps no state between requests, does not validate parameters against
// plan schemas, and does not canonicalize parameters (the engine
// fingerprints them). The catalog is served byte for byte as configured.
//
// Besides /v2, the handler serves /healthz (always 200), /readyz (Ready,
// with Warnings that need an operator but do not make it unready) and
// /metrics (the Gatherer), without authentication. Each request produces
// exactly one log line (ERROR for a 5xx; a 409, 410 or 422 is an ordinary
// answer and logged at INFO; successful probes at DEBUG) and one sample of
// bucketbroker_http_requests_total and
// bucketbroker_http_request_duration_seconds, labeled by route pattern so
// that raw paths never become label values. Bodies, credentials and the
// Authorization header are never logged.
package osb
