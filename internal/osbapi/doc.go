// Package osbapi declares the bodies of the Open Service Broker API v2.17
// requests and answers that bucketbroker sends or receives, once, for the
// three parts that speak it: the door (internal/osb) decodes the requests
// and encodes the answers, the client of upstream brokers
// (internal/osbclient) encodes the requests and decodes the answers, and
// the ill broker (test/illbroker) decodes the requests.
//
// Each type's field order and omitempty are those of the side that encodes
// it, so that the bytes on the wire are what they are byte for byte (the
// door's answers are compared byte for byte by its tests); the side that
// decodes is indifferent to both. A field whose contents bucketbroker
// passes on or keeps without reading is a json.RawMessage, so that neither
// side refuses what it does not understand. Besides the JSON bodies, Call
// holds the two parts of a changing request that travel outside them, and
// the answers carry their HTTP status (never encoded).
package osbapi
