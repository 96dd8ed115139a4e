package jsonnest

import (
	"bytes"
	"encoding/json"
)

// walk calls fn with the depth after each of b's tokens (one more than
// before after an opening bracket, one less after a closing one) and the
// offset in b just past the token. It reads b with encoding/json's
// tokenizer, which has no nesting limit of its own, and stops at the end
// or at the first syntax error.
func walk(b []byte, fn func(depth, offset int)) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // a number beyond float64 is a token like any other
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		fn(depth, int(dec.InputOffset()))
	}
}

// Depth returns the deepest nesting of objects and arrays in b, a JSON
// text (0 for a scalar). For text that is not valid JSON it is the
// deepest nesting before the first error.
func Depth(b []byte) int {
	deepest := 0
	walk(b, func(depth, _ int) { deepest = max(deepest, depth) })
	return deepest
}

// Exceeds reports whether b nests objects and arrays deeper than limit,
// and if so how deep (Depth; 0 when it does not). No text nests deeper than it has opening
// brackets, so a text with at most limit of them, every request and
// record of the usual size, is not read token by token.
func Exceeds(b []byte, limit int) (int, bool) {
	if bytes.Count(b, []byte("{"))+bytes.Count(b, []byte("[")) <= limit {
		return 0, false
	}
	if d := Depth(b); d > limit {
		return d, true
	}
	return 0, false
}

// Prune returns data, a JSON text, with every object or array that opens
// deeper than maxDepth levels replaced by null, and how many were. The rest
// of data is kept byte for byte. For text that is not valid JSON the result
// is some text, no more valid than data.
func Prune(data []byte, maxDepth int) ([]byte, int) {
	out := make([]byte, 0, len(data))
	kept, pruned := 0, 0 // data[:kept] is dealt with
	skip := 0            // >0: the depth of the value being pruned
	walk(data, func(depth, off int) {
		switch {
		case skip > 0 && depth < skip: // the pruned value closed
			kept, skip = off, 0
		case skip == 0 && depth > maxDepth: // an opening bracket too deep
			out = append(append(out, data[kept:off-1]...), "null"...)
			pruned++
			kept, skip = off, depth
		}
	})
	return append(out, data[kept:]...), pruned
}
