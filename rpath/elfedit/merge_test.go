package elfedit

import (
	"bytes"
	"slices"
	"strings"
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
				// The commit lies after the clearing writes in the file,
				// so it takes in none of them (joinCommit).
				step(StepCommit, 60000, 60600, 'H'),
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

// TestCommitTakesTheHygieneAfterIt: hygiene writes that follow the commit
// in the file, touching it or near it, are written with it, after its
// bytes, the bytes between as they are after the steps before the commit;
// hygiene before the commit in the file, or two clean pages past it, stays
// a write of its own, and so does everything when a hygiene write left
// apart overlaps one that would be joined (it would run after it and win).
func TestCommitTakesTheHygieneAfterIt(t *testing.T) {
	orig := bytes.Repeat([]byte{'o'}, 2<<20)
	f := &File{r: bytes.NewReader(orig), size: int64(len(orig))}
	step := func(k StepKind, off, end int64, fill byte) Step {
		return Step{Kind: k, What: string(k), Off: off, Len: end - off, data: bytes.Repeat([]byte{fill}, int(end-off))}
	}
	// joined is the commit write expected: the commit's bytes, then each
	// part over the original.
	joined := func(lo, hi int64, parts ...Step) Step {
		b := slices.Clone(orig[lo:hi])
		var whats []string
		for _, p := range parts {
			copy(b[p.Off-lo:], p.data)
			if p.Kind != StepNeutral {
				whats = append(whats, p.What)
			}
		}
		return Step{Kind: StepCommit, What: strings.Join(whats, "; "), Off: lo, Len: hi - lo, data: b}
	}
	unused := step(StepUnused, 40000, 41000, 'r')
	neutral := step(StepNeutral, 1000, 1100, 'N')
	commit := step(StepCommit, 0, 600, 'H')
	for _, tc := range []struct {
		name  string
		steps []Step
		want  []Step
	}{
		{
			"hygiene right after the commit",
			[]Step{unused, commit, step(StepHygiene, 700, 4000, 0)},
			[]Step{unused, joined(0, 4000, commit, step(StepHygiene, 700, 4000, 0))},
		},
		{
			"the bytes between show the neutral write before the commit",
			[]Step{neutral, commit, step(StepHygiene, 2000, 3000, 0), step(StepHygiene, 30000, 31000, 0)},
			[]Step{neutral, joined(0, 3000, neutral, commit, step(StepHygiene, 2000, 3000, 0)), step(StepHygiene, 30000, 31000, 0)},
		},
		{
			"hygiene before the commit in the file",
			[]Step{unused, step(StepCommit, 8000, 8600, 'H'), step(StepHygiene, 700, 4000, 0)},
			[]Step{unused, step(StepCommit, 8000, 8600, 'H'), step(StepHygiene, 700, 4000, 0)},
		},
		{
			"two clean pages after the commit",
			[]Step{commit, step(StepHygiene, 12300, 13000, 0)},
			[]Step{commit, step(StepHygiene, 12300, 13000, 0)},
		},
		{
			"a hygiene write left apart overlaps one that would join",
			[]Step{commit, step(StepHygiene, 700, 900_000, 0), step(StepHygiene, 800_000, 1_900_000, 0)},
			[]Step{commit, step(StepHygiene, 700, 900_000, 0), step(StepHygiene, 800_000, 1_900_000, 0)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := f.coalesce(tc.steps)
			require.Len(t, out, len(tc.want))
			for i, w := range tc.want {
				g := out[i]
				assert.Equal(t, w.Kind, g.Kind, "step %d", i)
				assert.Equal(t, w.What, g.What, "step %d", i)
				assert.Equal(t, [2]int64{w.Off, w.Len}, [2]int64{g.Off, g.Len}, "step %d: offset and length", i)
				assert.True(t, bytes.Equal(w.data, g.data), "step %d: bytes", i)
			}
		})
	}
}

// TestUnusedAndNeutralMerge: an unused write inside the file (the padding
// layout's new string table) and a neutral one near it (the extended
// first PT_LOAD) become one neutral write before the commit, the bytes
// between as they were; a region past the old end stays apart, and so do
// writes of the two kinds a page or more apart, even over pages the plan
// dirties anyway.
func TestUnusedAndNeutralMerge(t *testing.T) {
	orig := bytes.Repeat([]byte{'o'}, 64<<10)
	f := &File{r: bytes.NewReader(orig), size: int64(len(orig))}
	step := func(k StepKind, off, end int64, fill byte) Step {
		return Step{Kind: k, What: string(k), Off: off, Len: end - off, data: bytes.Repeat([]byte{fill}, int(end-off))}
	}
	commit := step(StepCommit, 15944, 16328, 'D')
	hygiene := step(StepHygiene, 760, 998, 0)

	out := f.coalesce([]Step{step(StepUnused, 1168, 1429, 'n'), step(StepNeutral, 64, 120, 'P'), step(StepNeutral, 30000, 30064, 'S'), commit, hygiene})
	require.Len(t, out, 4, "%v", out)
	m := out[0]
	assert.Equal(t, StepNeutral, m.Kind)
	assert.Equal(t, int64(64), m.Off)
	assert.Equal(t, int64(1429-64), m.Len)
	want := bytes.Clone(orig[64:1429])
	copy(want, bytes.Repeat([]byte{'P'}, 56))
	copy(want[1168-64:], bytes.Repeat([]byte{'n'}, 1429-1168))
	assert.True(t, bytes.Equal(want, m.data), "the original bytes between")
	assert.Equal(t, []StepKind{StepNeutral, StepNeutral, StepCommit, StepHygiene}, kinds(out))

	// A region past the old end: apart.
	out = f.coalesce([]Step{step(StepUnused, 64<<10, 66<<10, 'r'), step(StepNeutral, 63<<10, 64<<10, 'S'), commit, hygiene})
	assert.Equal(t, []StepKind{StepUnused, StepNeutral, StepCommit, StepHygiene}, kinds(out))
	// Two kinds 5,000 bytes apart, the pages between cleared later: apart.
	out = f.coalesce([]Step{step(StepUnused, 6000, 6100, 'n'), step(StepNeutral, 64, 1000, 'P'), commit, step(StepHygiene, 1000, 6000, 0)})
	assert.Equal(t, []StepKind{StepUnused, StepNeutral, StepCommit, StepHygiene}, kinds(out))
}

func kinds(steps []Step) []StepKind {
	var out []StepKind
	for _, st := range steps {
		out = append(out, st.Kind)
	}
	return out
}
