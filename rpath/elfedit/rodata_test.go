package elfedit_test

import (
	"bytes"
	"debug/elf"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestImportsSymbol holds ImportedSymbols, which reads the dynamic symbols
// through DT_SYMTAB and the hash tables, to debug/elf's ImportedSymbols
// (section headers) on every dynamic variant of the matrix: every
// architecture, linker and hash style. loadlib calls dlopen; main and the
// libraries do not.
func TestImportsSymbol(t *testing.T) {
	for _, fx := range dynamic(t) {
		t.Run(fx.Name, func(t *testing.T) {
			for _, path := range append([]string{fx.Exe, fx.LoadLib}, fx.Libs...) {
				want := importsByDebugELF(t, path, "dlopen")
				require.Equal(t, path == fx.LoadLib, want, "%s: the fixture's premise", path)
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				got, err := importsAny(f, "dlmopen", "dlopen")
				require.NoError(t, err)
				require.Equal(t, want, got, path)
				// Each name answered alone, in one scan: names sharing
				// "open" (the common text), one a suffix of another
				// (dlopen in lt_dlopen's string), one held by none, one
				// asked twice.
				names := []string{"dlmopen", "dlopen", "lt_dlopen", "fopen", "no_such_open", "dlopen"}
				each, err := f.ImportedSymbols(names...)
				require.NoError(t, err)
				for k, n := range names {
					require.Equal(t, importsByDebugELF(t, path, n), each[k], "%s: %s", path, n)
				}
				// A defined symbol is no import: libfoo.so defines foo.
				if strings.HasSuffix(path, "libfoo.so") {
					got, err = importsAny(f, "foo")
					require.NoError(t, err)
					require.False(t, got, "%s defines foo", path)
				}
				f.Close()
			}
		})
	}
}

// importsAny reports whether f imports one of names.
func importsAny(f *elfedit.File, names ...string) (bool, error) {
	got, err := f.ImportedSymbols(names...)
	return slices.Contains(got, true), err
}

func importsByDebugELF(t *testing.T, path, name string) bool {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	syms, err := ef.ImportedSymbols()
	require.NoError(t, err)
	return slices.ContainsFunc(syms, func(s elf.ImportedSymbol) bool { return s.Name == name })
}

// TestReadOnlyStrings holds ReadOnlyStrings to the NUL-terminated strings
// debug/elf finds in the .rodata sections, for every chunk size down to
// ones that cut most strings: a string is reported whole, in file order,
// exactly when it is shorter than the chunk.
func TestReadOnlyStrings(t *testing.T) {
	for _, fx := range dynamic(t) {
		t.Run(fx.Name, func(t *testing.T) {
			for _, path := range []string{fx.Exe, fx.LoadLib} {
				all := rodataStrings(t, path)
				if path == fx.LoadLib {
					require.Contains(t, all, "loaded", "the fixture's premise")
				}
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				for _, chunk := range []uint64{1 << 20, 4096, 64, 16, 8} {
					for _, sub := range []string{"", "lo", "\n", "no such string"} {
						var want []string
						for _, s := range all {
							if uint64(len(s)) < chunk && strings.Contains(s, sub) {
								want = append(want, s)
							}
						}
						var got []string
						err := elfedit.ReadOnlyStringsChunked(f, []byte(sub), chunk, func(s []byte) bool {
							got = append(got, string(s))
							return true
						})
						require.NoError(t, err)
						require.Equal(t, want, got, "%s: chunk %d, strings with %q", path, chunk, sub)
					}
				}
				// Stopping early.
				n := 0
				require.NoError(t, f.ReadOnlyStrings(nil, func([]byte) bool { n++; return n < 2 }))
				require.Equal(t, min(2, len(all)), n)
				f.Close()
			}
		})
	}
}

// TestIndexAt: indexAt finds what bytes.Index finds, whichever byte of
// the needle it looks for first, on random haystacks of a small alphabet
// (so that needles occur, overlap and are cut at both ends); rarest picks
// the byte that occurs least often.
func TestIndexAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = "lib\x00"[rng.IntN(4)]
		}
		return b
	}
	for range 20000 {
		b, sub := word(rng.IntN(40)), word(1+rng.IntN(4))
		want := bytes.Index(b, sub)
		for k := range sub {
			require.Equal(t, want, elfedit.IndexAt(b, sub, k), "Index(%q, %q) looking for byte %d first", b, sub, k)
		}
	}
	require.Equal(t, 2, elfedit.Rarest([]byte("llllliiiib"), []byte("lib")))
	require.Equal(t, 1, elfedit.Rarest([]byte("llllliiiib"), []byte("i\x00")), "a byte of sub absent from b")
	require.Equal(t, 0, elfedit.Rarest(nil, []byte("lib")), "ties go to the first")
}

// rodataStrings splits the .rodata sections debug/elf reads into their
// NUL-terminated strings.
func rodataStrings(t *testing.T, path string) []string {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	var out []string
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Flags&(elf.SHF_WRITE|elf.SHF_EXECINSTR) != 0 ||
			!(s.Name == ".rodata" || strings.HasPrefix(s.Name, ".rodata.")) {
			continue
		}
		b, err := s.Data()
		require.NoError(t, err)
		parts := strings.Split(string(b), "\x00")
		out = append(out, parts[:len(parts)-1]...) // the last is not terminated
	}
	return out
}

// TestReadOnlyStringsWithoutSections: with no section headers, the
// read-only PT_LOAD segments are read, which hold .rodata.
func TestReadOnlyStringsWithoutSections(t *testing.T) {
	for _, fx := range dynamic(t) {
		t.Run(fx.Name, func(t *testing.T) {
			b, err := os.ReadFile(fx.LoadLib)
			require.NoError(t, err)
			ef, err := elf.NewFile(bytes.NewReader(b))
			require.NoError(t, err)
			// e_shoff, e_shnum and e_shstrndx zeroed.
			if ef.Class == elf.ELFCLASS64 {
				clear(b[0x28:0x30])
				clear(b[0x3c:0x40])
			} else {
				clear(b[0x20:0x24])
				clear(b[0x30:0x34])
			}
			path := filepath.Join(t.TempDir(), "loadlib")
			require.NoError(t, os.WriteFile(path, b, 0o755))
			f, err := elfedit.Open(path)
			require.NoError(t, err)
			defer f.Close()
			require.Empty(t, f.Sections)
			var got []string
			require.NoError(t, f.ReadOnlyStrings([]byte("loadlib"), func(s []byte) bool {
				got = append(got, string(s))
				return true
			}))
			// A string right after other data (s390x's _IO_stdin_used
			// ends in 0x01) is read with it: no NUL divides them.
			require.True(t, slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "usage: loadlib LIB\n") }), "%q", got)
			imports, err := importsAny(f, "dlopen")
			require.NoError(t, err)
			require.True(t, imports, "dlopen through DT_HASH, or up to DT_STRTAB")
		})
	}
}
