package elfedit_test

import (
	"bytes"
	"debug/elf"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestCodeHolds holds CodeHolds to bytes.Contains over each executable
// section debug/elf reads, for words taken from the code at offsets that
// fall across chunk boundaries, a string of the read-only data, and bytes
// found nowhere, at every chunk size down to twice a word's length; and
// CodeHoldsPart, its parts or-ed, to the same, with words across the
// parts' boundaries too.
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
				// Words sharing a prefix of three bytes or more, as
				// sonames do, are looked for where the prefix occurs.
				big := slices.MaxFunc(code, func(a, b []byte) int { return len(a) - len(b) })
				p := big[len(big)/2 : len(big)/2+3]
				var shared [][]byte
				for at := 0; len(shared) < 6; at++ {
					j := bytes.Index(big[at:], p)
					if j < 0 || at+j+8 > len(big) {
						break
					}
					at += j
					shared = append(shared, big[at:at+8])
				}
				shared = append(shared, append(slices.Clone(p), 0xff, 0xfe, 0xfd, 0xfc, 0xfb))
				require.Greater(t, len(shared), 1, "the fixture's premise")
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				for _, ws := range [][][]byte{words, shared} {
					want := make([]bool, len(ws))
					for i, w := range ws {
						for _, c := range code {
							want[i] = want[i] || bytes.Contains(c, w)
						}
					}
					require.Contains(t, want, false, "the fixture's premise")
					require.Contains(t, want, true, "the fixture's premise")
					for _, chunk := range []uint64{1 << 20, 4096, 64, 20, 16} {
						got, err := elfedit.CodeHoldsPartChunked(f, ws, 0, 1, chunk)
						require.NoError(t, err)
						require.Equal(t, want, got, "%s: chunk %d, %q", path, chunk, ws)
					}
				}
				// In parts: words across each share's end, and the
				// parts' answers or-ed are the whole's.
				total := 0
				for _, c := range code {
					total += len(c)
				}
				across := slices.Clone(words)
				for _, parts := range []int{2, 3, 5, 7} {
					for k := 1; k < parts; k++ {
						b, at := total/parts*k, 0
						for _, c := range code {
							if b-3 >= at && b+5 <= at+len(c) {
								across = append(across, c[b-3-at:b+5-at])
							}
							at += len(c)
						}
					}
				}
				want := make([]bool, len(across))
				for i, w := range across {
					for _, c := range code {
						want[i] = want[i] || bytes.Contains(c, w)
					}
				}
				for _, parts := range []int{1, 2, 3, 5, 7} {
					for _, chunk := range []uint64{1 << 20, 64, 16} {
						got := make([]bool, len(across))
						for k := range parts {
							part, err := elfedit.CodeHoldsPartChunked(f, across, k, parts, chunk)
							require.NoError(t, err)
							for i, ok := range part {
								got[i] = got[i] || ok
							}
						}
						require.Equal(t, want, got, "%s: %d parts, chunk %d", path, parts, chunk)
					}
				}
				for _, bad := range [][2]int{{0, 0}, {-1, 2}, {2, 2}} {
					_, err := f.CodeHoldsPart(across, bad[0], bad[1])
					require.Error(t, err, "part %d of %d", bad[0], bad[1])
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
