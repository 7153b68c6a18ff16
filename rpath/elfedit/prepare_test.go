package elfedit_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestPrepared: a plan File.Prepare detached from its file is what
// EditFile writes when the file still reads the same, for the same edit;
// a file changed since, or another edit, is planned afresh. Either way
// the file ends with the values of the edit EditFile was given, runs, and
// Verify finds nothing new.
func TestPrepared(t *testing.T) {
	t.Parallel()
	prepare := func(t *testing.T, path string, e elfedit.Edit) *elfedit.Plan {
		f, err := elfedit.Open(path)
		require.NoError(t, err)
		defer f.Close()
		p, err := f.Prepare(e, nil)
		require.NoError(t, err)
		require.True(t, p.Prepared(), "a small file read through the cache: %s", planString(p))
		return p
	}
	for _, c := range []struct {
		name   string
		change func(t *testing.T, fx fixtures.Fixture, path string) // between Prepare and EditFile
		other  bool                                                 // EditFile gets another edit
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
			fx := fixtures.ByName(t, "bfd-pie").Copy(t)
			_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(originLib)}, elfedit.Options{})
			require.NoError(t, err)
			path := fx.Exe
			e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("prep", 200), Derived: []elfedit.NoteID{cacheID}}
			p := prepare(t, path, e)
			_, err = p.Result()
			assert.Error(t, err, "a detached plan does not read its file")
			if c.change != nil {
				c.change(t, fx, path)
			}
			if c.other {
				e.SetPath = str(pad(200, fx.LibDir))
			}
			probs := problems(t, path)
			before := info(t, path)
			res, err := elfedit.EditFile(path, e, elfedit.Options{Prepared: p})
			require.NoError(t, err)
			assert.Equal(t, c.reused, res.Plan == p, "prepared plan reused")
			assert.True(t, res.Changed)
			checkWant(t, path, expect(before, e))
			noNewProblems(t, probs, path)
			if c.name != "same-size-rewrite" {
				assert.NoError(t, runs(t, fx)(path))
			}
		})
	}
}

// TestPrepareRefused: keep is asked first with 0, then with the bytes
// the detached plan would hold; a plan it refuses stays tied to its file
// (nothing for EditFile to reuse), and the same edit written afresh gives
// the same file as the accepted plan does. A keep that refuses 0 is not
// asked again.
func TestPrepareRefused(t *testing.T) {
	t.Parallel()
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	other := fixtures.ByName(t, "bfd-pie").Copy(t)
	e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("prep", 200), Derived: []elfedit.NoteID{cacheID}}
	prepare := func(path string, keep func(int64) bool) *elfedit.Plan {
		f, err := elfedit.Open(path)
		require.NoError(t, err)
		defer f.Close()
		p, err := f.Prepare(e, keep)
		require.NoError(t, err)
		return p
	}
	var asked []int64
	refused := prepare(fx.Exe, func(held int64) bool { asked = append(asked, held); return held == 0 })
	assert.False(t, refused.Prepared(), "refused: %s", planString(refused))
	require.Len(t, asked, 2)
	assert.Zero(t, asked[0], "asked first with 0")
	held := asked[1]
	assert.Positive(t, held)
	kept := prepare(other.Exe, func(n int64) bool { return n == 0 || n == held })
	require.True(t, kept.Prepared(), "the same held bytes accepted: %s", planString(kept))
	assert.Equal(t, held, kept.HeldBytes())
	var asks int
	none := prepare(fixtures.ByName(t, "bfd-pie").Copy(t).Exe, func(int64) bool { asks++; return false })
	assert.False(t, none.Prepared())
	assert.Equal(t, 1, asks, "a keep that refuses 0 is asked once")

	res, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{Prepared: refused})
	require.NoError(t, err)
	assert.NotSame(t, refused, res.Plan, "a refused plan is planned again")
	res, err = elfedit.EditFile(other.Exe, e, elfedit.Options{Prepared: kept})
	require.NoError(t, err)
	assert.Same(t, kept, res.Plan)
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
			a, b := orig.Copy(t), orig.Copy(t)
			for i, pa := range []string{a.Exe, a.Libs[0]} {
				pb := []string{b.Exe, b.Libs[0]}[i]
				e := c.edit(a)
				f, err := elfedit.Open(pa)
				require.NoError(t, err)
				p, err := f.Prepare(e, nil)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				if p.IsNoOp() {
					continue
				}
				require.True(t, p.Prepared(), "%s %s %s", orig.Name, c.name, pa)
				res, err := elfedit.EditFile(pa, e, elfedit.Options{Prepared: p})
				require.NoError(t, err)
				require.Same(t, p, res.Plan, "%s %s %s: the detached plan written", orig.Name, c.name, pa)
				_, err = elfedit.EditFile(pb, e, elfedit.Options{})
				require.NoError(t, err)
				require.Equal(t, readFile(t, pb), readFile(t, pa), "%s %s %s", orig.Name, c.name, pa)
				held += elfedit.HeldOwnBytes(p)
				written += p.Written
			}
		}
	}
	t.Logf("fixtures: detached plans hold %d bytes of their own, write %d", held, written)
	// The fixtures' tables are a few hundred bytes: what is new (300
	// bytes of RUNPATH, the note) is most of what they write.
	assert.Less(t, held*3, written*2, "the plans hold their files' bytes by offset")

	// A real library: its string table (tens of KiB) moves with the
	// region, and is held by offset.
	libc, err := filepath.Glob("/[lu]*/*-linux-gnu*/libc.so.6")
	require.NoError(t, err)
	require.NotEmpty(t, libc, "glibc's libc.so.6")
	path := filepath.Join(t.TempDir(), "libc.so.6")
	require.NoError(t, os.WriteFile(path, readFile(t, libc[0]), 0o755))
	e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/lib")), SetNote: cacheNote("detach", 200), Derived: []elfedit.NoteID{cacheID}}
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	p, err := f.Prepare(e, nil)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.True(t, p.Prepared())
	t.Logf("%s: the detached plan holds %d bytes of its own (%d in all), writes %d", libc[0], elfedit.HeldOwnBytes(p), p.HeldBytes(), p.Written)
	assert.Less(t, elfedit.HeldOwnBytes(p)*10, p.Written)
	fresh := filepath.Join(t.TempDir(), "libc.so.6")
	require.NoError(t, os.WriteFile(fresh, readFile(t, libc[0]), 0o755))
	res, err := elfedit.EditFile(path, e, elfedit.Options{Prepared: p})
	require.NoError(t, err)
	require.Same(t, p, res.Plan)
	_, err = elfedit.EditFile(fresh, e, elfedit.Options{})
	require.NoError(t, err)
	require.Equal(t, readFile(t, fresh), readFile(t, path))
}
