package elfedit_test

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

const fourGiB = 1 << 32

// sparseCopy writes b to path and extends the file to size with a hole.
func sparseCopy(t *testing.T, path string, b []byte, size int64) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	return f
}

// headOf reads the first n bytes of path.
func headOf(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n)
	_, err = io.ReadFull(f, b)
	require.NoError(t, err)
	return b
}

// TestOver4GiB edits sparse files larger than 4 GiB, the size at which
// 32-bit offset arithmetic breaks. A 64-bit library whose section header
// table lies past 4 GiB is read, edited (the region goes past 4 GiB too)
// and loads; a 32-bit library that large can still be edited in place but
// has no room for a region, which must be refused cleanly; headers that
// point past the end of such a file are refused.
func TestOver4GiB(t *testing.T) {
	t.Parallel()
	t.Run("64-bit", func(t *testing.T) {
		t.Parallel()
		fx := fixtures.ByName(t, "bfd-pie").Copy(t)
		orig := readFile(t, fx.Libs[0])
		x := newElfBytes(t, orig)
		shoff := x.read(40, 32)
		sht := orig[shoff:]
		newShoff := uint64(fourGiB + 0x10000)
		x.ehdr("shoff", newShoff)
		path := fx.Libs[0]
		f := sparseCopy(t, path, x.b[:shoff], int64(newShoff))
		_, err := f.WriteAt(sht, int64(newShoff))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		before := info(t, path)
		probs := problems(t, path)
		_, rerr := fixtures.Readelf(t, path)
		require.Empty(t, rerr, "readelf on the 4 GiB file as made")

		e := elfedit.Edit{SetPath: str(pad(4096, fx.LibDir))}
		res, err := elfedit.EditFile(path, e, elfedit.Options{})
		require.NoError(t, err)
		assert.Equal(t, elfedit.Region, res.Plan.Strategy)
		checkWant(t, path, expect(before, e))
		noNewProblems(t, probs, path)
		_, rerr = fixtures.Readelf(t, path)
		assert.Empty(t, rerr, "readelf warnings")
		ef, err := elf.Open(path)
		require.NoError(t, err)
		var far bool
		for _, p := range ef.Progs {
			far = far || p.Type == elf.PT_LOAD && p.Off > fourGiB
		}
		ef.Close()
		assert.True(t, far, "the region should lie past 4 GiB")
		assert.NoError(t, fx.Load(t, path))

		// A resolution-cache note written, replaced and removed: O(headers)
		// bytes each, the file growing by at most one region.
		// (The zeroing of removed notes is checked on small files: the
		// model's byte scan would read 4 GiB here.)
		m := modelOf(t, path)
		for i, e := range []elfedit.Edit{
			{SetNote: cacheNote("big1", 400), Derived: []elfedit.NoteID{cacheID}},
			{SetNote: cacheNote("big2", 2000), SetPath: str(pad(300, fx.LibDir)), Derived: []elfedit.NoteID{cacheID}},
			{RemoveNotes: []elfedit.NoteID{cacheID}},
		} {
			before := info(t, path)
			size := fileSize(t, path)
			res, err := elfedit.EditFile(path, e, elfedit.Options{})
			require.NoError(t, err, "note edit %d", i)
			t.Logf("note edit %d: %s, %d bytes written, file %+d bytes", i, res.Plan.Strategy, res.Plan.Written, fileSize(t, path)-size)
			assert.Less(t, res.Plan.Written, int64(32<<10), "note edit %d writes O(headers)", i)
			assert.Less(t, fileSize(t, path)-size, int64(32<<10), "note edit %d grows the file by one small region", i)
			m.apply(e, isDerivedChange(before, e))
			m.dead = nil
			checkWant(t, path, expect(before, e))
			checkNotesModel(t, path, m, true)
			noNewProblems(t, probs, path)
			assert.NoError(t, fx.Load(t, path))
		}
	})
	t.Run("32-bit", func(t *testing.T) {
		t.Parallel()
		fx := fixtures.ByName(t, "i686-bfd-pie").Copy(t)
		path := fx.Libs[0]
		orig := readFile(t, path)
		f := sparseCopy(t, path, orig, fourGiB+0x100)
		require.NoError(t, f.Close())
		_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(pad(4096, fx.LibDir))}, elfedit.Options{})
		oneLine(t, err, path)
		assert.Equal(t, int64(fourGiB+0x100), fileSize(t, path))
		assert.True(t, bytes.Equal(orig, headOf(t, path, len(orig))), "refused edit changed the file")

		res, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(originLib)}, elfedit.Options{})
		require.NoError(t, err)
		assert.Equal(t, elfedit.InPlace, res.Plan.Strategy)
		assert.NoError(t, fx.Load(t, path))
	})
	t.Run("headers-past-eof", func(t *testing.T) {
		t.Parallel()
		orig := readFile(t, fixtures.ByName(t, "bfd-pie").Libs[0])
		for field, v := range map[string]uint64{"shoff": fourGiB + 0x1000, "phoff": fourGiB + 0x1000} {
			x := newElfBytes(t, orig)
			x.ehdr(field, v)
			path := filepath.Join(t.TempDir(), "libfoo.so")
			f := sparseCopy(t, path, x.b, fourGiB)
			require.NoError(t, f.Close())
			_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str("/x")}, elfedit.Options{})
			oneLine(t, err, path)
			assert.Equal(t, int64(fourGiB), fileSize(t, path), field)
			assert.True(t, bytes.Equal(x.b, headOf(t, path, len(x.b))), "%s: refused edit changed the file", field)
		}
	})
}
