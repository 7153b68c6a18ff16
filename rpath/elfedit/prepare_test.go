package elfedit_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestPrepared: a plan Batch.Prepare kept, detached from its file, is
// what the commit writes when the file still reads the same, for the same
// edit; a file changed since, or another edit, is planned afresh. Either
// way the file ends with the values of the edit the commit was given,
// runs, and Verify finds nothing new.
func TestPrepared(t *testing.T) {
	t.Parallel()
	prepare := func(t *testing.T, path string, e elfedit.Edit) *elfedit.Pending {
		f, err := elfedit.Open(path)
		require.NoError(t, err)
		defer f.Close()
		p, err := new(elfedit.Batch).Prepare(f, e, nil)
		require.NoError(t, err)
		require.True(t, p.Kept(), "a small file read through the cache: %s", pendingString(p))
		require.True(t, elfedit.KeptPlan(p).Prepared(), "a small file read through the cache: %s", pendingString(p))
		return p
	}
	for _, c := range []struct {
		name   string
		change func(t *testing.T, fx fixtures.Fixture, path string) // between Prepare and Commit
		other  bool                                                 // the commit gets another edit
		reused bool
	}{
		{name: "unchanged", reused: true},
		{name: "changed", change: func(t *testing.T, fx fixtures.Fixture, path string) {
			_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(pad(100, fx.LibDir))}, elfedit.Options{})
			require.NoError(t, err)
		}},
		{name: "same-size-rewrite", change: func(t *testing.T, _ fixtures.Fixture, path string) {
			b := readFile(t, path)
			b[len(b)/2] ^= 0xff // in the head of a small file: bytes the plan read
			require.NoError(t, os.WriteFile(path, b, 0o755))
		}},
		{name: "other-edit", other: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx := runnableCopy(t)
			path := fx.Exe
			e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("prep", 200), Derived: []elfedit.NoteID{cacheID}}
			p := prepare(t, path, e)
			_, err := elfedit.KeptPlan(p).Result()
			assert.Error(t, err, "a detached plan does not read its file")
			if c.change != nil {
				c.change(t, fx, path)
			}
			if c.other {
				e.SetPath = str(pad(200, fx.LibDir))
			}
			writePrepared(t, fx, e, p, c.reused, c.name != "same-size-rewrite")
		})
	}
}

// TestPrepareRefused: keep is asked first with 0, then with the bytes
// the detached plan would hold; a plan it refuses stays tied to its file
// (nothing for the commit to reuse), and the same edit written afresh gives
// the same file as the accepted plan does. A keep that refuses 0 is not
// asked again.
func TestPrepareRefused(t *testing.T) {
	t.Parallel()
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	other := fixtures.ByName(t, "bfd-pie").Copy(t)
	e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("prep", 200), Derived: []elfedit.NoteID{cacheID}}
	prepare := func(path string, keep func(int64) bool) *elfedit.Pending {
		f, err := elfedit.Open(path)
		require.NoError(t, err)
		defer f.Close()
		p, err := new(elfedit.Batch).Prepare(f, e, keep)
		require.NoError(t, err)
		return p
	}
	var asked []int64
	refused := prepare(fx.Exe, func(held int64) bool { asked = append(asked, held); return held == 0 })
	assert.False(t, refused.Kept(), "refused: %s", pendingString(refused))
	assert.Zero(t, refused.HeldBytes(), "nothing held")
	require.Len(t, asked, 2)
	assert.Zero(t, asked[0], "asked first with 0")
	held := asked[1]
	assert.Positive(t, held)
	kept := prepare(other.Exe, func(n int64) bool { return n == 0 || n == held })
	require.True(t, kept.Kept(), "the same held bytes accepted: %s", pendingString(kept))
	require.True(t, elfedit.KeptPlan(kept).Prepared(), "the same held bytes accepted: %s", pendingString(kept))
	assert.Equal(t, held, kept.HeldBytes())
	assert.Equal(t, held, elfedit.KeptPlan(kept).HeldBytes())
	var asks int
	none := prepare(fixtures.ByName(t, "bfd-pie").Copy(t).Exe, func(int64) bool { asks++; return false })
	assert.False(t, none.Kept())
	assert.Equal(t, 1, asks, "a keep that refuses 0 is asked once")
	require.NoError(t, none.Close())

	res, err := refused.Commit(elfedit.Options{})
	require.NoError(t, err)
	assert.False(t, res.Reused, "a refused plan is planned again")
	keptPlan := elfedit.KeptPlan(kept)
	res, err = kept.Commit(elfedit.Options{})
	require.NoError(t, err)
	assert.Same(t, keptPlan, res.Plan)
	assert.True(t, res.Reused)
	assert.Equal(t, readFile(t, other.Exe), readFile(t, fx.Exe), "the same bytes either way")
}

// TestDetachedPlansWriteTheSameBytes: on every dynamic fixture (each
// linker and architecture), for an edit written in place and one that
// lays out a region, a plan Prepare detached (holding the file's bytes by
// offset, detach.go) writes exactly what a plan made at write time writes,
// and holds, all plans together, a small part of what they write.
func TestDetachedPlansWriteTheSameBytes(t *testing.T) {
	t.Parallel()
	var held, written int64
	type job struct {
		orig, a, b fixtures.Fixture
		name       string
		edit       elfedit.Edit
		settled    bool
	}
	var jobs []job
	for _, orig := range dynamic(t) {
		for _, c := range []struct {
			name string
			edit func(fx fixtures.Fixture) elfedit.Edit
		}{
			{"short", func(fx fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: str("$ORIGIN")} }},
			{"region", func(fx fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("detach", 200), Derived: []elfedit.NoteID{cacheID}}
			}},
		} {
			// Each twice: prepared right after a write, when the copy's
			// ctime may be too recent to show a later one (fingerprinted
			// by every byte), and settled (by identity and the bytes the
			// write takes, see TestPreparedSettled).
			for _, settled := range []bool{false, true} {
				a := orig.Copy(t)
				jobs = append(jobs, job{orig, a, orig.Copy(t), c.name, c.edit(a), settled})
			}
		}
	}
	time.Sleep(elfedit.SettleTime + 50*time.Millisecond)
	for _, j := range jobs {
		for i, pa := range []string{j.a.Exe, j.a.Libs[0]} {
			pb := []string{j.b.Exe, j.b.Libs[0]}[i]
			if !j.settled {
				require.NoError(t, os.WriteFile(pa, readFile(t, pa), 0o755))
			}
			f, err := elfedit.Open(pa)
			require.NoError(t, err)
			p, err := new(elfedit.Batch).Prepare(f, j.edit, nil)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			if !p.Changed() {
				require.NoError(t, p.Close())
				continue
			}
			what := fmt.Sprintf("%s %s settled=%v %s", j.orig.Name, j.name, j.settled, pa)
			require.True(t, p.Kept(), what)
			kept := elfedit.KeptPlan(p)
			require.True(t, kept.Prepared(), what)
			if j.settled {
				require.True(t, elfedit.PreparedByIdentity(p), what)
			}
			own := elfedit.HeldOwnBytes(p)
			res, err := p.Commit(elfedit.Options{})
			require.NoError(t, err)
			require.Same(t, kept, res.Plan, "%s: the detached plan written", what)
			_, err = elfedit.EditFile(pb, j.edit, elfedit.Options{})
			require.NoError(t, err)
			require.Equal(t, readFile(t, pb), readFile(t, pa), what)
			held += own
			written += kept.Written
		}
	}
	t.Logf("fixtures: detached plans hold %d bytes of their own, write %d", held, written)
	// The fixtures' tables are a few hundred bytes: what is new (300
	// bytes of RUNPATH, the note) is most of what they write.
	assert.Less(t, held*3, written*2, "the plans hold their files' bytes by offset")

	// A real library: its string table (tens of KiB) moves with the
	// region, and is held by offset.
	libc := hostLibc(t)
	e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/lib")), SetNote: cacheNote("detach", 200), Derived: []elfedit.NoteID{cacheID}}
	path, p := preparedCopy(t, libc, e, false)
	require.True(t, p.Kept())
	require.True(t, elfedit.KeptPlan(p).Prepared())
	t.Logf("%s: the detached plan holds %d bytes of its own (%d in all), writes %d", libc, elfedit.HeldOwnBytes(p), p.HeldBytes(), elfedit.KeptPlan(p).Written)
	assert.Less(t, elfedit.HeldOwnBytes(p)*10, elfedit.KeptPlan(p).Written)
	writesAsFresh(t, libc, path, e, p)
}

// TestPreparedSettled: a file that went unchanged for longer than the
// kernel's timestamps are coarse before it was read is fingerprinted by
// its identity (device, inode, size, mtime, ctime) and by the bytes the
// write takes from it, which are all the commit reads again; any change of
// the file since (a write, even of the same bytes, a touch, another file
// renamed over it) shows in the identity, and the file is planned afresh;
// bytes that differ behind an unchanged identity fail the comparison.
// A plan prepared from a reader that is not a file is fingerprinted by
// every byte it read, as before.
func TestPreparedSettled(t *testing.T) {
	t.Parallel()
	e := func(fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("settled", 200), Derived: []elfedit.NoteID{cacheID}}
	}
	for _, c := range []struct {
		name      string
		change    func(t *testing.T, fx fixtures.Fixture, path string, p *elfedit.Pending) // between Prepare and Commit
		other     bool                                                                     // the commit gets another edit
		reader    bool                                                                     // prepared through a reader, not Open
		reused    bool
		unchecked bool // the change leaves a file that need not run
	}{
		{name: "unchanged", reused: true},
		{name: "rewritten", unchecked: true, change: func(t *testing.T, _ fixtures.Fixture, path string, _ *elfedit.Pending) {
			b := readFile(t, path)
			b[len(b)/2] ^= 0xff
			require.NoError(t, os.WriteFile(path, b, 0o755))
		}},
		{name: "same-bytes-rewritten", change: func(t *testing.T, _ fixtures.Fixture, path string, _ *elfedit.Pending) {
			require.NoError(t, os.WriteFile(path, readFile(t, path), 0o755))
		}},
		{name: "touched", change: func(t *testing.T, _ fixtures.Fixture, path string, _ *elfedit.Pending) {
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Chtimes(path, st.ModTime(), st.ModTime())) // only the ctime moves
		}},
		{name: "replaced", change: func(t *testing.T, fx fixtures.Fixture, path string, _ *elfedit.Pending) {
			other := fixtures.ByName(t, "bfd-pie").Copy(t).Exe
			require.NoError(t, os.Rename(other, path))
		}},
		{name: "bytes-differ", change: func(t *testing.T, _ fixtures.Fixture, _ string, p *elfedit.Pending) {
			elfedit.SpoilFingerprint(p)
		}},
		{name: "other-edit", other: true},
		{name: "reader", reader: true, reused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx := runnableCopy(t)
			path := fx.Exe
			time.Sleep(elfedit.SettleTime + 50*time.Millisecond)
			e := e(fx)
			var p *elfedit.Pending
			if c.reader {
				b := readFile(t, path)
				src := &elfedit.CountingReader{R: bytes.NewReader(b)}
				f, err := elfedit.NewFile(elfedit.NewCachedReader(src, int64(len(b)), nil), int64(len(b)))
				require.NoError(t, err)
				_, err = new(elfedit.Batch).Prepare(f, e, nil)
				require.Error(t, err, "a batch prepares a file read from a path")
				p, err = elfedit.PrepareAny(new(elfedit.Batch), f, e, nil, path)
				require.NoError(t, err)
				require.True(t, p.Kept(), pendingString(p))
				require.True(t, elfedit.KeptPlan(p).Prepared(), pendingString(p))
				assert.False(t, elfedit.PreparedByIdentity(p), "no identity without a file")
			} else {
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				p, err = new(elfedit.Batch).Prepare(f, e, nil)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.True(t, p.Kept(), pendingString(p))
				require.True(t, elfedit.KeptPlan(p).Prepared(), pendingString(p))
				require.True(t, elfedit.PreparedByIdentity(p), "a file unchanged for %v", elfedit.SettleTime)
			}
			if c.change != nil {
				c.change(t, fx, path, p)
			}
			if c.other {
				e.SetPath = str(pad(200, fx.LibDir))
			}
			writePrepared(t, fx, e, p, c.reused, !c.unchecked)
			if c.reused {
				fresh := runnableCopy(t)
				_, err := elfedit.EditFile(fresh.Exe, e, elfedit.Options{})
				require.NoError(t, err)
				assert.Equal(t, readFile(t, fresh.Exe), readFile(t, path), "the same bytes as a plan made at the write")
			}
		})
	}
}

// TestSettled: a ctime is trusted to show later writes once it is older
// than the read by the settling time, which is longer for a file system
// that keeps whole seconds.
func TestSettled(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 12, 0, 0, 500_000_000, time.UTC)
	for _, c := range []struct {
		ctime time.Time
		want  bool
	}{
		{at, false},
		{at.Add(time.Second), false}, // a ctime ahead of the clock
		{at.Add(-elfedit.SettleTime / 2), false},
		{at.Add(-elfedit.SettleTime - time.Millisecond), true},
		{at.Add(-time.Second), true},
		{time.Date(2026, 11, 25, 11, 59, 59, 0, time.UTC), false}, // whole seconds: 1.5 s is not enough
		{time.Date(2026, 11, 25, 11, 59, 57, 0, time.UTC), true},
		{time.Date(2026, 11, 25, 11, 59, 57, 1, time.UTC), true},
	} {
		assert.Equal(t, c.want, elfedit.Settled(c.ctime, at), "ctime %v", c.ctime)
	}
}

// TestMergeSpans: the ranges a settled file's write reads again are
// sorted and joined where they overlap or lie close; ranges far apart
// stay apart, however many (a read of the bytes between would cost more
// than a call).
func TestMergeSpans(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   [][2]int64
		want [][2]int64
	}{
		{"none", nil, nil},
		{"empty dropped", [][2]int64{{5, 5}, {0, 10}}, [][2]int64{{0, 10}}},
		{"sorted and overlapping", [][2]int64{{100, 200}, {0, 150}}, [][2]int64{{0, 200}}},
		{"close", [][2]int64{{0, 10}, {10 + 16<<10, 20 << 10}}, [][2]int64{{0, 20 << 10}}},
		{"far", [][2]int64{{0, 10}, {1 << 20, 1<<20 + 10}}, [][2]int64{{0, 10}, {1 << 20, 1<<20 + 10}}},
		{"many far apart stay apart", [][2]int64{{0, 1}, {1 << 20, 1<<20 + 1}, {2 << 20, 2<<20 + 1}, {3 << 20, 3<<20 + 1}, {4 << 20, 4<<20 + 1}},
			[][2]int64{{0, 1}, {1 << 20, 1<<20 + 1}, {2 << 20, 2<<20 + 1}, {3 << 20, 3<<20 + 1}, {4 << 20, 4<<20 + 1}}},
	} {
		assert.Equal(t, c.want, elfedit.MergeSpans(c.in), c.name)
	}
}

// TestSettledReadsLittle: for a real library, settled, what the write
// reads again is the few ranges it takes bytes from (the headers, the
// tables the region copies, the bytes it keeps to undo), not the tables
// the plan was made from; and what it writes is what a plan made at the
// write writes.
func TestSettledReadsLittle(t *testing.T) {
	t.Parallel()
	libc := hostLibc(t)
	e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/lib")), SetNote: cacheNote("settled", 200), Derived: []elfedit.NoteID{cacheID}}
	path, p := preparedCopy(t, libc, e, true)
	require.True(t, elfedit.PreparedByIdentity(p))
	size := int64(len(readFile(t, path)))
	t.Logf("%s (%d bytes): the write reads %d bytes again", libc, size, elfedit.FingerprintBytes(p))
	assert.Less(t, elfedit.FingerprintBytes(p)*8, size)
	writesAsFresh(t, libc, path, e, p)
}

// hostLibc is this machine's glibc libc.so.6, a real library of 2 MB.
func hostLibc(t *testing.T) string {
	libc, err := filepath.Glob("/[lu]*/*-linux-gnu*/libc.so.6")
	require.NoError(t, err)
	require.NotEmpty(t, libc, "glibc's libc.so.6")
	return libc[0]
}

// preparedCopy copies src into a temporary directory, lets it settle
// (elfedit.SettleTime) if asked, and prepares e for the copy.
func preparedCopy(t *testing.T, src string, e elfedit.Edit, settle bool) (string, *elfedit.Pending) {
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	require.NoError(t, os.WriteFile(path, readFile(t, src), 0o755))
	if settle {
		time.Sleep(elfedit.SettleTime + 50*time.Millisecond)
	}
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	p, err := new(elfedit.Batch).Prepare(f, e, nil)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path, p
}

// writesAsFresh commits p, the edit e of path prepared, to path, a copy
// of src, and requires that its kept plan was reused and that the file
// then equals a fresh copy of src edited with e without a prepared plan.
func writesAsFresh(t *testing.T, src, path string, e elfedit.Edit, p *elfedit.Pending) {
	kept := elfedit.KeptPlan(p)
	require.NotNil(t, kept, "a plan kept")
	res, err := p.Commit(elfedit.Options{})
	require.NoError(t, err)
	require.Same(t, kept, res.Plan)
	fresh := filepath.Join(t.TempDir(), filepath.Base(src))
	require.NoError(t, os.WriteFile(fresh, readFile(t, src), 0o755))
	_, err = elfedit.EditFile(fresh, e, elfedit.Options{})
	require.NoError(t, err)
	require.Equal(t, readFile(t, fresh), readFile(t, path))
}

// runnableCopy is a copy of the bfd-pie fixture whose libfoo finds libbar
// ($ORIGIN), so that its main runs once its own RUNPATH is set.
func runnableCopy(t *testing.T) fixtures.Fixture {
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(originLib)}, elfedit.Options{})
	require.NoError(t, err)
	return fx
}

// writePrepared commits p as the edit e of fx's main (e need not be the
// edit p was prepared for: CommitAs) and checks that the kept plan was
// reused or not as expected, and that the file carries e's values, has
// no new problems and (with run) runs.
func writePrepared(t *testing.T, fx fixtures.Fixture, e elfedit.Edit, p *elfedit.Pending, reused, run bool) {
	t.Helper()
	path := fx.Exe
	probs := problems(t, path)
	before := info(t, path)
	kept := elfedit.KeptPlan(p)
	require.NotNil(t, kept, "a plan kept")
	res, err := elfedit.CommitAs(p, path, e, elfedit.Options{})
	require.NoError(t, err)
	assert.Equal(t, reused, res.Plan == kept, "prepared plan reused")
	assert.Equal(t, reused, res.Reused, "prepared plan reused")
	assert.True(t, res.Changed)
	checkWant(t, path, expect(before, e))
	noNewProblems(t, probs, path)
	if run {
		assert.NoError(t, runs(t, fx)(path))
	}
}

// TestPreparedOnFuzzCorpus: on every input of FuzzEdit's corpus (seed
// files of each linker, the fuzzer's crashers, the mutation sweeps'
// finds), with the corpus entry's edit and each of FuzzEdit's seed edits,
// a plan prepared from the settled file and committed gives
// what EditFile gives without one, byte for byte, or fails as it fails.
func TestPreparedOnFuzzCorpus(t *testing.T) {
	t.Parallel()
	entries, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzEdit", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	type job struct {
		what        string
		e           elfedit.Edit
		path, fresh string
	}
	var jobs []job
	for _, name := range entries {
		args := corpusArgs(t, name)
		require.Len(t, args, 7, name)
		data := []byte(args[0].(string))
		ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			continue
		}
		type fields struct {
			path, interp, soname, needed string
			tag, flags                   uint8
		}
		edits := []fields{{args[1].(string), args[2].(string), args[3].(string), args[4].(string), args[5].(uint8), args[6].(uint8)}}
		for _, s := range editSeeds {
			edits = append(edits, fields{s.path, s.interp, s.soname, s.needed, s.tag, s.flags})
		}
		for i, x := range edits {
			e := fuzzEdit(ef.Info(), x.path, x.interp, x.soname, x.needed, x.tag, x.flags)
			if e.Validate() != nil {
				continue
			}
			dir := t.TempDir()
			j := job{fmt.Sprintf("%s edit %d", filepath.Base(name), i), e, filepath.Join(dir, "a"), filepath.Join(dir, "b")}
			require.NoError(t, os.WriteFile(j.path, data, 0o755))
			require.NoError(t, os.WriteFile(j.fresh, data, 0o755))
			jobs = append(jobs, j)
		}
	}
	time.Sleep(elfedit.SettleTime + 50*time.Millisecond)
	var byIdentity, written int
	for _, j := range jobs {
		var p *elfedit.Pending
		if f, err := elfedit.Open(j.path); err == nil {
			p, _ = new(elfedit.Batch).Prepare(f, j.e, nil)
			require.NoError(t, f.Close())
		}
		if p != nil && elfedit.PreparedByIdentity(p) {
			byIdentity++
		}
		_, errFresh := elfedit.EditFile(j.fresh, j.e, elfedit.Options{})
		var err error
		if p != nil {
			_, err = p.Commit(elfedit.Options{})
		} else {
			_, err = elfedit.EditFile(j.path, j.e, elfedit.Options{})
		}
		require.Equal(t, errFresh == nil, err == nil, "%s: with a prepared plan %v, without %v", j.what, err, errFresh)
		require.Equal(t, readFile(t, j.fresh), readFile(t, j.path), j.what)
		if err == nil {
			written++
		}
	}
	t.Logf("%d edits of %d inputs: %d written, %d plans prepared by identity", len(jobs), len(entries), written, byIdentity)
	assert.Positive(t, byIdentity)
}

// corpusArgs reads the arguments of a Go fuzz corpus entry: []byte and
// string values as strings, byte values as uint8.
func corpusArgs(t *testing.T, path string) []any {
	text := string(readFile(t, path))
	lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(text, "go test fuzz v1\n")), "\n")
	var out []any
	for _, l := range lines {
		kind, rest, ok := strings.Cut(l, "(")
		require.True(t, ok, "%s: %q", path, l)
		v := strings.TrimSuffix(rest, ")")
		switch kind {
		case "[]byte", "string":
			s, err := strconv.Unquote(v)
			require.NoError(t, err, "%s: %q", path, l)
			out = append(out, s)
		case "byte":
			if n, err := strconv.Atoi(v); err == nil {
				out = append(out, uint8(n))
				continue
			}
			r, _, tail, err := strconv.UnquoteChar(strings.Trim(v, "'"), '\'')
			require.NoError(t, err, "%s: %q", path, l)
			require.Empty(t, tail, "%s: %q", path, l)
			out = append(out, uint8(r))
		default:
			t.Fatalf("%s: %q: unknown type", path, l)
		}
	}
	return out
}
