package elfedit_test

import (
	"bytes"
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestCodeHolds holds CodeHolds to bytes.Contains over each executable
// section debug/elf reads, for words taken from the code at offsets that
// fall across chunk boundaries, a string of the read-only data, and bytes
// found nowhere, at every chunk size down to twice a word's length.
func TestCodeHolds(t *testing.T) {
	for _, fx := range dynamic(t) {
		t.Run(fx.Name, func(t *testing.T) {
			for _, path := range []string{fx.Exe, fx.LoadLib} {
				code := execSections(t, path)
				require.NotEmpty(t, code, "%s: the fixture's premise", path)
				words := [][]byte{[]byte("loaded\x00"), []byte("\xffno such\xfe")}
				for _, at := range []int{0, 9, 13, 60, 63, 100} {
					for _, c := range code {
						if at+8 <= len(c) {
							words = append(words, c[at:at+8])
						}
					}
				}
				last := code[len(code)-1]
				words = append(words, last[len(last)-8:])
				want := make([]bool, len(words))
				for i, w := range words {
					for _, c := range code {
						want[i] = want[i] || bytes.Contains(c, w)
					}
				}
				require.False(t, want[1], "the fixture's premise")
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				for _, chunk := range []uint64{1 << 20, 4096, 64, 20, 16} {
					got, err := elfedit.CodeHoldsChunked(f, words, chunk)
					require.NoError(t, err)
					require.Equal(t, want, got, "%s: chunk %d", path, chunk)
				}
				got, err := f.CodeHolds(nil)
				require.NoError(t, err)
				require.Empty(t, got)
				f.Close()
			}
		})
	}
}

// execSections are the bytes of the allocated, executable PROGBITS
// sections debug/elf reads.
func execSections(t *testing.T, path string) [][]byte {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	var out [][]byte
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			b, err := s.Data()
			require.NoError(t, err)
			out = append(out, b)
		}
	}
	return out
}
