package ldso

import (
	"io"
	"strings"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// Format writes t as an indented tree: one line per DT_NEEDED, under the
// object that needs it, as `name => path (step)` or `name => not found`.
// A not-found entry is followed by the candidates that were tried. An
// object already loaded elsewhere is not expanded again.
func (t *Tree) Format(w io.Writer) error {
	children := map[string][]*Need{}
	for _, n := range t.Needs {
		children[n.Requester] = append(children[n.Requester], n)
	}
	ew := &errWriter{w: w}
	ew.printf("%s\n", t.Path)
	seen := map[string]bool{t.Path: true}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		ind := strings.Repeat("    ", depth)
		for _, n := range children[parent] {
			name := n.Name
			if n.Dlopen {
				name = "dlopen " + name
			}
			switch {
			case n.Error != "":
				ew.printf("%s%s => error: %s\n", ind, name, n.Error)
			case !n.Found():
				ew.printf("%s%s => not found\n", ind, name)
				for _, a := range n.Tried {
					ew.printf("%s    tried %s (%s)\n", ind, a.Path, a.describe())
				}
				if n.Note != "" {
					ew.printf("%s    %s\n", ind, n.Note)
				}
				if n.Hint != "" {
					ew.printf("%s    %s\n", ind, n.Hint)
				}
			default:
				ew.printf("%s%s => %s (%s)\n", ind, name, n.Path, n.describe())
				if !n.AlreadyLoaded && !seen[n.Path] {
					seen[n.Path] = true
					walk(n.Path, depth+1)
				}
			}
		}
	}
	walk(t.Path, 1)
	return ew.err
}

func (n *Need) describe() string {
	s := string(n.Step)
	if n.Step == StepRPath && n.RPathOwner != "" {
		s += " of " + n.RPathOwner
	}
	if n.Step == StepNote {
		if len(n.Tried) > 0 {
			if e := n.Tried[len(n.Tried)-1].Element; e != "" && e[0] == '?' {
				s += " " + e
			}
		}
		s += " of " + n.Requester
	}
	if n.Step == StepRunPath {
		s += " of " + n.Requester
	}
	if n.Note != "" {
		s += "; " + n.Note
	}
	if n.AlreadyLoaded && n.Step != StepLoaded && n.Step != StepInterp {
		s += ", already loaded"
	}
	return s
}

func (a *Attempt) describe() string {
	s := string(a.Step)
	if a.Step == StepNote && a.Element != "" && a.Element[0] == '?' {
		s += " " + a.Element
	}
	if a.Owner != "" {
		s += " of " + a.Owner
	}
	return s + ": " + a.Result
}

type errWriter struct {
	w   io.Writer
	err error
}

// printf writes a line of the tree, its names and paths escaped: they
// are the files' (printable).
func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = printable.Fprintf(e.w, format, args...)
	}
}
