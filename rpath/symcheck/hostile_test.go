package symcheck

import (
	"bytes"
	"debug/elf"
	"math/rand"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestHostileTables: mangled symbol, version, hash and relocation tables
// give an error or a smaller answer, never a panic or a read past the
// file; every lookup on what was read terminates.
func TestHostileTables(t *testing.T) {
	for _, path := range []string{"/bin/true", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"} {
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Skipf("%s: %v", path, err)
		}
		f, err := elfedit.NewFile(bytes.NewReader(orig), int64(len(orig)))
		require.NoError(t, err)
		o, err := newObject(f, true)
		require.NoError(t, err, path)
		require.NotEmpty(t, o.refList, path)
		// Mangle the bytes the tables live in: up to the end of the
		// dynamic section.
		end := 0
		for _, p := range f.Progs {
			end = max(end, int(p.Off+p.Filesz))
		}
		end = min(end, len(orig), 1<<16)
		rng := rand.New(rand.NewSource(30))
		buf := make([]byte, len(orig))
		ok := 0
		for range 3000 {
			copy(buf, orig)
			for range 1 + rng.Intn(8) {
				i := 64 + rng.Intn(end-64) // keep the ELF header
				buf[i] = byte(rng.Intn(256))
			}
			f, err := elfedit.NewFile(bytes.NewReader(buf), int64(len(buf)))
			if err != nil {
				continue
			}
			o, err := newObject(f, true)
			if err != nil {
				continue
			}
			ok++
			for _, r := range o.refList {
				o.find(r.q, false)
				o.find(newQuery(r.q.name, &version{name: "V", hash: 1}, true), true)
			}
		}
		t.Logf("%s: %d of 3000 mangled copies still read", path, ok)
	}
}

// TestVersionWindow: version records that run past the first window are
// read again with the rest of their segment, not refused.
func TestVersionWindow(t *testing.T) {
	f, err := elfedit.Open("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	a, ok := f.DynValue(elf.DT_VERNEED)
	require.True(t, ok)
	var sizes []int
	err = versionRecords(f, a, 16, "DT_VERNEED", func(b []byte) error {
		sizes = append(sizes, len(b))
		if len(b) < 64 {
			return errShort{"entry"}
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, sizes, 2)
	require.Equal(t, 16, sizes[0])
	require.Equal(t, int(f.MappedSize(a)), sizes[1])
	// Still short at the end of the segment: an error naming the table.
	err = versionRecords(f, a, 16, "DT_VERNEED", func([]byte) error { return errShort{"entry at +0x0"} })
	require.EqualError(t, err, "DT_VERNEED: entry at +0x0 runs past its segment")
}
