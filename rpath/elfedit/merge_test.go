package elfedit

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMergeAcrossDirtiedPages: two clearing writes after the commit, with
// a renumbered symbol table between them (the shape of a region plan),
// become one write when at most one page between them is one no write of
// the plan dirties; the merged write shows, between its parts, the bytes
// as they are after the commit (the original, and the symbols). With two
// clean pages between them they stay apart.
func TestMergeAcrossDirtiedPages(t *testing.T) {
	orig := bytes.Repeat([]byte{'o'}, 64<<10)
	f := &File{r: bytes.NewReader(orig), size: int64(len(orig))}
	step := func(k StepKind, off, end int64, fill byte) Step {
		return Step{Kind: k, Off: off, Len: end - off, data: bytes.Repeat([]byte{fill}, int(end-off))}
	}
	for _, tc := range []struct {
		name    string
		symsAt  int64 // the symbols run from here to 20,000
		merged  bool
		cleanPg int64
	}{
		{"one clean page between", 9000, true, 1},
		{"two clean pages between", 13000, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := []Step{
				step(StepUnused, 40000, 41000, 'r'),
				step(StepNeutral, tc.symsAt, 20000, 'S'),
				step(StepCommit, 0, 600, 'H'),
				step(StepHygiene, 20000, 30000, 0),
				step(StepHygiene, 700, 4000, 0),
			}
			assert.Equal(t, tc.cleanPg, unwritten(dirtyPages(steps), 4000, 20000))
			out := f.coalesce(steps)
			if !tc.merged {
				assert.Len(t, out, 5)
				return
			}
			require.Len(t, out, 4)
			h := out[3]
			require.Equal(t, StepHygiene, h.Kind)
			assert.Equal(t, int64(700), h.Off)
			assert.Equal(t, int64(30000-700), h.Len)
			want := bytes.Repeat([]byte{0}, 30000-700)
			copy(want[4000-700:], orig[4000:tc.symsAt])
			copy(want[tc.symsAt-700:], bytes.Repeat([]byte{'S'}, int(20000-tc.symsAt)))
			assert.True(t, bytes.Equal(want, h.data), "the merged write holds the file as it is after the commit between its parts")
		})
	}
}
