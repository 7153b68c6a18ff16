package elfedit_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestReadCacheReadsLikeTheFile: whatever is read through the read cache,
// anywhere, of any length, across its head and windows and past the end,
// is what the file holds, with the counts and io.EOF of a plain ReadAt;
// and what the cache holds is never read from the file twice.
func TestReadCacheReadsLikeTheFile(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 0))
	for _, size := range []int{1, 100, 4095, 65535, 65536, 65537, 100_000, 131072, 131073, 200_000, 1<<20 + 123} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for _, bufs := range []*elfedit.Buffers{nil, {}} {
			src := &elfedit.CountingReader{R: bytes.NewReader(data)}
			c := elfedit.NewCachedReader(src, int64(size), bufs)
			for range 3000 {
				off := rng.Int64N(int64(size) + 100)
				n := 1 + rng.IntN(300)
				switch rng.IntN(10) {
				case 0:
					n = 1 + rng.IntN(150_000) // larger than a window: read directly
				case 1:
					off = int64(rng.IntN(min(size, 70_000))) // around the head
				}
				got := make([]byte, n)
				gn, gerr := c.ReadAt(got, off)
				want := make([]byte, n)
				wn, werr := bytes.NewReader(data).ReadAt(want, off)
				require.Equal(t, wn, gn, "size %d: ReadAt(%d bytes at %d)", size, n, off)
				require.Equal(t, errors.Is(werr, io.EOF), errors.Is(gerr, io.EOF), "size %d: ReadAt(%d bytes at %d): %v", size, n, off, gerr)
				if werr == nil {
					require.NoError(t, gerr)
				}
				require.True(t, bytes.Equal(want[:wn], got[:gn]), "size %d: ReadAt(%d bytes at %d): wrong bytes", size, n, off)
			}
			if size <= 2*65536 {
				assert.Equal(t, 1, src.Calls(), "a file of %d bytes is read once", size)
			}
			require.NoError(t, c.Close())
		}
	}
	// A miss reads a window of 16 KiB ending at it; what follows in it is
	// read from the cache, what lies further back is a miss of its own.
	data := make([]byte, 1<<20)
	src := &elfedit.CountingReader{R: bytes.NewReader(data)}
	c := elfedit.NewCachedReader(src, int64(len(data)), nil)
	b := make([]byte, 100)
	for _, off := range []int64{0, 900_000, 900_000, 887_000, 899_000, 60_000} {
		_, err := c.ReadAt(b, off)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, src.Calls(), "the head, then one window for reads within 16 KiB before the first miss")
	_, err := c.ReadAt(b, 850_000)
	require.NoError(t, err)
	assert.Equal(t, 3, src.Calls(), "50 KB before the first miss: a miss of its own")
}

// TestSmallFileIsReadOnce: a file smaller than the cache's head (the
// fixture libraries are) is read with one read call, from NewFile through
// planning an edit that moves its string table, reading the planned result
// back and verifying it.
func TestSmallFileIsReadOnce(t *testing.T) {
	t.Parallel()
	for _, fx := range fixtures.Native(t) {
		if fx.Static {
			continue
		}
		for _, p := range append([]string{fx.Exe}, fx.Libs...) {
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			if len(raw) > 65536 {
				continue
			}
			src := &elfedit.CountingReader{R: bytes.NewReader(raw)}
			c := elfedit.NewCachedReader(src, int64(len(raw)), &elfedit.Buffers{})
			f, err := elfedit.NewFile(c, int64(len(raw)))
			require.NoError(t, err, p)
			f.Info()
			plan, err := f.Plan(elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib"))})
			require.NoError(t, err, p)
			after, err := plan.Result()
			require.NoError(t, err, p)
			require.Empty(t, after.Verify(), p)
			assert.Equal(t, 1, src.Calls(), "%s: read calls", p)
			require.NoError(t, c.Close())
		}
	}
}

// TestFileOfTwoWindowsIsReadOnce: a library longer than the head but at
// most two windows long is read whole in one call, not as the head and a
// window for its section headers that would overlap it (more calls and
// more bytes). From NewFile through planning an edit that moves its string
// table, reading the result back and verifying it, it takes one read of
// its size; a longer file still takes the head and windows, never itself
// whole.
func TestFileOfTwoWindowsIsReadOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		pad       int // bytes of .rodata, to set the library's size
		min, max  int // its size must fall in [min, max]
		calls     int // read calls, 0 for more than one
		wholeRead bool
	}{
		{pad: 20_000, min: 1, max: 65536, calls: 1, wholeRead: true},
		{pad: 80_000, min: 65537, max: 131072, calls: 1, wholeRead: true},
		{pad: 200_000, min: 131073, max: 1 << 20},
	} {
		name := fmt.Sprintf("pad%d", tc.pad)
		lib := filepath.Join(dir, "lib"+name+".so")
		fixtures.Place(t, fixtures.C{Source: fmt.Sprintf("const char pad[%d] = {1};\nint f(void) { return pad[0]; }\n", tc.pad), Args: []string{"-shared", "-fPIC", "-s"}}, lib)
		raw, err := os.ReadFile(lib)
		require.NoError(t, err)
		require.True(t, len(raw) >= tc.min && len(raw) <= tc.max, "%s: %d bytes, not in [%d, %d]", name, len(raw), tc.min, tc.max)

		e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib"))}
		src, _, r := planVerified(t, raw, e, elfedit.NewEditingReader)
		if tc.calls > 0 {
			assert.Equal(t, tc.calls, src.Calls(), "%s (%d bytes): read calls", name, len(raw))
		} else {
			assert.Greater(t, src.Calls(), 1, "%s (%d bytes): read calls", name, len(raw))
		}
		if tc.wholeRead {
			assert.Equal(t, len(raw), src.Bytes(), "%s: bytes read", name)
		} else {
			assert.Less(t, src.Bytes(), len(raw), "%s: bytes read", name)
		}
		require.NoError(t, r.Close())
	}
}

// TestLastSegmentIsNotReadToFindARegion: planning a file never edited
// reads the first bytes of its last PT_LOAD only when they hold something
// the plan needs. Those bytes would hold the header of a region appended
// by an earlier edit, but a region's segment maps exactly its bytes
// (Filesz == Memsz), and a last segment with .bss past them cannot be one:
// a library whose writable segment starts far from its .dynamic took a
// 64 KiB read there, in each phase, for nothing. A file edited before
// still has its region found (the edit again is a no-op).
func TestLastSegmentIsNotReadToFindARegion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfar.so")
	// 100 KB of read-only data first, so that the last segment starts
	// past the head; 200 KB of relocated data in it before .dynamic; a
	// .bss after it.
	src := "const char ro[100000] = {1};\n__attribute__((section(\".data.rel.ro\"))) char far[200000] = {1};\nchar bss[4096];\nint f(void) { return ro[0] + far[0] + bss[1]; }\n"
	fixtures.Place(t, fixtures.C{Source: src, Args: []string{"-shared", "-fPIC", "-s"}}, lib)
	raw, err := os.ReadFile(lib)
	require.NoError(t, err)
	ef, err := elf.NewFile(bytes.NewReader(raw))
	require.NoError(t, err)
	var last *elf.Prog
	var dyn *elf.Prog
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			last = p
		case elf.PT_DYNAMIC:
			dyn = p
		}
	}
	require.NotNil(t, last)
	require.NotNil(t, dyn)
	require.Greater(t, last.Memsz, last.Filesz, "the last segment has .bss")
	require.Greater(t, last.Off, uint64(64<<10), "the last segment starts past the head")
	require.Greater(t, dyn.Off, last.Off+128<<10, "the last segment starts far before .dynamic")
	start := [2]int64{int64(last.Off), int64(last.Off) + 32}

	// Too long for any padding: the edit appends a region.
	e := elfedit.Edit{SetPath: str(pad(8000, "/nix/store/x/lib"))}
	read, _, r := planVerified(t, raw, e, elfedit.NewEditingReader)
	for _, rg := range read.Ranges {
		assert.False(t, rg[0] < start[1] && start[0] < rg[1], "read [0x%x, 0x%x) holds the last segment's first bytes at 0x%x", rg[0], rg[1], start[0])
	}
	require.NoError(t, r.Close())

	// Edited, then edited again: the region the first edit appended is
	// found and reused, not a second one appended.
	loads := func() int {
		ef, err := elf.Open(lib)
		require.NoError(t, err)
		defer ef.Close()
		n := 0
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD {
				n++
			}
		}
		return n
	}
	n := loads()
	_, err = elfedit.EditFile(lib, e, elfedit.Options{})
	require.NoError(t, err)
	require.Equal(t, n+1, loads(), "the first edit appends a region")
	e.SetPath = str(pad(8100, "/nix/store/y/lib"))
	res, err := elfedit.EditFile(lib, e, elfedit.Options{})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, n+1, loads(), "the second edit reuses the region")
	assert.Equal(t, e.SetPath, info(t, lib).RunPath)
}

// planVerified plans e over raw, read through the cache newReader makes
// over a CountingReader, and verifies the planned result as EditFile
// does. The caller closes the cache, after applying the plan, which may
// hold its scratch.
func planVerified(t *testing.T, raw []byte, e elfedit.Edit, newReader func(*elfedit.CountingReader, int64, *elfedit.Buffers) elfedit.CachedReader) (*elfedit.CountingReader, *elfedit.Plan, elfedit.CachedReader) {
	t.Helper()
	src := &elfedit.CountingReader{R: bytes.NewReader(raw)}
	r := newReader(src, int64(len(raw)), &elfedit.Buffers{})
	f, err := elfedit.NewFile(r, int64(len(raw)))
	require.NoError(t, err)
	p, err := f.Plan(e)
	require.NoError(t, err)
	after, err := p.Result()
	require.NoError(t, err)
	require.NoError(t, elfedit.CheckResult(f, after, &e))
	return src, p, r
}

// TestClosedFileReadsNothingStale: a File used after Close fails to read
// (as one over a closed os.File does); it never sees the bytes of the file
// its buffers were lent to next.
func TestClosedFileReadsNothingStale(t *testing.T) {
	t.Parallel()
	fx := fixtures.ByName(t, "bfd-pie")
	var bufs elfedit.Buffers
	a, err := bufs.Open(fx.Libs[0])
	require.NoError(t, err)
	require.NoError(t, a.Close())
	b, err := bufs.Open(fx.Exe)
	require.NoError(t, err)
	defer b.Close()
	_, err = a.Plan(elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib"))})
	require.Error(t, err, "planning a closed file that must read its symbols")
	assert.True(t, errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "closed"), "error %v", err)
	// Its string table, scratch that b may now hold, reads as empty.
	for _, n := range a.Needed() {
		assert.Empty(t, n, "a name read after Close")
	}
	assert.Zero(t, a.StringTableSize())
	bi := b.Info()
	_, err = b.Plan(elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib"))})
	assert.NoError(t, err, "the file opened since is unaffected")
	assert.Equal(t, bi, b.Info(), "and reads as it did")
}

// TestScratchGoesWithItsFile: a plan tied to a file opened with Buffers
// writes from scratch the file lent it; once the file is closed that
// scratch may be another file's, so the plan is refused (neither applied
// nor read back) rather than written from it. A plan Prepare kept holds
// its own bytes and is written as before.
func TestScratchGoesWithItsFile(t *testing.T) {
	t.Parallel()
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	var bufs elfedit.Batch
	e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib"))}
	f, err := bufs.Open(fx.Exe)
	require.NoError(t, err)
	tied, err := f.Plan(e)
	require.NoError(t, err)
	pe, err := bufs.Prepare(f, e, nil)
	require.NoError(t, err)
	kept := elfedit.KeptPlan(pe)
	require.NotNil(t, kept, "kept")
	require.True(t, kept.Prepared(), planString(kept))
	require.NoError(t, f.Close())
	// Lend the scratch again, and scribble on it through another plan.
	g, err := bufs.Open(fx.Libs[0])
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Plan(elfedit.Edit{SetPath: str(pad(500, "/nix/store/y/lib"))})
	require.NoError(t, err)

	before := readFile(t, fx.Exe)
	wf, err := os.OpenFile(fx.Exe, os.O_RDWR, 0)
	require.NoError(t, err)
	defer wf.Close()
	assert.ErrorContains(t, tied.Apply(wf, false), "plan again")
	assert.Equal(t, before, readFile(t, fx.Exe), "a refused plan writes nothing")
	_, err = tied.Result()
	assert.ErrorContains(t, err, "plan again")

	res, err := pe.Commit(elfedit.Options{})
	require.NoError(t, err)
	assert.Same(t, kept, res.Plan, "the kept plan is written")
	other := fixtures.ByName(t, "bfd-pie").Copy(t)
	_, err = elfedit.EditFile(other.Exe, e, elfedit.Options{})
	require.NoError(t, err)
	assert.Equal(t, readFile(t, other.Exe), readFile(t, fx.Exe), "as planning without Buffers writes it")
}

// TestTablesReadTogether: a library whose dynamic-linking tables outgrow
// the 64 KiB head (3,000 exported functions, built here) has them read in
// one call when it is read to be planned: planning and verifying an edit
// takes fewer reads than through the plain cache, at most four (the head,
// the section headers at the end, the dynamic section, the tables); and
// the plan is the same either way.
func TestTablesReadTogether(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var src strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&src, "int exported_function_with_a_long_name_%04d(void) { return %d; }\n", i, i)
	}
	lib := filepath.Join(dir, "libmany.so")
	// Stripped, as distributions and Nix builds ship libraries: a .symtab
	// (read whole when sections move, to renumber it) is one read more.
	fixtures.Place(t, fixtures.C{Source: src.String(), Args: []string{"-shared", "-fPIC", "-O0", "-s"}}, lib)
	raw, err := os.ReadFile(lib)
	require.NoError(t, err)
	f0, err := elfedit.NewFile(bytes.NewReader(raw), int64(len(raw)))
	require.NoError(t, err)
	var tables uint64
	for _, s := range f0.Sections {
		if s.Type == elf.SHT_DYNSYM || s.Name == ".dynstr" {
			tables += s.Size
		}
	}
	require.Greater(t, tables, uint64(65536), "the tables outgrow the head")

	e := elfedit.Edit{SetPath: str(pad(300, "/nix/store/x/lib")), SetNote: cacheNote("many", 200), Derived: []elfedit.NoteID{cacheID}}
	plan := func(newReader func(*elfedit.CountingReader, int64, *elfedit.Buffers) elfedit.CachedReader) (int, []byte) {
		counter, p, c := planVerified(t, raw, e, newReader)
		defer c.Close()
		m := &memTarget{b: slices.Clone(raw)}
		require.NoError(t, p.Apply(m, false))
		return counter.Calls(), m.b
	}
	plain, plainOut := plan(elfedit.NewCachedReader)
	editing, editingOut := plan(elfedit.NewEditingReader)
	assert.LessOrEqual(t, editing, 4, "read calls to plan the library")
	assert.Less(t, editing, plain, "read calls: %d through the plain cache", plain)
	assert.True(t, bytes.Equal(plainOut, editingOut), "the same result either way")

	// The prefetched range is part of what a prepared plan was made
	// from: read again whole, it lets the write reuse the plan.
	var bufs elfedit.Batch
	f, err := bufs.OpenForEdit(lib)
	require.NoError(t, err)
	pe, err := bufs.Prepare(f, e, nil)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	p := elfedit.KeptPlan(pe)
	require.NotNil(t, p, "kept")
	require.True(t, p.Prepared(), planString(p))
	res, err := pe.Commit(elfedit.Options{})
	require.NoError(t, err)
	assert.Same(t, p, res.Plan, "the prepared plan is written")
	assert.True(t, bytes.Equal(editingOut, readFile(t, lib)), "as planned")
}

// TestReadMappedFromTheCache: ReadMappedInto copies a table the read
// cache holds (a small file's, in the head) with no read of the file, and
// reads one it does not hold (past the 64 KiB head of a big file) in one
// read past the cache; the bytes are the file's either way.
func TestReadMappedFromTheCache(t *testing.T) {
	t.Parallel()
	var big strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&big, "int exported_function_with_a_long_name_%04d(void) { return %d; }\n", i, i)
	}
	for _, tc := range []struct {
		name   string
		source string
		calls  int // reads of the file for the table
	}{
		{"small", "int f(void) { return 1; }\n", 0},
		{"big", big.String(), 1},
	} {
		raw, err := os.ReadFile(fixtures.Compile(t, fixtures.C{Source: tc.source, Args: []string{"-shared", "-fPIC", "-s"}}))
		require.NoError(t, err)
		ef, err := elf.NewFile(bytes.NewReader(raw))
		require.NoError(t, err)
		dynstr := ef.Section(".dynstr")
		require.NotNil(t, dynstr)
		want, err := dynstr.Data()
		require.NoError(t, err)
		if tc.name == "big" {
			require.Greater(t, len(raw), 2*65536, "the big library is read a window at a time")
			require.Greater(t, dynstr.Offset, uint64(65536), "the big library's .dynstr lies past the head")
		}
		counter := &elfedit.CountingReader{R: bytes.NewReader(raw)}
		r := elfedit.NewCachedReader(counter, int64(len(raw)), &elfedit.Buffers{})
		f, err := elfedit.NewFile(r, int64(len(raw)))
		require.NoError(t, err)
		addr, ok := f.DynValue(elf.DT_STRTAB)
		require.True(t, ok)
		before := counter.Calls()
		got, err := f.ReadMappedInto(nil, addr, dynstr.Size, "string table")
		require.NoError(t, err)
		assert.Equal(t, want, got, tc.name)
		assert.Equal(t, tc.calls, counter.Calls()-before, "%s: reads of the file for its string table", tc.name)
		require.NoError(t, r.Close())
	}
}
