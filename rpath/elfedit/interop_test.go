package elfedit_test

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// interopEdits are the edits of ours that a later patchelf run meets: a
// longer RUNPATH with a resolution note (the main job), and without one
// (cudapatch patchelf --set-rpath), where nothing but the moved tables
// lies in the region and patchelf's executable walk asserted that a
// section follows the last one it replaces.
var interopEdits = []struct {
	name string
	edit func(fx fixtures.Fixture) elfedit.Edit
}{
	{"note", func(fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(120, fx.LibDir)), SetNote: cacheNote("interop", 300), Derived: []elfedit.NoteID{cacheID}}
	}},
	{"plain", func(fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(120, fx.LibDir))}
	}},
}

// TestPatchelfAfterUs: a file cudapatch laid out must survive a later run
// of an older patchelf, as nixpkgs' builds make one (a hook that runs after
// cudaPatchelfHook, a postFixup script). Debian's patchelf 0.14.3, like
// nixpkgs' 0.15–0.18, makes room for a program header by moving the
// sections below the grown table that it finds by walking the section
// headers in index order; with headers out of offset order it overwrote
// .gnu.hash and the program died in ld.so's _dl_setup_hash. For every
// dynamic variant: our edit with a note and a longer RUNPATH (a region,
// its program header table grown by two), section headers that patchelf's
// walk takes in order afterwards (walkedInOrder), then patchelf --set-rpath
// with a longer path still, and the result must run and load wherever
// patchelf's own edit of the pristine file does, with every symbol in the
// section of the same name as in the pristine file (patchelf renumbers
// st_shndx when it sorts headers we left out of order).
func TestPatchelfAfterUs(t *testing.T) {
	t.Parallel()
	pe, err := exec.LookPath("patchelf")
	require.NoError(t, err, "patchelf (Debian package patchelf) is needed")
	for _, orig := range dynamic(t) {
		for _, ed := range interopEdits {
			t.Run(orig.Name+"/"+ed.name, func(t *testing.T) {
				t.Parallel()
				fx := orig.Copy(t)
				control := orig.Copy(t)
				use := map[string]func(string) error{"main": runs(t, fx), "libfoo": loads(t, fx)}
				compared := 0
				// libfoo first: main loads it, and it loads libbar through its
				// RUNPATH.
				for _, file := range []string{"libfoo", "main"} {
					path := map[string]string{"main": fx.Exe, "libfoo": fx.Libs[0]}[file]
					rel, err := filepath.Rel(fx.Dir, path)
					require.NoError(t, err)
					_, err = elfedit.EditFile(path, ed.edit(fx), elfedit.Options{})
					require.NoError(t, err, file)
					walkedInOrder(t, path)
					require.NoError(t, use[file](path), "%s after our edit", file)

					longer := pad(400, fx.LibDir)
					ctl := filepath.Join(control.Dir, rel)
					out, err := exec.Command(pe, "--set-rpath", longer, ctl).CombinedOutput()
					require.NoError(t, err, "patchelf on the pristine %s: %s", file, out)
					if err := map[string]func(string) error{"main": runs(t, control), "libfoo": loads(t, control)}[file](ctl); err != nil {
						t.Logf("%s: patchelf's own edit of the pristine file fails (%v); nothing to compare", file, err)
						continue
					}
					compared++
					out, err = exec.Command(pe, "--set-rpath", longer, path).CombinedOutput()
					require.NoError(t, err, "patchelf after us on %s: %s", file, out)
					assert.NoError(t, use[file](path), "%s: patchelf's edit after ours", file)
					assert.Equal(t, symbolSectionNames(t, filepath.Join(orig.Dir, rel)), symbolSectionNames(t, path), "%s: the section of each symbol after patchelf's edit", file)
				}
				if t.Failed() {
					keepOnFailure(t, fx)
				}
				t.Logf("%d of 2 files compared", compared)
			})
		}
	}
}

// walkedInOrder fails unless patchelf up to 0.18 reaches, in its walk of
// the section headers, every section that lies below the program header
// table it grows (rewriteSectionsLibrary): from index 1 while sh_offset <=
// the ELF header plus phnum + (SHT_NOTE sections) + 1 program headers, and
// no further. A section below that end with a header after the walk
// stopped is one patchelf overwrites. Headers in offset order pass;
// headers out of order pass when the disorder is all above that end. An
// ET_EXEC file passes: patchelf takes it through rewriteSectionsExecutable,
// which sorts the headers before it looks at them.
func walkedInOrder(t testing.TB, path string) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	if f.Header.Type == elf.ET_EXEC {
		return
	}
	ehdr := uint64(64)
	if f.Header.Class == elf.ELFCLASS32 {
		ehdr = 52
	}
	notes := 0
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			notes++
		}
	}
	pht := ehdr + uint64(f.Header.Phnum+notes+1)*uint64(f.Header.Phentsize)
	i := 1
	for i < len(f.Sections) && f.Sections[i].Offset <= pht {
		i++
	}
	for j := i; j < len(f.Sections); j++ {
		if f.Sections[j].Offset <= pht {
			t.Errorf("%s: section [%d] %s at 0x%x lies below patchelf's grown table (end 0x%x) but its walk stops at [%d] %s at 0x%x",
				filepath.Base(path), j, f.Sections[j].Name, f.Sections[j].Offset, pht, i, f.Sections[i].Name, f.Sections[i].Offset)
		}
	}
}

// TestSafeDisorderKeepsSymbolIndices: headers whose disorder patchelf's
// walk cannot trip on (a moved .dynstr or .dynamic, a table that moved
// into the region, any disorder of an ET_EXEC file, whose headers patchelf
// sorts before it walks them) are left in their order, so that no symbol
// is renumbered: sorting them would rewrite every st_shndx after the first
// moved section, all of .dynsym and .symtab. The matrix has such edits,
// and every non-PIE executable's region moves its .interp.
func TestSafeDisorderKeepsSymbolIndices(t *testing.T) {
	t.Parallel()
	unsorted, execs := 0, 0
	for _, orig := range dynamic(t) {
		fx := orig.Copy(t)
		for _, path := range []string{fx.Libs[0], fx.Exe} {
			before := symbolSections(t, path)
			_, err := elfedit.EditFile(path, elfedit.Edit{
				SetPath: str(pad(120, fx.LibDir)),
				SetNote: cacheNote("interop", 300),
				Derived: []elfedit.NoteID{cacheID},
			}, elfedit.Options{})
			require.NoError(t, err, "%s/%s", fx.Name, path)
			f, err := elfedit.Open(path)
			require.NoError(t, err)
			inOrder := true
			for i := 2; i < len(f.Sections); i++ {
				inOrder = inOrder && f.Sections[i].Offset >= f.Sections[i-1].Offset
			}
			exec := f.Header.Type == elf.ET_EXEC
			require.NoError(t, f.Close())
			if exec {
				execs++
				assert.False(t, inOrder, "%s/%s: an ET_EXEC file whose .interp moved keeps its headers' order", fx.Name, filepath.Base(path))
			}
			if inOrder {
				continue
			}
			unsorted++
			walkedInOrder(t, path)
			assert.Equal(t, before, symbolSections(t, path), "%s/%s: st_shndx of each symbol", fx.Name, filepath.Base(path))
		}
	}
	t.Logf("%d edited files keep headers out of order, %d ET_EXEC files edited", unsorted, execs)
	assert.Positive(t, unsorted, "edits that leave the headers in their order")
	assert.Positive(t, execs, "ET_EXEC files edited")
}

// symbolSections lists the section index of every symbol of .dynsym, then
// of .symtab.
func symbolSections(t testing.TB, path string) []elf.SectionIndex {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []elf.SectionIndex
	dyn, err := f.DynamicSymbols()
	require.NoError(t, err)
	syms, err := f.Symbols()
	if !errors.Is(err, elf.ErrNoSymbols) {
		require.NoError(t, err)
	}
	for _, s := range append(dyn, syms...) {
		out = append(out, s.Section)
	}
	return out
}

// symbolSectionNames lists, for every symbol of .dynsym and then of
// .symtab, the name of its section (or its special index), which a sort
// of the section headers must keep.
func symbolSectionNames(t testing.TB, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	for _, i := range symbolSections(t, path) {
		if i == elf.SHN_UNDEF || i >= elf.SHN_LORESERVE || int(i) >= len(f.Sections) {
			out = append(out, i.GoString())
			continue
		}
		out = append(out, f.Sections[i].Name)
	}
	return out
}

// TestPatchelfOpsAfterUs: beyond --set-rpath (TestPatchelfAfterUs), the
// patchelf operations a build may run after a fixup hook, on an executable
// we edited (with a note and without), must leave a program that runs
// wherever the same operation after patchelf's own edit does: a longer
// interpreter (.interp replaced), a longer DT_NEEDED name (.dynstr and
// .gnu.version_r), --add-rpath, --force-rpath with a longer path. Without
// the section name table closing an ET_EXEC region, the lld and mold
// non-PIE executables aborted patchelf. (--add-needed is left to
// scripts/patchelf-after.sh: patchelf up to 0.18 puts a grown .dynamic
// in a read-only page of a non-PIE executable whose first page has room,
// whoever made the room; docs/architecture.md, "Other tools afterwards".)
func TestPatchelfOpsAfterUs(t *testing.T) {
	t.Parallel()
	pe, err := exec.LookPath("patchelf")
	require.NoError(t, err, "patchelf (Debian package patchelf) is needed")
	interp := filepath.Join(t.TempDir(), "ld-linux-x86-64-with-a-longer-name-than-before.so.2")
	require.NoError(t, os.Symlink("/lib64/ld-linux-x86-64.so.2", interp))
	const renamed = "libfoo-renamed-with-a-longer-name.so"
	ops := []struct {
		name string
		args func(fx fixtures.Fixture) []string
	}{
		{"set-interpreter", func(fixtures.Fixture) []string { return []string{"--set-interpreter", interp} }},
		{"replace-needed", func(fixtures.Fixture) []string { return []string{"--replace-needed", "libfoo.so", renamed} }},
		{"add-rpath", func(fixtures.Fixture) []string { return []string{"--add-rpath", pad(200, "/nonexistent")} }},
		{"force-rpath", func(fx fixtures.Fixture) []string {
			return []string{"--force-rpath", "--set-rpath", pad(300, fx.LibDir)}
		}},
	}
	compared := 0
	for _, orig := range fixtures.Native(t) {
		if orig.Static {
			continue
		}
		for _, ed := range interopEdits {
			for _, op := range ops {
				fx, control := orig.Copy(t), orig.Copy(t)
				for _, lib := range []string{fx.Libs[0], control.Libs[0]} {
					copyFile(t, lib, filepath.Join(filepath.Dir(lib), renamed))
				}
				for _, path := range []string{fx.Libs[0], filepath.Join(fx.LibDir, renamed), fx.Exe} {
					_, err := elfedit.EditFile(path, ed.edit(fx), elfedit.Options{})
					require.NoError(t, err, "%s: our edit of %s", orig.Name, path)
				}
				for _, path := range []string{control.Libs[0], filepath.Join(control.LibDir, renamed), control.Exe} {
					out, err := exec.Command(pe, "--set-rpath", control.LibDir, path).CombinedOutput()
					require.NoError(t, err, "%s: patchelf --set-rpath %s: %s", orig.Name, path, out)
				}
				name := fmt.Sprintf("%s/%s/%s", orig.Name, ed.name, op.name)
				out, err := exec.Command(pe, append(op.args(control), control.Exe)...).CombinedOutput()
				require.NoError(t, err, "%s: patchelf after patchelf: %s", name, out)
				if err := runs(t, control)(control.Exe); err != nil {
					t.Logf("%s: fails after patchelf's own edit too (%v); nothing to compare", name, err)
					continue
				}
				compared++
				out, err = exec.Command(pe, append(op.args(fx), fx.Exe)...).CombinedOutput()
				if assert.NoError(t, err, "%s: patchelf after us: %s", name, out) {
					assert.NoError(t, runs(t, fx)(fx.Exe), "%s: the program after patchelf's edit of ours", name)
				}
			}
		}
	}
	t.Logf("%d cases compared", compared)
	assert.Positive(t, compared)
}
