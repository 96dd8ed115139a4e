package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// canonicalObject returns the canonical JSON of a JSON object (sorted keys,
// no insignificant white space, numbers as written), or nil for an absent,
// null or empty object, so that equivalent requests compare equal.
func canonicalObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if c, ok := canonicalPlainObject(raw); ok {
		return c, nil
	}
	return canonicalDecoded(raw)
}

// canonicalDecoded is canonicalObject for any input: it decodes raw and
// encodes it again.
func canonicalDecoded(raw json.RawMessage) (json.RawMessage, error) {
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
	b, err := json.Marshal(v) // encoding/json sorts map keys
	if err != nil {
		return nil, err
	}
	return b, nil
}

// fingerprint hashes the parts of a request that decide whether a re-sent
// request is the same request. Context is left out: platforms may send a
// different context on a retry.
func fingerprint(instanceID string, r Request) string {
	var buf [512]byte
	b, ok := appendFingerprintPlain(buf[:0], instanceID, r)
	if !ok {
		b = fingerprintJSON(instanceID, r)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fingerprintJSON is what fingerprint hashes, for any request.
func fingerprintJSON(instanceID string, r Request) []byte {
	v := struct {
		InstanceID   string          `json:"i,omitempty"`
		ServiceID    string          `json:"s"`
		PlanID       string          `json:"p"`
		Parameters   json.RawMessage `json:"params,omitempty"`
		Org          string          `json:"o,omitempty"`
		Space        string          `json:"sp,omitempty"`
		AppGUID      string          `json:"a,omitempty"`
		BindResource json.RawMessage `json:"br,omitempty"`
	}{instanceID, r.ServiceID, r.PlanID, r.Parameters, r.OrganizationGUID, r.SpaceGUID, r.AppGUID, r.BindResource}
	b, _ := json.Marshal(v)
	return b
}

// appendFingerprintPlain appends to dst the bytes fingerprintJSON returns
// for r, written out by hand, when every string is plain and the raw
// objects are compact and free of what encoding/json would escape or
// compact (see plainString). ok is false otherwise, and the caller uses
// fingerprintJSON. The fields, their order and omitempty follow the struct
// in fingerprintJSON: stored fingerprints depend on every byte.
func appendFingerprintPlain(dst []byte, instanceID string, r Request) ([]byte, bool) {
	for _, s := range []string{instanceID, r.ServiceID, r.PlanID, r.OrganizationGUID, r.SpaceGUID, r.AppGUID} {
		if !plainString(s) {
			return dst, false
		}
	}
	for _, raw := range []json.RawMessage{r.Parameters, r.BindResource} {
		if !compactPlain(raw) {
			return dst, false
		}
	}
	dst = append(dst, '{')
	if instanceID != "" {
		dst = appendQuoted(append(dst, `"i":`...), instanceID)
		dst = append(dst, ',')
	}
	dst = appendQuoted(append(dst, `"s":`...), r.ServiceID)
	dst = appendQuoted(append(dst, `,"p":`...), r.PlanID)
	if len(r.Parameters) > 0 {
		dst = append(append(dst, `,"params":`...), r.Parameters...)
	}
	for _, f := range []struct{ name, value string }{
		{`,"o":`, r.OrganizationGUID}, {`,"sp":`, r.SpaceGUID}, {`,"a":`, r.AppGUID},
	} {
		if f.value != "" {
			dst = appendQuoted(append(dst, f.name...), f.value)
		}
	}
	if len(r.BindResource) > 0 {
		dst = append(append(dst, `,"br":`...), r.BindResource...)
	}
	return append(dst, '}'), true
}

func appendQuoted[T string | []byte](dst []byte, s T) []byte {
	return append(append(append(dst, '"'), s...), '"')
}

// plainString reports whether encoding/json writes s as it is between
// quotes: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML (<, >, &).
func plainString[T string | []byte](s T) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// compactPlain reports whether encoding/json writes the raw JSON value b
// unchanged (it compacts a RawMessage and escapes <, >, & and non-ASCII
// line separators in it): b has no white space at all, not even in
// strings, and only printable ASCII other than <, > and &. It does not
// check that b is valid JSON; canonicalObject made it.
func compactPlain(b []byte) bool {
	for _, c := range b {
		if c <= 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// maxPlainDepth bounds the nesting canonicalPlainObject handles itself;
// deeper objects take the general path.
const maxPlainDepth = 32

// canonicalPlainObject returns what canonicalObject returns for raw when
// raw is a JSON object whose strings (keys included) are all plain (see
// plainString) and whose keys are unique within each object: there, a
// string's bytes are its value and encoding/json writes them back as they
// are, so sorting the members by their keys' bytes and dropping white
// space gives the same bytes as decoding and encoding. ok is false for
// anything else, including invalid JSON, which the general path then
// reports.
func canonicalPlainObject(raw []byte) (json.RawMessage, bool) {
	p := plainParser{in: raw}
	p.space()
	if p.pos >= len(raw) || raw[p.pos] != '{' {
		return nil, false
	}
	out, ok := p.value(make([]byte, 0, len(raw)), 0)
	p.space()
	if !ok || p.pos != len(raw) {
		return nil, false
	}
	if string(out) == "{}" {
		return nil, true
	}
	return out, true
}

// plainParser reads the JSON canonicalPlainObject accepts.
type plainParser struct {
	in  []byte
	pos int
}

func (p *plainParser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at p.pos to out.
func (p *plainParser) value(out []byte, depth int) ([]byte, bool) {
	p.space()
	if p.pos >= len(p.in) || depth > maxPlainDepth {
		return out, false
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(out, depth)
	case c == '[':
		return p.array(out, depth)
	case c == '"':
		s, ok := p.str()
		return appendQuoted(out, s), ok
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number(out)
	}
	return out, false
}

// str reads a plain string and returns its bytes without the quotes.
func (p *plainParser) str() ([]byte, bool) {
	if p.pos >= len(p.in) || p.in[p.pos] != '"' {
		return nil, false
	}
	start := p.pos + 1
	end := bytes.IndexByte(p.in[start:], '"')
	if end < 0 || !plainString(p.in[start:start+end]) {
		return nil, false
	}
	p.pos = start + end + 1
	return p.in[start : start+end], true
}

func (p *plainParser) literal(out []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return out, false
	}
	p.pos += len(lit)
	return append(out, lit...), true
}

// number reads a JSON number; encoding/json keeps it as written
// (json.Number).
func (p *plainParser) number(out []byte) ([]byte, bool) {
	in, i := p.in, p.pos
	digits := func() bool {
		start := i
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
		return i > start
	}
	if in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case !digits():
		return out, false
	}
	if i < len(in) && in[i] == '.' {
		i++
		if !digits() {
			return out, false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if !digits() {
			return out, false
		}
	}
	out = append(out, in[p.pos:i]...)
	p.pos = i
	return out, true
}

func (p *plainParser) array(out []byte, depth int) ([]byte, bool) {
	p.pos++ // [
	out = append(out, '[')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return append(out, ']'), true
	}
	for {
		var ok bool
		if out, ok = p.value(out, depth+1); !ok {
			return out, false
		}
		p.space()
		if p.pos >= len(p.in) {
			return out, false
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			out = append(out, ',')
		case ']':
			p.pos++
			return append(out, ']'), true
		default:
			return out, false
		}
	}
}

// member is an object member: its key, and its canonical value in a
// buffer of the object's.
type member struct {
	key        []byte
	start, end int
}

func (p *plainParser) object(out []byte, depth int) ([]byte, bool) {
	p.pos++ // {
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(out, "{}"...), true
	}
	var members []member
	var values []byte
	for {
		p.space()
		key, ok := p.str()
		if !ok {
			return out, false
		}
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return out, false
		}
		p.pos++
		start := len(values)
		if values, ok = p.value(values, depth+1); !ok {
			return out, false
		}
		members = append(members, member{key, start, len(values)})
		p.space()
		if p.pos >= len(p.in) {
			return out, false
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		if p.in[p.pos] != ',' {
			return out, false
		}
		p.pos++
	}
	slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			if bytes.Equal(members[i-1].key, m.key) {
				return out, false // a repeated key: the general path keeps the last
			}
			out = append(out, ',')
		}
		out = append(appendQuoted(out, m.key), ':')
		out = append(out, values[m.start:m.end]...)
	}
	return append(out, '}'), true
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

// instanceParams are the instance parameters the engine acts on; the plan's
// schema has already checked them.
type instanceParams struct {
	PurgeOnDelete *bool             `json:"purge_on_delete"`
	Labels        map[string]string `json:"labels"`
}

type bindingParams struct {
	Access string `json:"access"`
}

func decodeParams(raw json.RawMessage, into any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, into)
}
