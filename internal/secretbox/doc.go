// Package secretbox seals the secrets bucketbroker must keep (the secret
// access keys it hands to bindings) before they reach the store, with
// AES-256-GCM under a key kept in a file outside the store.
//
// Every sealed value is bound to the record it belongs to through the
// additional authenticated data: a sealed secret copied from one record to
// another fails to open. A store dump alone therefore reveals no secret, and
// the key file alone holds none.
package secretbox
