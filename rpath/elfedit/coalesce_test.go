package elfedit_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestPlanWritesCoalesced plans the main job's edit (a RUNPATH, a new
// interpreter for executables, the resolution note) for every dynamic
// variant of the matrix, from a reader that holds every byte, and checks
// the shape coalescing gives a plan: no two writes of one kind in a row
// that touch the same pages (less than a page apart) or that only one page
// no other write dirties lies between, exactly one commit,
// with only unused and neutral writes before it and only hygiene writes
// and truncation after it. That the merged plan is crash-safe and gives
// the right file is TestCrash's and TestWriteFailure's business.
func TestPlanWritesCoalesced(t *testing.T) {
	t.Parallel()
	const page = 4096
	for _, fx := range dynamic(t) {
		for _, path := range append([]string{fx.Exe}, fx.Libs...) {
			b := readFile(t, path)
			f, err := elfedit.NewFile(bytes.NewReader(b), int64(len(b)))
			require.NoError(t, err)
			e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("coal", 200), Derived: []elfedit.NoteID{cacheID}}
			if f.Info().Interpreter != "" {
				e.Interpreter = str(longInterp(t, fx, 60))
			}
			p, err := f.Plan(e)
			require.NoError(t, err, "%s %s", fx.Name, path)
			what := fx.Name + " " + path + ": " + planString(p)
			commits, seen := 0, false
			for i, s := range p.Steps {
				switch s.Kind {
				case elfedit.StepCommit:
					commits++
					seen = true
				case elfedit.StepUnused, elfedit.StepNeutral:
					assert.False(t, seen, "%s: step %d (%s) after the commit", what, i, s.Kind)
				case elfedit.StepHygiene:
					assert.True(t, seen, "%s: step %d (hygiene) before the commit", what, i)
				}
				if i == 0 || s.Kind == elfedit.StepCommit || s.Kind == elfedit.StepTruncate {
					continue
				}
				prev := p.Steps[i-1]
				if prev.Kind != s.Kind {
					continue
				}
				lo, hi := min(prev.Off, s.Off), max(prev.Off, s.Off)
				end := prev.Off + prev.Len
				if prev.Off > s.Off {
					end = s.Off + s.Len
				}
				if hi <= p.OldSize {
					assert.GreaterOrEqual(t, hi-end, int64(page), "%s: steps %d and %d (%s) lie %d bytes apart from 0x%x", what, i-1, i, s.Kind, hi-end, lo)
					// Apart, they leave at least two pages between them
					// that no write of the plan dirties (or would make a
					// write past a MiB).
					free := 0
					for pg := end / page; pg <= (hi-1)/page; pg++ {
						if !dirties(p, pg*page, page) {
							free++
						}
					}
					assert.True(t, free >= 2 || max(hi, s.Off+s.Len, prev.Off+prev.Len)-lo > 1<<20,
						"%s: steps %d and %d (%s) apart with %d clean pages between them", what, i-1, i, s.Kind, free)
				}
			}
			assert.Equal(t, 1, commits, what)
		}
	}
}

// dirties reports whether a write of p touches [off, off+n).
func dirties(p *elfedit.Plan, off, n int64) bool {
	for _, st := range p.Steps {
		if st.Kind != elfedit.StepTruncate && st.Off < off+n && off < st.Off+st.Len {
			return true
		}
	}
	return false
}
