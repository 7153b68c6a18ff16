package elfedit

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// searchEach is what nameOffsets replaces: a search of the whole table for
// each name followed by its NUL.
func searchEach(strtab []byte, names []string) []uint64 {
	var at []uint64
	for _, n := range names {
		pat := []byte(n + "\x00")
		for i := 0; n != "" && i < len(strtab); {
			j := bytes.Index(strtab[i:], pat)
			if j < 0 {
				break
			}
			at = append(at, uint64(i+j))
			i += j + 1
		}
	}
	slices.Sort(at)
	return at
}

// TestNameOffsets: one walk over the table finds the offsets a search per
// name finds: whole strings, tail-merged suffixes, a name that is the
// suffix of another, an unterminated tail, empty names; and on random
// tables built from the same pieces.
func TestNameOffsets(t *testing.T) {
	names := []string{"dlopen", "dlmopen", "lt_dlopen", "lt_dlopenext", "open", ""}
	for _, tc := range []struct {
		name   string
		strtab string
		want   []uint64
	}{
		{"empty", "", nil},
		{"whole", "\x00dlopen\x00", []uint64{1, 3}},
		{"tail-merged", "\x00__libc_dlopen\x00", []uint64{8, 10}},
		{"two names end one run", "\x00lt_dlopen\x00", []uint64{1, 4, 6}},
		{"a longer name is no match", "\x00dlopenx\x00lt_dlopenext\x00", []uint64{9}},
		{"unterminated tail", "\x00dlopen", nil},
		{"no leading NUL", "dlmopen\x00x\x00", []uint64{0, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nameOffsets([]byte(tc.strtab), names)
			slices.Sort(got)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, searchEach([]byte(tc.strtab), names), got)
		})
	}
	pieces := []string{"dl", "open", "m", "lt_", "ext", "x", "_", "\x00", "\x00", "\x00"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b []byte
		for range r.IntN(40) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		got := nameOffsets(b, names)
		slices.Sort(got)
		assert.Equal(t, searchEach(b, names), got, "%q", b)
	}
}

// BenchmarkNameOffsets: the loader names asked of every output, over a
// string table the size of a large C++ library's (4 MiB of mangled-like
// names, 60 bytes on average).
func BenchmarkNameOffsets(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	const alphabet = "_ZNSt3__1abcdefghijklmnopqrstuvwxyzEv0123456789"
	strtab := []byte{0}
	for len(strtab) < 4<<20 {
		for range 10 + r.IntN(100) {
			strtab = append(strtab, alphabet[r.IntN(len(alphabet))])
		}
		strtab = append(strtab, 0)
	}
	strtab = append(strtab, "__libc_dlopen\x00"...)
	names := []string{"dlopen", "dlmopen", "g_module_open", "g_module_open_full", "lt_dlopen", "lt_dlopenext", "lt_dlopenadvise"}
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			nameOffsets(strtab, names)
		}
	})
	b.Run("search-each", func(b *testing.B) {
		for range b.N {
			searchEach(strtab, names)
		}
	})
}
