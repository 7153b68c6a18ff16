package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// A forged journal, built here byte for byte as an adversary would: the
// records of rpath/elfedit/journal.go, and the trailer of version 1 (what
// 2d62424 read: its body read whole, then checked) or 2 (the trailer
// checked by its own checksum first, and placed inside one page).

// jrec is a journal record: kind 1 commit, 2 undo, 3 redo; fill > 0 makes
// it a fill record of n copies of byte fill-1, without data.
type jrec struct {
	kind uint64
	off  int64
	data []byte
	fill int
	n    int64
}

func journalBody(recs []jrec) []byte {
	var body []byte
	for _, r := range recs {
		var h [24]byte
		binary.LittleEndian.PutUint64(h[:], uint64(r.off))
		if r.fill > 0 {
			binary.LittleEndian.PutUint64(h[8:], uint64(r.n))
			binary.LittleEndian.PutUint64(h[16:], r.kind|1<<4|uint64(r.fill-1)<<8)
			body = append(body, h[:]...)
			continue
		}
		binary.LittleEndian.PutUint64(h[8:], uint64(len(r.data)))
		binary.LittleEndian.PutUint64(h[16:], r.kind)
		body = append(body, h[:]...)
		body = append(body, r.data...)
		for len(body)%8 != 0 {
			body = append(body, 0)
		}
	}
	return body
}

// forge writes to path the ELF file elf followed by a journal of the
// given version: its body at the 8-aligned end of elf (old and new size
// both elf's), bodyLen long (body, then a hole; -1: len(body)), and its
// trailer. The file is sparse past elf.
func forge(t *testing.T, path string, elf []byte, version int, recs []jrec, bodyLen int64) {
	t.Helper()
	body := journalBody(recs)
	if bodyLen < 0 {
		bodyLen = int64(len(body))
	}
	size := int64(len(elf))
	at := (size + 7) &^ 7
	var tail []byte
	var tailAt int64
	sizes := make([]byte, 24)
	binary.LittleEndian.PutUint64(sizes, uint64(size))
	binary.LittleEndian.PutUint64(sizes[8:], uint64(size))
	binary.LittleEndian.PutUint64(sizes[16:], uint64(bodyLen))
	var full []byte // the body and the hole after it; not for a sparse file's
	if bodyLen <= 1<<20 {
		full = append(append(full, body...), make([]byte, max(0, bodyLen-int64(len(body))))...)
	}
	switch version {
	case 1:
		h := sha256.New()
		h.Write(full)
		h.Write(sizes)
		tail = append(append(sizes, h.Sum(nil)...), 0x7f, 'c', 'u', 'd', 'a', 'j', 'n', 1)
		tailAt = at + bodyLen
	case 2:
		sum := sha256.Sum256(full)
		head := append(sizes, sum[:]...)
		hs := sha256.Sum256(head)
		tail = append(append(head, hs[:]...), 0x7f, 'c', 'u', 'd', 'a', 'j', 'n', 2)
		tailAt = (at + bodyLen + 7) &^ 7
		if tailAt/4096 != (tailAt+int64(len(tail))-1)/4096 {
			tailAt = (tailAt + 4095) &^ 4095
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(elf, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(body, at)
	require.NoError(t, err)
	_, err = f.WriteAt(tail, tailAt)
	require.NoError(t, err)
}

// forgedRunpath returns a library whose RUNPATH, as the loader reads it,
// leaks the build directory and has an empty entry, and a forged journal
// whose view of it is a clean store path: the commit record is the ELF
// identification, in place (so the journal reads as finished), and a redo
// record rewrites the RUNPATH's bytes.
func forgedRunpath(t *testing.T) (lib string, elfBytes []byte, real, view string, recs []jrec) {
	t.Helper()
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	lib = fx.Libs[0]
	set := "/tmp/nix-build-leak/lib:/opt/zz"
	_, err := elfedit.EditFile(lib, elfedit.Edit{SetPath: &set}, elfedit.Options{})
	require.NoError(t, err)
	b, err := os.ReadFile(lib)
	require.NoError(t, err)
	off := bytes.Index(b, []byte(set))
	require.Positive(t, off)
	require.Equal(t, -1, bytes.Index(b[off+1:], []byte(set)), "the RUNPATH's bytes are in the file once")
	real = "/tmp/nix-build-leak/lib::opt/zz" // an empty entry, which verify names
	copy(b[off:], real)
	view = "/nix/store/" + strings.Repeat("c", len(real)-len("/nix/store/")-len("/lib")) + "/lib"
	require.Len(t, view, len(real))
	recs = []jrec{
		{kind: 1, off: 0, data: append([]byte(nil), b[:16]...)},
		{kind: 3, off: int64(off), data: []byte(view)},
	}
	return lib, b, real, view, recs
}

// TestForgedJournalNotShown: a file that ends in a forged, checksummed
// journal rewriting its RUNPATH is shown by every read-only command as
// the loader maps it (the real RUNPATH, which leaks /tmp and has an empty
// entry), never as the journal would leave it, with a note that a journal
// is present when it is one this version writes. On 2d62424 print,
// explain, patchelf --print-rpath showed the forged store path, verify
// saw no empty entry and lint passed the leak.
func TestForgedJournalNotShown(t *testing.T) {
	for _, version := range []int{1, 2} {
		lib, b, real, view, recs := forgedRunpath(t)
		forge(t, lib, b, version, recs, -1)
		before, err := os.ReadFile(lib)
		require.NoError(t, err)
		for _, tc := range []struct {
			args []string
			want []string // in stdout
		}{
			{[]string{"print", lib}, []string{real}},
			{[]string{"print", "--json", lib}, []string{real}},
			{[]string{"patchelf", "--print-rpath", lib}, []string{real + "\n"}},
			{[]string{"verify", lib}, []string{"path-empty-entry"}},
			{[]string{"lint", lib}, []string{"CP005", "/tmp/nix-build-leak/lib"}},
			// The empty entry is the working directory, libbar's.
			{[]string{"explain", lib}, []string{"libbar.so => libbar.so (runpath of"}},
		} {
			r := runBounded(t, filepath.Dir(lib), 30*time.Second, tc.args...)
			what := []any{"version %d, %q:\n%s%s", version, tc.args, r.stdout, r.stderr}
			require.False(t, r.timedOut, what...)
			for _, w := range tc.want {
				assert.Contains(t, r.stdout, w, what...)
			}
			assert.NotContains(t, r.stdout, view, what...)
			assert.NotContains(t, r.stderr, "panic", what...)
			if version == 2 {
				assert.Contains(t, r.stderr, "ends in the journal of an interrupted edit", what...)
			} else {
				// Not a journal this version writes: bytes of the file.
				assert.NotContains(t, r.stderr, "journal", what...)
			}
		}
		after, err := os.ReadFile(lib)
		require.NoError(t, err)
		assert.Equal(t, before, after, "version %d: a read-only command changed the file", version)
	}
}

// TestHostileJournalBounded: a journal trailer claiming a huge body on a
// sparse file (8 GiB, a few KiB on disk), and a journal of 20,000 fill
// records each the size of the file, are read within a bounded time and
// memory by every command, read-only or editing: the sizes are checked
// against the bounds a run of cudapatch keeps to before anything is
// allocated or read past the trailer. On 2d62424 every command allocated
// and read the whole body (8 GiB: out of memory), and each fill record
// copied the whole file (~30 GB).
func TestHostileJournalBounded(t *testing.T) {
	fills := func(n int, size int64) []jrec {
		recs := []jrec{{kind: 1, off: 0, fill: 1 + 0x7f, n: 1}}
		for range n {
			recs = append(recs, jrec{kind: 3, off: 0, fill: 1 + 'X', n: size})
		}
		return recs
	}
	type input struct {
		name    string
		version int
		huge    bool
	}
	var inputs []input
	for _, v := range []int{1, 2} {
		inputs = append(inputs, input{"8GiB-sparse-body", v, true}, input{"20000-fill-records", v, false})
	}
	for _, in := range inputs {
		t.Run(strings.Join([]string{in.name, "v" + string(rune('0'+in.version))}, "-"), func(t *testing.T) {
			lib, b, _, _, _ := forgedRunpath(t)
			if in.huge {
				forge(t, lib, b, in.version, []jrec{{kind: 1, off: 0, data: b[:16]}}, 8<<30)
			} else {
				forge(t, lib, b, in.version, fills(20000, int64(len(b))), -1)
			}
			for _, args := range [][]string{
				{"print", lib},
				{"verify", lib},
				{"lint", lib},
				{"patchelf", "--print-rpath", lib},
				{"--dry-run", lib},
				{lib},
			} {
				r := runBounded(t, filepath.Dir(lib), 30*time.Second, args...)
				what := []any{"%q: exit %d in %v, %d MiB\n%s%s", args, r.code, r.elapsed, r.maxRSS >> 20, r.stdout, r.stderr}
				require.False(t, r.timedOut, what...)
				t.Logf("%q: exit %d, %v, %d MiB: %s", args[:len(args)-1], r.code, r.elapsed.Round(time.Millisecond), r.maxRSS>>20, strings.TrimSpace(r.stderr))
				assert.Contains(t, []int{0, 1, 2}, r.code, what...)
				assert.Less(t, r.elapsed, 10*time.Second, what...)
				assert.Less(t, r.maxRSS, int64(200<<20), what...)
				assert.NotContains(t, r.stderr, "panic", what...)
				assert.LessOrEqual(t, strings.Count(strings.TrimSpace(r.stderr), "\n"), 3, what...)
			}
		})
	}
}
