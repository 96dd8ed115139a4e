package osb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Version bounds: 2.13 is the oldest version whose semantics (async
// bindings excepted) the engine's answers fit; a new major version may change
// anything, so it is refused rather than guessed at.
const (
	supportedMajor = 2
	minMinor       = 13
)

// maxIDBytes bounds instance and binding ids. The spec recommends 255 for
// strings, and the engine derives bounded backend names from the ids.
const maxIDBytes = 255

// checkVersion accepts X-Broker-API-Version 2.13 and later 2.x.
func checkVersion(v string) error {
	fail := func(reason string) error {
		return &requestError{
			status:      http.StatusPreconditionFailed,
			description: fmt.Sprintf("%s; this broker implements OSB API 2.17 and accepts %s 2.%d or later 2.x", reason, headerVersion, minMinor),
		}
	}
	if v == "" {
		return fail("missing " + headerVersion + " header")
	}
	majorText, minorText, ok := strings.Cut(v, ".")
	major, errMaj := parseDigits(majorText)
	minor, errMin := parseDigits(minorText)
	if !ok || errMaj != nil || errMin != nil {
		return fail(headerVersion + " is not of the form MAJOR.MINOR")
	}
	if major != supportedMajor || minor < minMinor {
		return fail("unsupported " + headerVersion)
	}
	return nil
}

// parseDigits parses a non-negative decimal number without sign or spaces.
func parseDigits(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, errors.New("not a version number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a version number")
		}
	}
	return strconv.Atoi(s)
}

// pathID returns the named path wildcard after checking it is a usable id:
// non-empty, at most maxIDBytes, valid UTF-8 and free of control and other
// non-printing characters (which would end up in names, logs and headers).
func pathID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	switch {
	case id == "":
		return "", badRequest("%s must not be empty", name)
	case len(id) > maxIDBytes:
		return "", badRequest("%s must be at most %d bytes", name, maxIDBytes)
	case !utf8.ValidString(id):
		return "", badRequest("%s must be valid UTF-8", name)
	}
	for _, c := range id {
		if !unicode.IsPrint(c) {
			return "", badRequest("%s must not contain control or non-printing characters", name)
		}
	}
	return id, nil
}

// query parses the query string strictly: net/http's r.URL.Query() silently
// drops malformed pairs, which could turn "accepts_incomplete=tru%e" into
// "absent".
func query(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query string")
	}
	return q, nil
}

// acceptsIncomplete reads the accepts_incomplete parameter: absent or
// "false" is false, "true" is true, anything else is a bad request (the
// platform surely meant something, and guessing could answer 202 to a
// platform that does not poll).
func acceptsIncomplete(q url.Values) (bool, error) {
	vs, ok := q["accepts_incomplete"]
	if !ok {
		return false, nil
	}
	if len(vs) != 1 {
		return false, badRequest("accepts_incomplete must be given at most once")
	}
	switch vs[0] {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badRequest(`accepts_incomplete must be "true" or "false"`)
}

// readBody reads the whole (size-limited) body.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := readAll(r.Body, r.ContentLength)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &requestError{
				status:      http.StatusRequestEntityTooLarge,
				description: fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit),
			}
		}
		return nil, badRequest("cannot read request body")
	}
	return b, nil
}

// maxBodyHint bounds the buffer readAll allocates up front on the word of
// a Content-Length header.
const maxBodyHint = 64 << 10

// readAll is io.ReadAll with a first buffer of the announced length (OSB
// bodies are a few hundred bytes; io.ReadAll starts at 512 and grows), plus
// one byte, so that the read that sees the end needs no larger buffer.
func readAll(body io.Reader, length int64) ([]byte, error) {
	if length < 0 || length > maxBodyHint {
		return io.ReadAll(body)
	}
	b := make([]byte, 0, length+1)
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than announced: grow
		}
	}
}

// decodeBody reads the body and decodes it into v, a pointer to one of
// the request body structs (see unmarshalBody).
func decodeBody(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest("request body is empty; expected a JSON object")
	}
	return unmarshalBody(b, v)
}

// unmarshalBody decodes b into v with encoding/json. Error descriptions
// name the field and the JSON kinds involved, never a value: a body can
// carry secrets in its parameters.
func unmarshalBody(b []byte, v any) error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return badRequest("request body is not valid JSON (error at byte %d)", syntax.Offset)
	case errors.As(err, &typ):
		got, _, _ := strings.Cut(typ.Value, " ")
		if typ.Field == "" {
			return badRequest("request body must be a JSON object, not %s", got)
		}
		want := "of another type"
		if typ.Type != nil && typ.Type.Kind() == reflect.String {
			want = "a string"
		}
		return badRequest("field %q must be %s, not %s", typ.Field, want, got)
	}
	return badRequest("request body is not valid JSON")
}

// field is a named request value, for require.
type field struct{ name, value string }

// require reports every required field that is missing. Empty or blank
// strings count as missing (OSB: "MUST be a non-empty string").
func require(fields ...field) error {
	var missing []string
	for _, f := range fields {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return badRequest("missing required %s: %s", plural(len(missing), "field"), strings.Join(missing, ", "))
}

// bounded reports every field longer than maxIDBytes. The engine stores
// these strings in the record (service and plan ids, the organization,
// space and app guids), so their size is bounded like the ids'.
func bounded(fields ...field) error {
	for _, f := range fields {
		if len(f.value) > maxIDBytes {
			return badRequest("%s must be at most %d bytes", f.name, maxIDBytes)
		}
	}
	return nil
}

// maxIdentityBytes bounds X-Broker-API-Originating-Identity, which every
// operation records and a record keeps for its last few operations.
const maxIdentityBytes = 16 << 10

// identity returns the X-Broker-API-Originating-Identity header: a
// platform name and a base64 value, so printable ASCII, at most
// maxIdentityBytes. Anything else would cost a record up to six bytes of
// JSON per byte, for every operation it keeps.
func identity(r *http.Request) (string, error) {
	v := r.Header.Get(keyOriginatingIdentity)
	if len(v) > maxIdentityBytes {
		return "", badRequest("%s must be at most %d bytes", headerOriginatingIdentity, maxIdentityBytes)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", badRequest("%s must be printable ASCII (a platform name and a base64 value)", headerOriginatingIdentity)
		}
	}
	return v, nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// object returns an optional JSON object field: nil when absent or null, the
// object when it is one and within the engine's limits of size and nesting
// (engine.CheckFreeForm: the engine stores it inside a record, which must
// stay readable), and a bad request otherwise.
func object(name freeForm, raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if t[0] != '{' {
		return nil, badRequest("%s must be a JSON object", name.label)
	}
	if err := engine.CheckFreeForm(name.label, t); err != nil {
		return nil, badRequest("%v", err)
	}
	return t, nil
}

// freeForm names a free-form field of the request bodies; label is how
// messages name it, made once rather than on every request.
type freeForm struct{ label string }

var (
	freeParameters   = freeFormField("parameters")
	freeContext      = freeFormField("context")
	freeBindResource = freeFormField("bind_resource")
)

func freeFormField(name string) freeForm { return freeForm{fmt.Sprintf("field %q", name)} }

// decodeWithBody reads what every request with a body starts with:
// accepts_incomplete from the query, then the body, decoded into a B (see
// decodeBody).
func decodeWithBody[B any](r *http.Request) (B, bool, error) {
	var b B
	async, err := bodyQuery(r)
	if err != nil {
		return b, false, err
	}
	if err := decodeBody(r, &b); err != nil {
		return b, false, err
	}
	return b, async, nil
}

// objectField names an optional JSON object field of a request body.
type objectField struct {
	name freeForm
	raw  json.RawMessage
}

// identityAndObjects decodes the tail every request with a body shares:
// the originating identity header, then each of fields as an object (see
// object), in the order given, so that the first bad one is the error. It
// returns one object per field, in the same order.
func identityAndObjects(r *http.Request, fields ...objectField) (string, []json.RawMessage, error) {
	ident, err := identity(r)
	if err != nil {
		return "", nil, err
	}
	objects := make([]json.RawMessage, len(fields))
	for i, f := range fields {
		if objects[i], err = object(f.name, f.raw); err != nil {
			return "", nil, err
		}
	}
	return ident, objects, nil
}

// deletion is what deprovision and unbind read beside their path ids:
// the DELETE query and the originating identity.
type deletion struct {
	serviceID, planID string
	async             bool
	identity          string
}

// decodeDeletion reads a DELETE's query (see deleteQuery), then the
// originating identity.
func decodeDeletion(r *http.Request) (deletion, error) {
	serviceID, planID, async, err := deleteQuery(r)
	if err != nil {
		return deletion{}, err
	}
	ident, err := identity(r)
	if err != nil {
		return deletion{}, err
	}
	return deletion{serviceID: serviceID, planID: planID, async: async, identity: ident}, nil
}

// deleteQuery reads the query of a DELETE: service_id and plan_id are
// required, accepts_incomplete optional.
func deleteQuery(r *http.Request) (serviceID, planID string, async bool, err error) {
	q, async, err := asyncQuery(r)
	if err != nil {
		return "", "", false, err
	}
	serviceID, planID = q.Get("service_id"), q.Get("plan_id")
	if err := require(field{"service_id", serviceID}, field{"plan_id", planID}); err != nil {
		return "", "", false, err
	}
	return serviceID, planID, async, nil
}

// bodyQuery reads the query of a request with a body, of which only
// accepts_incomplete matters: the queries platforms send are known without
// url.ParseQuery's map; any other goes through asyncQuery.
func bodyQuery(r *http.Request) (bool, error) {
	switch r.URL.RawQuery {
	case "", "accepts_incomplete=false":
		return false, nil
	case "accepts_incomplete=true":
		return true, nil
	}
	_, async, err := asyncQuery(r)
	return async, err
}

// asyncQuery parses the query string and its accepts_incomplete.
func asyncQuery(r *http.Request) (url.Values, bool, error) {
	q, err := query(r)
	if err != nil {
		return nil, false, err
	}
	async, err := acceptsIncomplete(q)
	return q, async, err
}
