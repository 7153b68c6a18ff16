package symcheck

import (
	"fmt"
	"io"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// Format writes r as text: the load order, then, for each object, its
// version needs and its references with the library that provides each,
// and last a summary line. A failure says when the loader fails and in its
// own words.
func (r *Result) Format(w io.Writer) error {
	ew := &errWriter{w: w}
	p := printable.String
	ew.printf("%s\n", p(r.Path))
	if r.Unsupported != "" {
		ew.printf("  symbols not checked: %s\n", r.Unsupported)
		return ew.err
	}
	ew.printf("  load order:\n")
	for i, o := range r.Objects {
		extra := ""
		switch {
		case o.StandIn != "":
			extra = " (checked against " + p(o.StandIn) + ")"
		case o.Opaque:
			extra = " (not read: its symbols are not checked)"
		}
		if o.BindNow {
			extra += " (bind now)"
		}
		ew.printf("    %d %s%s\n", i, p(o.Path), extra)
	}
	counts := map[Status]int{}
	for _, o := range r.Objects {
		hdr := false
		head := func() {
			if !hdr {
				ew.printf("  %s\n", p(o.Path))
				hdr = true
			}
		}
		for _, v := range r.Versions {
			if v.Object != o.Path {
				continue
			}
			counts[v.Status]++
			head()
			switch v.Status {
			case FailsAtLoad:
				ew.printf("    version %s of %s: NOT FOUND in %s: fails at load: version `%s' not found (required by %s)\n", p(v.Version), p(v.File), p(v.Provider), p(v.Version), p(v.Object))
			case Unchecked:
				ew.printf("    version %s of %s: not checked (library missing or not read)\n", p(v.Version), p(v.File))
			case NoVersionInfo:
				ew.printf("    version %s of %s: %s has no version information (accepted)\n", p(v.Version), p(v.File), p(v.Provider))
			case WeakUnbound:
				ew.printf("    version %s of %s: weak, not in %s (accepted)\n", p(v.Version), p(v.File), p(v.Provider))
			default:
				ew.printf("    version %s of %s => %s\n", p(v.Version), p(v.File), p(v.Provider))
			}
		}
		for _, b := range r.Symbols {
			if b.Object != o.Path {
				continue
			}
			counts[b.Status]++
			head()
			name := p(b.Name)
			if b.Version != "" {
				name += "@" + p(b.Version)
			}
			switch b.Status {
			case Bound:
				pv := ""
				if b.ProviderVersion != "" && b.ProviderVersion != b.Version {
					pv = " as @" + p(b.ProviderVersion)
				}
				ew.printf("    %s (%s) => %s%s\n", name, b.Use, p(b.Provider), pv)
			case WeakUnbound:
				ew.printf("    %s (%s, weak) => none (left zero, not an error)\n", name, b.Use)
			case Unchecked:
				ew.printf("    %s (%s) => not checked (library missing or not read)\n", name, b.Use)
			case FailsAtLoad:
				ew.printf("    %s (%s) => NOT FOUND: fails at load: %s\n", name, b.Use, p(b.Message))
			case FailsWhenCalled:
				ew.printf("    %s (%s) => NOT FOUND: fails when called: %s\n", name, b.Use, p(b.Message))
			}
		}
	}
	for _, n := range r.Incomplete {
		ew.printf("  not checked against %s: missing or not read\n", p(n))
	}
	ew.printf("  %d bound, %d weak unbound, %d unchecked, %d fail at load, %d fail when called\n",
		counts[Bound]+counts[NoVersionInfo], counts[WeakUnbound], counts[Unchecked], counts[FailsAtLoad], counts[FailsWhenCalled])
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
