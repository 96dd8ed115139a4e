package audit

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// stream is one kind's side of the merge: the kind's records, read a page
// at a time in the order of their resources' names, and the names the
// inventory has listed of the kind's resources (buckets for instances,
// users for bindings).
type stream struct {
	kind     engine.Kind
	resource string // ResourceBucket or ResourceUser
	// page holds the records read and not yet judged; judgedTo is the
	// key of the last record judged, readTo of the last read; end is set
	// once a page came short.
	page             []*engine.Record
	judgedTo, readTo engine.RecordKey
	end              bool
	// last is the last name the inventory listed (any, when listed).
	last   string
	listed bool
	// held is set when the inventory listed a name out of order: from
	// then on the kind's resources are held, and they and the kind's
	// records not yet judged are judged in the last pass (settle).
	held bool
	// rest are the resources whose verdict the last pass settles: those
	// no record of their name carries the mark of (a record of another
	// name may), and the held ones; marks indexes them by mark.
	rest  []resource
	marks []int32
	// pending are the candidate findings of missing resources, confirmed
	// once the inventory is in: as many as the backend lacks, and of a
	// held kind the records judged before it was held.
	pending []candidate
}

// peek returns the next record of s not yet judged, reading the next page
// when s has none left, or nil after the last.
func (j *judge) peek(ctx context.Context, s *stream) (*engine.Record, error) {
	if len(s.page) == 0 && !s.end {
		s.page = nil // the judged page is let go before the next is read
		page, err := j.store.List(ctx, engine.ListOptions{Kind: s.kind, ByName: true, After: s.readTo, Limit: pageSize})
		if err != nil {
			return nil, fmt.Errorf("list the store: %w", err)
		}
		// List skips records it cannot read: judged without them, their
		// buckets and users would be leaks, and --fix would delete them.
		if err := refuseUnreadable(j.store); err != nil {
			return nil, err
		}
		j.rep.Records += len(page)
		s.end = len(page) < pageSize
		if len(page) > 0 {
			s.readTo = engine.KeyOf(page[len(page)-1])
		}
		s.page = page
	}
	if len(s.page) == 0 {
		return nil, nil
	}
	return s.page[0], nil
}

// pop takes the record peek returned off s.
func (s *stream) pop() *engine.Record {
	r := s.page[0]
	s.page[0] = nil
	s.page = s.page[1:]
	s.judgedTo = engine.KeyOf(r)
	return r
}

// byNameAfter reports whether r comes after k in a listing by name.
func byNameAfter(r *engine.Record, k engine.RecordKey) bool {
	return cmp.Or(strings.Compare(r.ResourceName(), k.Name), strings.Compare(r.ID, k.ID)) > 0
}

// merge judges one page of the inventory's resources of s's kind (names
// all it listed, rs the judged ones, both in its order) with the records
// of their names, and the records of the names before them with none.
// A page whose names do not follow the names before, each after the one
// before it, makes s held (see stream).
func (j *judge) merge(ctx context.Context, s *stream, names []string, rs []resource) error {
	if !s.held {
		for _, n := range names {
			if s.listed && n <= s.last {
				s.held = true
				j.log.Warn("audit: the backend listed its resources out of name order: they are held in memory and judged after the listing",
					"resource", s.resource, "name", n, "after", s.last)
				break
			}
			s.last, s.listed = n, true
		}
	}
	if s.held {
		s.rest = append(s.rest, rs...)
		return nil
	}
	for i := range rs {
		if err := j.mergeOne(ctx, s, &rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// mergeOne judges the records of s up to res's name, and res.
func (j *judge) mergeOne(ctx context.Context, s *stream, res *resource) error {
	for {
		r, err := j.peek(ctx, s)
		if err != nil {
			return err
		}
		if r == nil || r.ResourceName() > res.name {
			break
		}
		s.pop()
		if r.ResourceName() < res.name {
			// Names are unique: no resource of the inventory has its name.
			err = j.record(ctx, r, nil)
		} else {
			if state(r).Owner != "" && carries(res, s.kind, r) {
				j.owner(res, r)
			}
			err = j.record(ctx, r, res)
		}
		if err != nil {
			return err
		}
	}
	return j.verdict(ctx, s, res)
}

// verdict settles res once the records of its name are judged. Owned, it
// is done. No record of its name carries its mark: the last pass looks
// for one among all (a record of another name may). A tombstone of its
// name carries it: that record is read again first, since it may have
// been read before the inventory listed res, and a provision since can
// have made it live.
func (j *judge) verdict(ctx context.Context, s *stream, res *resource) error {
	switch {
	case res.owned:
		return nil
	case res.seen == seenNone:
		s.rest = append(s.rest, *res)
		return nil
	}
	r, err := j.store.Get(ctx, s.kind, res.gone)
	if err != nil {
		return fmt.Errorf("read %s/%s again: %w", s.kind, res.gone, err)
	}
	if r.Version != res.goneVersion {
		*res = resource{name: res.name, mark: res.mark, keys: res.keys}
		j.owner(res, r)
		if res.owned {
			return nil
		}
	}
	j.leak(s, res)
	return nil
}

// drain judges the records of s that no resource's name has reached,
// unless s is held (its last pass judges them).
func (j *judge) drain(ctx context.Context, s *stream) error {
	if s.held {
		return nil
	}
	for {
		r, err := j.peek(ctx, s)
		if r == nil || err != nil {
			return err
		}
		if err := j.record(ctx, s.pop(), nil); err != nil {
			return err
		}
	}
}

// settle is the last pass, read after the whole inventory: when resources
// are left to settle (stream.rest), every record is read, a page at a
// time in (kind, id) order, to settle their verdicts by mark as the
// records carrying their marks say, and, of a held kind, the records the
// merge had not judged are judged against the held resources.
func (j *judge) settle(ctx context.Context) error {
	if !slices.ContainsFunc(j.streams(), func(s *stream) bool { return len(s.rest) > 0 || s.held }) {
		return nil
	}
	for _, s := range j.streams() {
		slices.SortFunc(s.rest, func(a, b resource) int { return strings.Compare(a.name, b.name) })
		s.rest = slices.Clip(s.rest)
		s.marks = marksOf(s.rest)
	}
	err := eachPage(ctx, j.store, func(page []*engine.Record) error {
		if err := refuseUnreadable(j.store); err != nil {
			return err
		}
		for _, r := range page {
			j.byMark(r)
			s := j.streamOf(r.Kind)
			if s == nil || !s.held || !byNameAfter(r, s.judgedTo) {
				continue
			}
			if byNameAfter(r, s.readTo) {
				j.rep.Records++ // not read by the merge
			}
			var res *resource
			if i, ok := slices.BinarySearchFunc(s.rest, r.ResourceName(), byName); ok {
				res = &s.rest[i]
			}
			if err := j.record(ctx, r, res); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range j.streams() {
		for i := range s.rest {
			if !s.rest[i].owned {
				j.leak(s, &s.rest[i])
			}
		}
	}
	return nil
}

func (j *judge) streamOf(kind engine.Kind) *stream {
	for _, s := range j.streams() {
		if s.kind == kind {
			return s
		}
	}
	return nil
}

// byMark settles, in the last pass, the verdict of the resources left to
// settle that carry r's mark.
func (j *judge) byMark(r *engine.Record) {
	if state(r).Owner == "" {
		return
	}
	h, k, ok := markOf(state(r).Owner)
	if !ok {
		return
	}
	if s := j.streamOf(k); s != nil {
		for _, i := range carrying(s.rest, s.marks, h) {
			j.owner(&s.rest[i], r)
		}
	}
}

func marksOf(rs []resource) []int32 {
	idx := make([]int32, len(rs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return bytes.Compare(rs[a].mark[:], rs[b].mark[:]) })
	return idx
}

// carrying returns the indexes, in rs, of the resources that carry mark.
func carrying(rs []resource, byMark []int32, mark driver.MarkHash) []int32 {
	cmpMark := func(i int32, m driver.MarkHash) int { return bytes.Compare(rs[i].mark[:], m[:]) }
	lo, _ := slices.BinarySearchFunc(byMark, mark, cmpMark)
	hi := lo
	for hi < len(byMark) && rs[byMark[hi]].mark == mark {
		hi++
	}
	return byMark[lo:hi]
}

func byName(res resource, name string) int { return strings.Compare(res.name, name) }
