package elfedit_test

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestInPlaceKeepsTailMergedSymbolNames: GNU ld merges a dynamic symbol's
// name into the tail of a longer .dynstr string ("depfn" inside the
// RUNPATH "$ORIGIN:/nonexistent/depfn", or inside the DT_NEEDED
// "libdep_depfn"), so a string written over in place must not be one a
// symbol name shares. Without section headers and without DT_HASH the
// symbol count came from DT_GNU_HASH alone, which hashes only the defined
// symbols: a non-PIE executable that defines none has symoffset 1 and an
// empty bucket, the count came out as 1, the undefined "depfn" was no
// reference, the shorter value overwrote it, and the program died with
// "symbol lookup error: undefined symbol: XXXXX". The edited program is
// run (LD_LIBRARY_PATH unset) and must still call into libdep. Where
// nothing bounds the table (here a DT_SYMTAB_SHNDX, which the loader
// ignores, put inside it in place of DT_DEBUG) no string is overwritten
// in place: the edit takes another layout.
func TestInPlaceKeepsTailMergedSymbolNames(t *testing.T) {
	const src = "#include <stdio.h>\nint depfn(void);\nint main(void) { printf(\"%d\\n\", depfn()); return 0; }\n"
	lib := cfix.Build(t, cfix.Spec{Soname: "libdep.so", Source: "int depfn(void) { return 42; }\n"})
	libMerged := cfix.Build(t, cfix.Spec{Soname: "libdep_depfn", Source: "int depfn(void) { return 42; }\n"})
	for _, tc := range []struct {
		name        string
		noPIE       bool
		sectionless bool
		needed      bool // the name is a tail of DT_NEEDED (else of RUNPATH)
		unbounded   bool // a table start inside the symbol table: no bound
		unshared    bool // the old RUNPATH shares no bytes: in place if known
	}{
		{name: "runpath/nopie/sectionless", noPIE: true, sectionless: true},
		{name: "runpath/nopie/sections", noPIE: true},
		{name: "runpath/pie/sectionless", sectionless: true},
		{name: "runpath/nopie/sectionless/unbounded", noPIE: true, sectionless: true, unbounded: true},
		{name: "needed/nopie/sectionless", noPIE: true, sectionless: true, needed: true},
		{name: "needed/nopie/sections", noPIE: true, needed: true},
		{name: "unshared/nopie/sectionless", noPIE: true, sectionless: true, unshared: true},
		{name: "unshared/nopie/sectionless/unbounded", noPIE: true, sectionless: true, unshared: true, unbounded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, "main")
			spec := cfix.Spec{Exe: true, NoPIE: tc.noPIE, Libc: true, Source: src, Link: []string{lib}, RunPath: "$ORIGIN:/nonexistent/depfn"}
			oldStr := spec.RunPath
			edit := elfedit.Edit{SetPath: str("$ORIGIN")}
			cfix.Copy(t, lib, filepath.Join(dir, "libdep.so"))
			if tc.needed {
				spec.Link, spec.RunPath, oldStr = []string{libMerged}, "$ORIGIN", "libdep_depfn"
				cfix.Copy(t, libMerged, filepath.Join(dir, "libdep_depfn"))
				edit = elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libdep_depfn", New: "libdep.so"}}}
			}
			if tc.unshared {
				spec.RunPath, oldStr = "$ORIGIN:/nonexistent/unshared", "\x00depfn"
			}
			cfix.Place(t, spec, exe)

			// The premises: ld merged "depfn" into the tail of the old
			// string, and the program runs as linked.
			ef, err := elf.Open(exe)
			require.NoError(t, err)
			syms, err := ef.DynamicSymbols()
			require.NoError(t, err)
			strs, err := ef.Section(".dynstr").Data()
			require.NoError(t, err)
			require.NoError(t, ef.Close())
			require.Equal(t, 1, strings.Count(string(strs), oldStr+"\x00"), "%q not in .dynstr once", oldStr)
			require.NotContains(t, strings.Replace(string(strs), oldStr+"\x00", "", 1), "\x00depfn\x00", "ld did not merge the symbol name into %q", oldStr)
			require.True(t, slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == "depfn" && s.Section == elf.SHN_UNDEF }))
			require.Equal(t, "42\n", runBare(t, exe))

			if tc.unbounded {
				x := newElfBytes(t, readFile(t, exe))
				var symtab uint64
				x.dyn(t, func(_ uint64, tag elf.DynTag, v uint64) {
					if tag == elf.DT_SYMTAB {
						symtab = v
					}
				})
				x.dyn(t, func(off uint64, tag elf.DynTag, _ uint64) {
					if tag == elf.DT_DEBUG {
						x.setDyn(off, elf.DT_SYMTAB_SHNDX, symtab+24)
					}
				})
				require.NoError(t, os.WriteFile(exe, x.b, 0o755))
				require.Equal(t, "42\n", runBare(t, exe))
			}
			if tc.sectionless {
				stripSectionHeaders(t, exe)
			}
			res, err := elfedit.EditFile(exe, edit, elfedit.Options{})
			require.NoError(t, err)
			require.Equal(t, "42\n", runBare(t, exe))
			// The old string is overwritten in place exactly when nothing
			// shares it and that is known.
			if tc.unshared && !tc.unbounded {
				require.Equal(t, elfedit.InPlace, res.Plan.Strategy)
			} else {
				require.NotEqual(t, elfedit.InPlace, res.Plan.Strategy)
			}
		})
	}
}

// runBare runs exe with LD_LIBRARY_PATH unset and returns its output,
// failing the test when it fails.
func runBare(t testing.TB, exe string) string {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LD_LIBRARY_PATH=") })
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", exe, out)
	return string(out)
}

// stripSectionHeaders zeroes e_shoff, e_shnum and e_shstrndx of the file
// at path, as sstrip and some packers leave files: no section header to
// size any table by.
func stripSectionHeaders(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	ef, err := elf.Open(path)
	require.NoError(t, err)
	class := ef.Class
	require.NoError(t, ef.Close())
	if class == elf.ELFCLASS64 {
		clear(b[0x28:0x30])
		clear(b[0x3c:0x40])
	} else {
		clear(b[0x20:0x24])
		clear(b[0x30:0x34])
	}
	require.NoError(t, os.WriteFile(path, b, 0o755))
}

// TestStringRefsWithoutSectionHeaders: the string references of a file
// whose section headers are gone (e_shoff, e_shnum, e_shstrndx zeroed)
// include every one the file with them has, for each linker and machine
// of the matrix: the dynamic symbol table is then sized from DT_HASH, or
// from DT_GNU_HASH, the relocations and the tables after it. The count
// the symbol edits use (renames, cleared versions) never reads past the
// table: it is at most the .dynsym section's.
func TestStringRefsWithoutSectionHeaders(t *testing.T) {
	for _, fx := range dynamic(t) {
		files := append([]string{fx.Exe, fx.LoadLib}, fx.Libs...)
		for _, file := range files {
			t.Run(fx.Name+"/"+filepath.Base(file), func(t *testing.T) {
				want, wantN := symbolRefs(t, file)
				path := filepath.Join(t.TempDir(), filepath.Base(file))
				copyFile(t, file, path)
				stripSectionHeaders(t, path)
				got, n := symbolRefs(t, path)
				set := map[uint64]bool{}
				for _, r := range got {
					set[r] = true
				}
				for _, r := range want {
					require.True(t, set[r], "reference 0x%x missing without section headers (%d symbols counted of %d)", r, n, wantN)
				}
				require.LessOrEqual(t, n, wantN)
				t.Logf("%d references (%d with section headers), %d of %d symbols reached", len(got), len(want), n, wantN)
			})
		}
	}
}

// symbolRefs returns the string references of the file at path and its
// dynamic symbol count.
func symbolRefs(t testing.TB, path string) ([]uint64, uint64) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	refs, err := elfedit.StringRefs(f)
	require.NoError(t, err)
	n, err := elfedit.SymbolCount(f)
	require.NoError(t, err)
	return refs, n
}

// TestSymbolEditsWithoutSectionHeaders: renaming a symbol and clearing
// its version find the undefined symbols of a file without section
// headers or DT_HASH too (they took their count from DT_GNU_HASH, 1 for a
// non-PIE executable that defines nothing, and left the file as it was).
// The renamed call goes to libdep's other function; the cleared version is
// read back with the section headers the edit never saw put back.
func TestSymbolEditsWithoutSectionHeaders(t *testing.T) {
	const src = "#include <stdio.h>\nint depfn(void);\nint main(void) { printf(\"%d\\n\", depfn()); return 0; }\n"
	lib := cfix.Build(t, cfix.Spec{Soname: "libdep.so", Source: "int depfn(void) { return 42; }\nint depfn2(void) { return 43; }\n"})
	exeBuilt := cfix.Build(t, cfix.Spec{Exe: true, NoPIE: true, Libc: true, Source: src, Link: []string{lib}, RunPath: "$ORIGIN"})
	for _, tc := range []struct {
		name        string
		sectionless bool
		edit        elfedit.Edit
		out         string // what the edited program prints
		printfVer   string // printf's version after the edit
	}{
		{name: "rename/sections", edit: elfedit.Edit{RenameSymbols: map[string]string{"depfn": "depfn2"}}, out: "43\n", printfVer: "GLIBC_2.2.5"},
		{name: "rename/sectionless", sectionless: true, edit: elfedit.Edit{RenameSymbols: map[string]string{"depfn": "depfn2"}}, out: "43\n", printfVer: "GLIBC_2.2.5"},
		{name: "clear-version/sections", edit: elfedit.Edit{ClearSymbolVersion: []string{"printf"}}, out: "42\n"},
		{name: "clear-version/sectionless", sectionless: true, edit: elfedit.Edit{ClearSymbolVersion: []string{"printf"}}, out: "42\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, "main")
			cfix.Copy(t, lib, filepath.Join(dir, "libdep.so"))
			cfix.Copy(t, exeBuilt, exe)
			require.Equal(t, "42\n", runBare(t, exe))
			orig := readFile(t, exe)
			if tc.sectionless {
				stripSectionHeaders(t, exe)
			}
			_, err := elfedit.EditFile(exe, tc.edit, elfedit.Options{})
			require.NoError(t, err)
			require.Equal(t, tc.out, runBare(t, exe))
			if tc.edit.ClearSymbolVersion == nil {
				return
			}
			// Clearing a version is an in-place write of .gnu.version:
			// the section headers still describe the file.
			b := readFile(t, exe)
			copy(b[:0x40], orig[:0x40]) // the ELF header, section header fields included
			ef, err := elf.NewFile(bytes.NewReader(b))
			require.NoError(t, err)
			syms, err := ef.DynamicSymbols()
			require.NoError(t, err)
			i := slices.IndexFunc(syms, func(s elf.Symbol) bool { return s.Name == "printf" })
			require.GreaterOrEqual(t, i, 0)
			require.Equal(t, tc.printfVer, syms[i].Version)
		})
	}
}
