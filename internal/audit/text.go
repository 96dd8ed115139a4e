package audit

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText writes the report for a person: a summary line, a table of
// findings, and what was not judged and why.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Audit of name prefix %q: %d marked buckets, %d marked users, %d records.\n", r.Prefix, r.Buckets, r.Users, r.Records)
	if len(r.Findings) == 0 {
		fmt.Fprintln(tw, "No drift: every marked resource has its live record, and every ready record its resources.")
	} else {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "KIND\tRESOURCE\tNAME\tRECORD\tDETAIL\tACTION")
		for _, f := range r.Findings {
			name := f.Name
			if f.User != "" {
				name += " (user " + f.User + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, f.Resource, name, dash(f.Record), f.Detail, dash(f.Action))
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "Not judged:")
		for _, s := range r.Skipped {
			what := s.Record
			if what == "" {
				what = s.Resource + " " + s.Name
			}
			fmt.Fprintf(tw, "  %s: %s\n", what, s.Reason)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, r.summary())
	return tw.Flush()
}

func (r *Report) summary() string {
	counts := map[Kind]int{}
	remaining, fixed := 0, 0
	for _, f := range r.Findings {
		counts[f.Kind]++
		if f.Fixed {
			fixed++
		} else {
			remaining++
		}
	}
	s := fmt.Sprintf("%d findings: %d leaks, %d missing, %d unknown keys", len(r.Findings), counts[KindLeak], counts[KindMissing], counts[KindUnknownKey])
	if counts[KindMarkLost] > 0 {
		s += fmt.Sprintf(", %d with their owner mark lost", counts[KindMarkLost])
	}
	if counts[KindDiffers] > 0 {
		s += fmt.Sprintf(", %d differing upstream", counts[KindDiffers])
	}
	s += "."
	if r.Fixed {
		s += fmt.Sprintf(" Fixed %d; %d remain.", fixed, remaining)
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
