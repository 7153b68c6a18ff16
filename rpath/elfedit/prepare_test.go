package elfedit_test

import (
	"os"
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

// TestPrepareRefused: keep is asked with the bytes the detached plan would
// hold; a plan it refuses stays tied to its file (nothing copied, nothing
// for EditFile to reuse), and the same edit written afresh gives the same
// file as the accepted plan does.
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
	var asked int64
	refused := prepare(fx.Exe, func(held int64) bool { asked = held; return false })
	assert.False(t, refused.Prepared(), "refused: %s", planString(refused))
	kept := prepare(other.Exe, func(held int64) bool { return held == asked })
	require.True(t, kept.Prepared(), "the same held bytes accepted: %s", planString(kept))
	assert.Equal(t, asked, kept.HeldBytes())
	assert.Positive(t, asked)

	res, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{Prepared: refused})
	require.NoError(t, err)
	assert.NotSame(t, refused, res.Plan, "a refused plan is planned again")
	res, err = elfedit.EditFile(other.Exe, e, elfedit.Options{Prepared: kept})
	require.NoError(t, err)
	assert.Same(t, kept, res.Plan)
	assert.Equal(t, readFile(t, other.Exe), readFile(t, fx.Exe), "the same bytes either way")
}
