package osb

import (
	"encoding/json"
	"unicode/utf8"
)

// The request bodies' decoder without reflection. encoding/json's
// reflective Unmarshal was the largest part of a replayed PUT's own cost
// that a bare handler does not share (issue 17). scanBody decodes, in one
// pass and into the body struct's fields directly, the bodies platforms
// send: an object whose keys are plain ASCII strings, whose string fields
// hold strings without escapes (or null), and whose other values are any
// valid JSON. Everything else (an escape in a key or a string field, a
// non-ASCII key, a value of the wrong type, bad syntax, nesting deeper than
// scanMaxDepth) makes it give up, and the caller decodes the body again
// with encoding/json, which then decides: the error descriptions, the
// treatment of escapes, invalid UTF-8 and Unicode case folding stay
// exactly encoding/json's, because only encoding/json ever produces them.
//
// Where scanBody succeeds it must produce exactly what encoding/json
// would, and it does by keeping to the part of encoding/json's behavior
// that is simple to state:
//   - Keys match a field's name exactly or ASCII case-insensitively (what
//     encoding/json's folding reduces to for an ASCII key and the fields'
//     lowercase ASCII names); the last of duplicate keys wins; unknown keys
//     are skipped after their value is checked to be valid JSON.
//   - A string field takes the string's bytes as they are (no escape, no
//     control character, valid UTF-8: what encoding/json's unquoting
//     leaves unchanged); null leaves the field as it was.
//   - A free-form field (json.RawMessage) takes the value's bytes as sent,
//     null included, as encoding/json's RawMessage does.
//   - maintenance_info: null sets it to nil; an object is decoded into the
//     struct already there (a duplicate key merges into it, as
//     encoding/json's decoding through a non-nil pointer does) or a new
//     one.
//   - The whole input must be one object, with only JSON whitespace around
//     it; every value, kept or skipped, is checked against JSON's grammar
//     as encoding/json's scanner checks it.
//
// FuzzScanBody compares the two on valid, invalid and hostile bodies.

// scanMaxDepth bounds the nesting scanBody follows; deeper values go to
// encoding/json (whose own limit is 10000).
const scanMaxDepth = 512

// bodySlots is implemented by the request bodies scanBody fills: slot
// returns where the value of a key goes, matched as keyIs matches it, and
// the zero slot for a key the body does not know.
type bodySlots interface {
	slot(key []byte) slot
}

// bodyPtr is a pointer to a body struct B that scanBody fills, for the
// functions generic over the bodies: they make a B and fill it through P.
type bodyPtr[B any] interface {
	*B
	bodySlots
}

// slot is where one field's value goes: at most one pointer is set.
type slot struct {
	str *string
	raw *json.RawMessage
	mi  **maintenanceInfo
}

// keyIs reports whether an ASCII key names the field name (lowercase
// ASCII), exactly or ASCII case-insensitively.
func keyIs(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range len(key) {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// scanBody fills v from b and reports whether it could; when it could
// not, v may be partly filled, and b is for encoding/json to decode.
func scanBody(b []byte, v bodySlots) bool {
	s := scanner{b: b}
	s.space()
	if !s.object(v) {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// scanner reads b from i on.
type scanner struct {
	b []byte
	i int
}

// space skips JSON whitespace.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c if it is next.
func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// literal consumes word (true, false or null) if it is next. What follows
// it is the caller's to check, as after any value.
func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// object reads an object into v: its keys must be plain ASCII strings.
func (s *scanner) object(v bodySlots) bool {
	if !s.eat('{') {
		return false
	}
	s.space()
	if s.eat('}') {
		return true
	}
	for {
		key, ok := s.plainString()
		if !ok || !isASCII(key) {
			return false
		}
		s.space()
		if !s.eat(':') {
			return false
		}
		s.space()
		if !s.value(v.slot(key)) {
			return false
		}
		s.space()
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
		s.space()
	}
}

// value reads one value into sl (skips it for the zero slot).
func (s *scanner) value(sl slot) bool {
	switch {
	case sl.str != nil:
		if s.literal("null") {
			return true
		}
		str, ok := s.plainString()
		if !ok || !isASCII(str) && !utf8.Valid(str) {
			return false
		}
		*sl.str = string(str)
		return true
	case sl.raw != nil:
		start := s.i
		if !s.skipValue() {
			return false
		}
		// The capacity is cut at the value's end, so that an append to
		// it cannot write over the rest of the body.
		*sl.raw = s.b[start:s.i:s.i]
		return true
	case sl.mi != nil:
		if s.literal("null") {
			*sl.mi = nil
			return true
		}
		if *sl.mi == nil {
			*sl.mi = new(maintenanceInfo)
		}
		return s.object(*sl.mi)
	}
	return s.skipValue()
}

// plainString reads a string without escapes or control characters and
// returns its content (in b).
func (s *scanner) plainString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// skipValue checks one value of any kind against JSON's grammar and moves
// past it. Strings may hold any bytes from 0x20 up and the escapes JSON
// defines, as encoding/json's scanner accepts them.
func (s *scanner) skipValue() bool {
	// open[d] is true for an object at depth d, false for an array.
	var open [scanMaxDepth]bool
	depth := 0
	for {
		// A value starts here.
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		if c := s.b[s.i]; c == '{' || c == '[' {
			s.i++
			s.space()
			if !s.eat(closing(c)) { // not empty: its first value is next
				if depth == scanMaxDepth {
					return false
				}
				open[depth] = c == '{'
				depth++
				if c == '{' && !s.memberKey() {
					return false
				}
				continue
			}
		} else if !s.scalar(c) {
			return false
		}
		var ok bool
		if depth, ok = s.next(open[:depth]); !ok || depth == 0 {
			return ok
		}
	}
}

// scalar moves past a string, number, true, false or null starting with c.
func (s *scanner) scalar(c byte) bool {
	switch c {
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

// next moves past what follows a value inside the containers open (the
// innermost last): the brackets it closes, then a comma and, in an
// object, the next key. It returns how many containers are still open: 0
// when the outermost value ended.
func (s *scanner) next(open []bool) (int, bool) {
	depth := len(open)
	for depth > 0 {
		s.space()
		if s.eat(',') {
			return depth, !open[depth-1] || s.memberKey()
		}
		if !s.eat(closingOf(open[depth-1])) {
			return 0, false
		}
		depth--
	}
	return 0, true
}

// memberKey reads an object member's key and its colon.
func (s *scanner) memberKey() bool {
	s.space()
	if !s.skipString() {
		return false
	}
	s.space()
	return s.eat(':')
}

func closing(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

func closingOf(object bool) byte {
	if object {
		return '}'
	}
	return ']'
}

// skipString moves past a string, escapes included.
func (s *scanner) skipString() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i >= len(s.b) {
				return false
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i < 4 {
					return false
				}
				for _, h := range s.b[s.i : s.i+4] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number moves past a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.eat('.') && s.digits() == 0 {
		return false
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// digits moves past decimal digits and says how many.
func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

func (b *provisionBody) slot(k []byte) slot {
	switch {
	case keyIs(k, "organization_guid"):
		return slot{str: &b.OrganizationGUID}
	case keyIs(k, "space_guid"):
		return slot{str: &b.SpaceGUID}
	}
	return instanceFields{
		serviceID: &b.ServiceID, planID: &b.PlanID,
		parameters: &b.Parameters, context: &b.Context, maintenanceInfo: &b.MaintenanceInfo,
	}.slot(k)
}

func (b *updateBody) slot(k []byte) slot {
	return instanceFields{
		serviceID: &b.ServiceID, planID: &b.PlanID,
		parameters: &b.Parameters, context: &b.Context, maintenanceInfo: &b.MaintenanceInfo,
	}.slot(k)
}

// instanceFields points at the fields provision and update bodies share;
// its slot is theirs for those keys.
type instanceFields struct {
	serviceID, planID   *string
	parameters, context *json.RawMessage
	maintenanceInfo     **maintenanceInfo
}

func (f instanceFields) slot(k []byte) slot {
	switch {
	case keyIs(k, "service_id"):
		return slot{str: f.serviceID}
	case keyIs(k, "plan_id"):
		return slot{str: f.planID}
	case keyIs(k, "parameters"):
		return slot{raw: f.parameters}
	case keyIs(k, "context"):
		return slot{raw: f.context}
	case keyIs(k, "maintenance_info"):
		return slot{mi: f.maintenanceInfo}
	}
	return slot{}
}

func (b *bindBody) slot(k []byte) slot {
	switch {
	case keyIs(k, "service_id"):
		return slot{str: &b.ServiceID}
	case keyIs(k, "plan_id"):
		return slot{str: &b.PlanID}
	case keyIs(k, "app_guid"):
		return slot{str: &b.AppGUID}
	case keyIs(k, "bind_resource"):
		return slot{raw: &b.BindResource}
	case keyIs(k, "parameters"):
		return slot{raw: &b.Parameters}
	case keyIs(k, "context"):
		return slot{raw: &b.Context}
	case keyIs(k, "predecessor_binding_id"):
		return slot{str: &b.PredecessorBindingID}
	}
	return slot{}
}

func (m *maintenanceInfo) slot(k []byte) slot {
	switch {
	case keyIs(k, "version"):
		return slot{str: &m.Version}
	case keyIs(k, "description"):
		return slot{str: &m.Description}
	}
	return slot{}
}
