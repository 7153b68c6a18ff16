package elfedit_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// oldStorePath is a search path entry every convergence case's file holds
// before its edit: a store path that, left anywhere in the file after an
// edit replaced it, would keep its package in the closure.
const oldStorePath = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-OLDMARKER/lib"

// killTarget is the file of a process killed after its k-th write: the
// writes (WriteAt and Truncate, each one system call) after the k-th
// never reach the file, and nothing is rolled back. Sync does nothing (a
// kill loses nothing the kernel has), but Apply takes the path it takes
// with sync, which splits a commit that took in hygiene into two writes.
type killTarget struct {
	*os.File
	k, n int
}

func (t *killTarget) WriteAt(b []byte, off int64) (int, error) {
	if t.n++; t.n > t.k {
		return len(b), nil
	}
	return t.File.WriteAt(b, off)
}

func (t *killTarget) Truncate(size int64) error {
	if t.n++; t.n > t.k {
		return nil
	}
	return t.File.Truncate(size)
}

func (t *killTarget) Sync() error { return nil }

// convergeCase is one edit of one file whose every crash point
// TestCrashConverges checks.
type convergeCase struct {
	crashCase
	// storePath: the file's search path holds oldStorePath before the
	// edit, which replaces it.
	storePath bool
	// layouts are the strategies the plan may take ("" for any, as for
	// crashCase, which checks its own); truncates: its last step cuts
	// an old region away.
	layouts   []elfedit.Strategy
	truncates bool
}

// convergeCases are TestCrash's layouts, and each layout class (in
// place, slack, region, the program header table moved into the region,
// a note written and replaced, a second and a third edit of an edited
// file) on the x86_64 linkers and a 32-bit and a big-endian variant, from
// a search path that holds a store path.
func convergeCases() []convergeCase {
	var out []convergeCase
	for _, c := range crashCases() {
		out = append(out, convergeCase{crashCase: c})
	}
	lib := func(n int) func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
			if n == 0 {
				return elfedit.Edit{SetPath: str(originLib)}
			}
			return elfedit.Edit{SetPath: str(pad(n, fx.LibDir))}
		}
	}
	note := func(marker string, n int) func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote(marker, n), Derived: []elfedit.NoteID{cacheID}}
		}
	}
	// A longer SONAME with each edit makes it a region; the first
	// region is the largest, so the third, smaller than the slot the
	// first leaves before the second, goes there, and the file is cut
	// back.
	soname := func(n, k int) func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetPath: str(pad(n, fx.LibDir)), Soname: str(fmt.Sprintf("libfoo-%d-%s.so", k, strings.Repeat("x", 40*k)))}
		}
	}
	// Linkers that leave no padding after the first PT_LOAD (lld, mold)
	// take a region where the others take the slack.
	region, slackOr := []elfedit.Strategy{elfedit.Region}, []elfedit.Strategy{elfedit.Slack, elfedit.Region}
	classes := []convergeCase{
		{crashCase: crashCase{name: "in-place", edit: lib(0)}, layouts: []elfedit.Strategy{elfedit.InPlace}},
		{crashCase: crashCase{name: "slack", edit: lib(200)}, layouts: slackOr},
		{crashCase: crashCase{name: "region", edit: lib(4096)}, layouts: region},
		{crashCase: crashCase{name: "phdr-in-region", prep: dropSections, edit: lib(4096)}, layouts: region},
		{crashCase: crashCase{name: "note", edit: note("kkkk", 200)}, layouts: region},
		{crashCase: crashCase{name: "note-again", prep: editWith(note("llll", 100)), edit: note("mmmm", 2000)}, layouts: region},
		{crashCase: crashCase{name: "re-edit", prep: editWith(lib(4096)), edit: lib(5000)}, layouts: region},
		{crashCase: crashCase{name: "re-edit-truncate", prep: editWith(lib(9000), soname(4096, 1)), edit: soname(100, 2)}, layouts: region, truncates: true},
		{crashCase: crashCase{name: "near-page", prep: endNearPage(9), edit: lib(4096)}, layouts: region},
	}
	for _, v := range []string{"bfd-pie", "bfd-nopie", "gold-pie", "lld-pie", "mold-pie", "i686-bfd-pie", "s390x-bfd-pie"} {
		for _, c := range classes {
			c.name, c.variant, c.lib, c.storePath = v+"/"+c.name, v, true, true
			out = append(out, c)
		}
	}
	return out
}

// endNearPage returns a prep step that copies the section header table to
// the file's end, after as many zeros as make the file end k bytes before
// a page boundary (0 < k < 16): its contents end there too, and a
// reservation's write cut at that boundary leaves fewer bytes than one
// unit of its pattern.
func endNearPage(k int64) func(*testing.T, fixtures.Fixture, string) {
	return func(t *testing.T, _ fixtures.Fixture, path string) {
		b := readFile(t, path)
		o, class := headerCoding(t, b)
		shoff, at := o.Uint64(b[40:]), 40
		shsize := int64(o.Uint16(b[58:])) * int64(o.Uint16(b[60:]))
		if class == elf.ELFCLASS32 {
			shoff, at = uint64(o.Uint32(b[32:])), 32
			shsize = int64(o.Uint16(b[46:])) * int64(o.Uint16(b[48:]))
		}
		require.NotZero(t, shsize, "the premise: a section header table")
		table := bytes.Clone(b[shoff : int64(shoff)+shsize])
		end := (int64(len(b)) + shsize + k + 4095) / 4096 * 4096 // the page boundary
		at2 := end - k - shsize
		out := append(append(b, make([]byte, at2-int64(len(b)))...), table...)
		if class == elf.ELFCLASS32 {
			o.PutUint32(out[at:], uint32(at2))
		} else {
			o.PutUint64(out[at:], uint64(at2))
		}
		require.Equal(t, 4096-k, int64(len(out))%4096)
		require.NoError(t, os.WriteFile(path, out, 0o755))
	}
}

// countTarget counts the writes a plan makes.
type countTarget struct {
	*os.File
	n int
}

func (t *countTarget) WriteAt(b []byte, off int64) (int, error) { t.n++; return t.File.WriteAt(b, off) }
func (t *countTarget) Truncate(size int64) error                { t.n++; return t.File.Truncate(size) }
func (t *countTarget) Sync() error                              { return nil }

// TestCrashConverges kills the write of each case's edit after each of
// its writes (with and without sync, whose commit may take two) and runs
// the edit again, as the main job does (Prepare, then EditFile with the
// prepared plan when it is not a no-op). The killed file must load as the
// original or the result, and the second run must leave exactly the
// bytes one run leaves: no old store path, no second region, no section
// header or symbol that disagrees.
func TestCrashConverges(t *testing.T) {
	t.Parallel()
	for _, c := range convergeCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx, path, prepared, e := convergeSetup(t, c)
			for _, sync := range []bool{false, true} {
				clean, writes, p := convergeApply(t, path, prepared, e, sync, -1)
				if c.layouts != nil {
					require.Contains(t, c.layouts, p.Strategy, planString(p))
				}
				if c.truncates {
					require.Equal(t, elfedit.StepTruncate, p.Steps[len(p.Steps)-1].Kind, planString(p))
				}
				if c.storePath && bytes.Contains(clean, []byte(oldStorePath)) {
					t.Fatalf("a clean run leaves %s in the file", oldStorePath)
				}
				for k := 0; k < writes; k++ {
					convergeApply(t, path, prepared, e, sync, k)
					convergedAfter(t, fx, c.lib, path, e, clean, fmt.Sprintf("sync %v, killed after write %d of %d", sync, k, writes))
				}
			}
		})
	}
}

// convergeSetup makes a fresh copy of the case's variant and prepares the
// file under test, as crashSetup does.
func convergeSetup(t *testing.T, c convergeCase) (fixtures.Fixture, string, []byte, elfedit.Edit) {
	t.Helper()
	fx := fixtures.ByName(t, c.variant).Copy(t)
	path := fx.Exe
	libPath, mainPath := preLib, preMain
	if c.storePath {
		libPath, mainPath = originLib+":"+oldStorePath, originMain+":"+oldStorePath
	}
	if !fx.Static {
		_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(libPath)}, elfedit.Options{})
		require.NoError(t, err)
	}
	if c.lib {
		path = fx.Libs[0]
	} else if !fx.Static {
		_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(mainPath)}, elfedit.Options{})
		require.NoError(t, err)
	}
	if c.prep != nil {
		c.prep(t, fx, path)
	}
	return fx, path, readFile(t, path), c.edit(t, fx)
}

// convergeApply writes the prepared bytes to path, plans e from them and
// applies the plan, killed after write k (k < 0: not killed). It returns
// the file's bytes, the writes the plan made and the plan.
func convergeApply(t *testing.T, path string, prepared []byte, e elfedit.Edit, sync bool, k int) ([]byte, int, *elfedit.Plan) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, prepared, 0o755))
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	p, err := f.Plan(e)
	require.NoError(t, err)
	require.False(t, p.IsNoOp(), "the edit changes nothing")
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer w.Close()
	var n int
	if k < 0 {
		ct := &countTarget{File: w}
		require.NoError(t, p.Apply(ct, sync))
		n = ct.n
	} else {
		require.NoError(t, p.Apply(&killTarget{File: w, k: k}, sync))
	}
	return readFile(t, path), n, p
}

// rerun edits path again the way the main job does: it prepares a plan,
// and writes the file when the plan is not a no-op.
func rerun(t *testing.T, path string, e elfedit.Edit) {
	t.Helper()
	var b elfedit.Batch
	f, err := b.OpenForEdit(path)
	require.NoError(t, err)
	p, err := b.Prepare(f, e, nil)
	require.NoError(t, err, "planning the next run")
	require.NoError(t, f.Close())
	if !p.Changed() {
		p.Close()
		return
	}
	_, err = p.Commit(elfedit.Options{})
	require.NoError(t, err, "the next run")
}

// differs says how got differs from want, which name names.
func differs(got, want []byte, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bytes, %s %d", len(got), name, len(want))
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			fmt.Fprintf(&b, "; first difference at 0x%x", i)
			break
		}
	}
	if bytes.Contains(got, []byte(oldStorePath)) {
		b.WriteString("; the old store path is still in it")
	}
	return b.String()
}

// tornTarget is the file of a process killed in the middle of its k-th
// write (1-based): the writes before it reach the file whole, that one
// up to the file offset cut (a page boundary inside it: the kernel copies
// a write page by page and stops for a fatal signal only between pages),
// the ones after it not at all.
type tornTarget struct {
	*os.File
	k, n int
	cut  int64
	// spans records each write's [off, end), for the cut points.
	spans [][2]int64
}

func (t *tornTarget) WriteAt(b []byte, off int64) (int, error) {
	t.n++
	t.spans = append(t.spans, [2]int64{off, off + int64(len(b))})
	switch {
	case t.k == 0 || t.n < t.k:
		return t.File.WriteAt(b, off)
	case t.n == t.k && t.cut > off && t.cut < off+int64(len(b)):
		return t.File.WriteAt(b[:t.cut-off], off)
	}
	return len(b), nil
}

func (t *tornTarget) Truncate(size int64) error {
	t.n++
	t.spans = append(t.spans, [2]int64{})
	if t.k == 0 || t.n < t.k {
		return t.File.Truncate(size)
	}
	return nil
}

func (t *tornTarget) Sync() error { return nil }

// pageCuts lists where a kill may cut a write of [off, end): its page
// boundaries, at most the first, a middle one and the last.
func pageCuts(off, end int64) []int64 {
	first := (off/4096 + 1) * 4096
	last := (end - 1) / 4096 * 4096
	if first >= end || last <= off {
		return nil
	}
	cuts := []int64{first}
	if mid := (first + last) / 2 / 4096 * 4096; mid > first && mid < last {
		cuts = append(cuts, mid)
	}
	if last > first {
		cuts = append(cuts, last)
	}
	return cuts
}

// convergedAfter checks a killed file, what says how it was killed: it
// must load as the original or the result, and the next run must leave
// the bytes of a clean run. It stops the test at the first failure,
// keeping the fixture.
func convergedAfter(t *testing.T, fx fixtures.Fixture, lib bool, path string, e elfedit.Edit, clean []byte, what string) {
	t.Helper()
	if err := works(t, fx, lib, path); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	rerun(t, path, e)
	if got := readFile(t, path); !bytes.Equal(got, clean) {
		t.Errorf("%s: the next run leaves %s", what, differs(got, clean, "a clean run"))
	}
	if t.Failed() {
		keepOnFailure(t, fx)
		t.FailNow()
	}
}

// TestTornWriteConverges kills the write of each case's edit in the middle
// of each of its writes that spans a page boundary, the journal's own
// among them, and runs the edit again: the killed file must load as the
// original or the result, and the next run leave exactly the bytes of one
// clean run (no bytes of a journal whose write was cut left past the old
// end).
func TestTornWriteConverges(t *testing.T) {
	t.Parallel()
	var cases []convergeCase
	for _, c := range convergeCases() {
		switch c.name {
		case "bfd-pie/slack", "bfd-pie/region", "bfd-pie/note-again", "bfd-pie/re-edit-truncate", "lld-pie/region",
			"s390x-bfd-pie/re-edit", "i686-bfd-pie/phdr-in-region", "mold-pie/note",
			"bfd-pie/near-page", "i686-bfd-pie/near-page", "s390x-bfd-pie/near-page":
			cases = append(cases, c)
		}
	}
	require.Len(t, cases, 11)
	torn := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { torn += tornConverges(t, c) })
	}
	require.NotZero(t, torn, "no write spans a page boundary")
}

// tornConverges cuts each write of c's edit that spans a page boundary at
// each of pageCuts, and checks the next run converges (convergedAfter),
// with and without sync; it returns how many cuts it made.
func tornConverges(t *testing.T, c convergeCase) int {
	t.Helper()
	torn := 0
	fx, path, prepared, e := convergeSetup(t, c)
	for _, sync := range []bool{false, true} {
		clean, _, _ := convergeApply(t, path, prepared, e, sync, -1)
		probe := tornApply(t, path, prepared, e, sync, 0, 0)
		for k, sp := range probe.spans {
			for _, cut := range pageCuts(sp[0], sp[1]) {
				torn++
				tornApply(t, path, prepared, e, sync, k+1, cut)
				convergedAfter(t, fx, c.lib, path, e, clean, fmt.Sprintf("sync %v, killed in write %d of %d (0x%x-0x%x) at 0x%x", sync, k+1, len(probe.spans), sp[0], sp[1], cut))
			}
		}
	}
	return torn
}

// TestTornWriteConvergesNearPage is TestTornWriteConverges's near-page
// case for every distance k (0 < k < 16) of the old end before a page
// boundary, the reservation's write cut at that boundary among the cuts:
// k bytes of the pattern are left, fewer than one unit (1 to 8: only the
// magic's first bytes; 9 to 15: some of the old end's too), and the next
// run must cut them, leaving the bytes of one clean run. x86_64 for every
// k; the 32-bit and the big-endian variant at both ends of the range.
func TestTornWriteConvergesNearPage(t *testing.T) {
	t.Parallel()
	base := map[string]convergeCase{}
	for _, c := range convergeCases() {
		if v, ok := strings.CutSuffix(c.name, "/near-page"); ok {
			base[v] = c
		}
	}
	for _, v := range []string{"bfd-pie", "i686-bfd-pie", "s390x-bfd-pie"} {
		require.Contains(t, base, v)
		for k := int64(1); k < 16; k++ {
			if v != "bfd-pie" && k != 1 && k != 15 {
				continue
			}
			c := base[v]
			c.name, c.prep = fmt.Sprintf("%s/near-page-%d", v, k), endNearPage(k)
			t.Run(c.name, func(t *testing.T) {
				cuts := tornConverges(t, c)
				require.NotZero(t, cuts, "no write spans a page boundary")
			})
		}
	}
}

// tornApply writes the prepared bytes to path, plans e from them and
// applies the plan, its k-th write cut at cut (k 0: whole), and returns
// the target, which lists the writes.
func tornApply(t *testing.T, path string, prepared []byte, e elfedit.Edit, sync bool, k int, cut int64) *tornTarget {
	t.Helper()
	require.NoError(t, os.WriteFile(path, prepared, 0o755))
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	p, err := f.Plan(e)
	require.NoError(t, err)
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer w.Close()
	tt := &tornTarget{File: w, k: k, cut: cut}
	require.NoError(t, p.Apply(tt, sync))
	return tt
}
