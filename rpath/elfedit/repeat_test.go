package elfedit_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// regionSize is the size of the largest block of bytes a plan adds (the
// region, with its copy of the section header table), 0 if it adds none.
func regionSize(p *elfedit.Plan) int64 {
	var n int64
	for _, s := range p.Steps {
		if s.Kind == elfedit.StepUnused {
			n = max(n, s.Len)
		}
	}
	return n
}

// TestRepeatedEdits edits the RUNPATH of one executable 200 times with
// lengths from 14 bytes to 9 KiB, and its interpreter every fifth time;
// most edits also write a resolution-cache note of up to 3 KiB, some
// remove it, and the others make it stale (Derived). After
// every edit the file must read back with the new values, keep no copy of the
// replaced ones, and Verify must find nothing new; every 20th edit main must
// run and readelf must not complain.
//
// Repeated edits reuse space: a region goes into the slot between the end of
// the original file (base) and the live region when it fits, which drops
// the live one (truncate), else right after the live region. So the file
// never grows without bound; the bound asserted is
//
//	size <= original size + 3 × largest region + 2 × page size
//
// (page size: the machine's largest, 64 KiB for aarch64). A region N goes
// after the live one L only when the slot g before L is smaller than N,
// so the file is at most base + g + L + N + alignment < base + 2N + L + 2
// pages. No placement that keeps the live region intact until the commit
// can promise 2 × largest: regions a < b < c with c just above the offset b
// went to force base + a + b + c or worse.
func TestRepeatedEdits(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bfd-pie", "bfd-nopie", "lld-pie", "mold-nopie", "gold-pie", "i686-bfd-pie", "aarch64-bfd-pie", "s390x-bfd-pie"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := fixtures.ByName(t, name).Copy(t)
			_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(originLib)}, elfedit.Options{})
			require.NoError(t, err)
			exe := fx.Exe
			origSize := int64(len(readFile(t, exe)))
			origProbs := problems(t, exe)
			page := pageSize(info(t, exe))
			interps := []string{info(t, exe).Interpreter, longInterp(t, fx, 60), longInterp(t, fx, 300), longInterp(t, fx, 1000)}
			lengths := []int{0, 30, 200, 1000, 4096, 9000}
			// The region one edit of the original with the longest values
			// takes: a later edit's region may not be larger (the string
			// table must not keep the values of earlier edits).
			orig := readFile(t, exe)
			of, err := elfedit.NewFile(bytes.NewReader(orig), int64(len(orig)))
			require.NoError(t, err)
			longest, err := of.Plan(elfedit.Edit{SetPath: str(pad(9000+99, fx.LibDir)), Interpreter: str(interps[3]), SetNote: cacheNote("zzzz", 3000)})
			require.NoError(t, err)
			oneShot := regionSize(longest)
			rng := rand.New(rand.NewPCG(1, 2))
			var largest int64
			strategies := map[elfedit.Strategy]int{}
			for i := range 200 {
				var e elfedit.Edit
				if n := lengths[rng.IntN(len(lengths))]; n == 0 {
					e.SetPath = str(originMain)
				} else {
					e.SetPath = str(pad(n+rng.IntN(100), fx.LibDir))
				}
				if i%5 == 0 {
					e.Interpreter = str(interps[rng.IntN(len(interps))])
				}
				// The resolution cache: rewritten with most edits, removed
				// now and then, and dropped as stale by the others.
				e.Derived = []elfedit.NoteID{cacheID}
				switch k := rng.IntN(10); {
				case k < 6:
					e.SetNote = cacheNote(fmt.Sprintf("r%03d", i), 60+rng.IntN(2940))
				case k == 6:
					e.RemoveNotes = []elfedit.NoteID{cacheID}
				}
				before := info(t, exe)
				m := modelOf(t, exe)
				m.dead = nil
				res, err := elfedit.EditFile(exe, e, elfedit.Options{})
				require.NoError(t, err, "edit %d", i)
				m.apply(e, isDerivedChange(before, e))
				checkNotesModel(t, exe, m, true)
				strategies[res.Plan.Strategy]++
				largest = max(largest, regionSize(res.Plan))
				after := expect(before, e)
				checkWant(t, exe, after)
				noStale(t, exe, wantOf(before), after)
				noNewProblems(t, origProbs, exe)
				st, err := os.Stat(exe)
				require.NoError(t, err)
				require.LessOrEqual(t, largest, oneShot, "edit %d: a region outgrew that of one edit with the longest values", i)
				bound := origSize + 3*oneShot + 2*page
				require.LessOrEqual(t, st.Size(), bound, "edit %d: file grew past original %d + 3 × region %d + 2 × page %d", i, origSize, oneShot, page)
				if i%20 == 19 {
					require.NoError(t, runs(t, fx)(exe), "edit %d", i)
					_, rerr := fixtures.Readelf(t, exe)
					assert.Empty(t, rerr, "edit %d: readelf warnings", i)
				}
				if t.Failed() {
					t.Logf("edit %d: %s", i, planString(res.Plan))
					keepOnFailure(t, fx)
					t.FailNow()
				}
			}
			t.Logf("strategies %v, largest region %d bytes, final size %d (original %d)", strategies, largest, fileSize(t, exe), origSize)
			assert.Positive(t, strategies[elfedit.Region], "no edit took the region layout")
		})
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// pageSize is the largest page size of the machine, which a region's
// alignment may cost: 64 KiB wherever a kernel may run with 64 KiB pages.
func pageSize(in elfedit.Info) int64 {
	switch in.Machine {
	case "EM_AARCH64", "EM_PPC64", "EM_PPC", "EM_ARM", "EM_LOONGARCH", "EM_MIPS", "EM_IA_64":
		return 0x10000
	}
	return 0x1000
}
