// Package catalog loads the OSB service catalog that bucketbroker offers and
// answers the questions the engine asks of it: is this service and plan
// known, what may a plan do, and do these parameters pass the plan's schema.
//
// A catalog file is the OSB catalog document (YAML or JSON) with one
// addition: each plan may carry a "bucketbroker" object that configures what
// the plan provisions (binding access modes, whether it is asynchronous only,
// what happens to objects on deprovision). That object is stripped from the
// catalog served to platforms. Every JSON Schema in the file is compiled when
// the catalog loads, so a broken schema is a start-up error, not a runtime
// surprise.
package catalog
