package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// canonicalObject returns the canonical JSON of a JSON object, or nil for
// an absent, null or empty object, so that equivalent requests compare
// equal: encoding/json decodes it (numbers kept as written, the last of
// duplicate keys) and encodes it again, which sorts every object's keys by
// their bytes, drops insignificant white space and writes strings its own
// way (HTML characters and U+2028/U+2029 escaped, other escapes undone).
// Records hold this form and fingerprints hash it: it must not change.
func canonicalObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	switch o := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		if len(o) == 0 {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("want a JSON object")
	}
	return json.Marshal(v)
}

// fingerprint hashes the parts of a request that decide whether a re-sent
// request is the same request. Context is left out: platforms may send a
// different context on a retry. The fields, their names and omitempty are
// what stored fingerprints were made of.
func fingerprint(instanceID string, r Request) string {
	b, _ := json.Marshal(struct {
		InstanceID   string          `json:"i,omitempty"`
		ServiceID    string          `json:"s"`
		PlanID       string          `json:"p"`
		Parameters   json.RawMessage `json:"params,omitempty"`
		Org          string          `json:"o,omitempty"`
		Space        string          `json:"sp,omitempty"`
		AppGUID      string          `json:"a,omitempty"`
		BindResource json.RawMessage `json:"br,omitempty"`
	}{instanceID, r.ServiceID, r.PlanID, r.Parameters, r.OrganizationGUID, r.SpaceGUID, r.AppGUID, r.BindResource})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// mergeParams applies an update's parameters to the current ones: top-level
// keys in update replace those in current.
func mergeParams(current, update json.RawMessage) (json.RawMessage, error) {
	if len(update) == 0 {
		return current, nil
	}
	m := map[string]json.RawMessage{}
	if len(current) > 0 {
		if err := json.Unmarshal(current, &m); err != nil {
			return nil, err
		}
	}
	var u map[string]json.RawMessage
	if err := json.Unmarshal(update, &u); err != nil {
		return nil, err
	}
	for k, v := range u {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return canonicalObject(b)
}
