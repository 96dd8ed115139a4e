package jsonnest

// scanner follows a JSON text byte by byte, far enough to tell the
// brackets that open and close objects and arrays from those inside
// strings. For text that is not valid JSON it still says something, never
// an error: its callers bound input, they do not validate it.
type scanner struct {
	inString, escaped bool
}

// step takes the next byte and returns +1 when it opens an object or
// array, -1 when it closes one, and 0 otherwise.
func (s *scanner) step(c byte) int {
	switch {
	case s.inString:
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
		}
	case c == '"':
		s.inString = true
	case c == '{' || c == '[':
		return +1
	case c == '}' || c == ']':
		return -1
	}
	return 0
}

// Depth returns the deepest nesting of objects and arrays in b, a JSON
// text (0 for a scalar). Brackets inside strings do not count. For text
// that is not valid JSON the result is some number, not an error.
func Depth(b []byte) int {
	var s scanner
	depth, deepest := 0, 0
	for _, c := range b {
		depth += s.step(c)
		deepest = max(deepest, depth)
	}
	return deepest
}

// Prune returns data, a JSON text, with every object or array that opens
// deeper than maxDepth levels replaced by null, and how many were.
func Prune(data []byte, maxDepth int) ([]byte, int) {
	out := make([]byte, 0, len(data))
	var s scanner
	depth, pruned := 0, 0
	skip := 0 // >0: inside a pruned value, at this many levels below it
	for _, c := range data {
		d := s.step(c)
		if skip > 0 {
			skip += d
			continue
		}
		if d > 0 && depth == maxDepth {
			out = append(out, "null"...)
			pruned++
			skip = 1
			continue
		}
		depth += d
		out = append(out, c)
	}
	return out, pruned
}
