package patchelf_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patchelf"
)

// run runs the drop-in patchelf in-process.
func run(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = patchelf.Main(args, &o, &e)
	return o.String(), e.String(), code
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(args...)
	require.Equal(t, 0, code, "patchelf %q: %s", args, errOut)
	return out
}

// working copies the fixture with a search path that finds its libraries
// (the fixtures are built with a placeholder one).
func working(t *testing.T, name string) fixtures.Fixture {
	t.Helper()
	c := fixtures.ByName(t, name).Copy(t)
	mustRun(t, "--set-rpath", c.LibDir, c.Exe)
	for _, l := range c.Libs {
		mustRun(t, "--set-rpath", c.LibDir, l)
	}
	return c
}

// readelf runs binutils' readelf, the independent reader.
func readelf(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("readelf", append([]string{"-W"}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// patchProgs rewrites, in the 64-bit little-endian file at path, every
// program header of type typ with edit (given the header's 56 bytes), and
// returns the file's new bytes. There must be one.
func patchProgs(t *testing.T, path string, typ elf.ProgType, edit func(ph []byte)) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	o := binary.LittleEndian
	phoff, phnum := o.Uint64(b[32:]), int(o.Uint16(b[56:]))
	found := false
	for i := range phnum {
		if ph := b[phoff+uint64(i)*56:][:56]; elf.ProgType(o.Uint32(ph)) == typ {
			edit(ph)
			found = true
		}
	}
	require.True(t, found, "no %v", typ)
	require.NoError(t, os.WriteFile(path, b, 0o755))
	return b
}

// TestOSABI: --print-os-abi names EI_OSABI as readelf does, --set-os-abi
// takes patchelf's names (case and surrounding blanks ignored) and refuses
// others with patchelf's message; the program runs again once set back.
func TestOSABI(t *testing.T) {
	c := working(t, "bfd-pie")
	orig, err := os.ReadFile(c.Exe)
	require.NoError(t, err)
	assert.Equal(t, "System V\n", mustRun(t, "--print-os-abi", c.Exe))
	for _, tc := range []struct{ arg, print, readelf string }{
		{"linux", "Linux", "UNIX - GNU"}, {" FreeBSD\t", "FreeBSD", "UNIX - FreeBSD"}, {"gnu", "Linux", "UNIX - GNU"},
		{"GNU Hurd", "GNU Hurd", "<unknown: 4>"}, {"hp-ux", "HP-UX", "UNIX - HP-UX"}, {"System-V", "System V", "UNIX - System V"},
	} {
		mustRun(t, "--set-os-abi", tc.arg, c.Exe)
		assert.Equal(t, tc.print+"\n", mustRun(t, "--print-os-abi", c.Exe), tc.arg)
		assert.Contains(t, readelf(t, "-h", c.Exe), "OS/ABI:                            "+tc.readelf, tc.arg)
	}
	_, errOut, code := run("--set-os-abi", "GNU/Linux", c.Exe)
	assert.Equal(t, 1, code)
	assert.Equal(t, "patchelf: unrecognized OS ABI\n", errOut)
	// Printing shows the value before the change of the same run.
	assert.Equal(t, "System V\n", mustRun(t, "--print-os-abi", "--set-os-abi", "linux", c.Exe))
	mustRun(t, "--set-os-abi", "system v", c.Exe)
	now, err := os.ReadFile(c.Exe)
	require.NoError(t, err)
	assert.Equal(t, orig, now, "set back, the file is byte-identical")
	out, err := c.Run(t, c.Exe)
	require.NoError(t, err)
	assert.Equal(t, c.Want+"\n", out)
}

// TestExecstack: the stack flag of PT_GNU_STACK, printed, set and cleared
// in one four-byte write; set then cleared gives the original bytes; a
// print in the same run leaves it alone, and clear wins over set, as in
// patchelf.
func TestExecstack(t *testing.T) {
	c := working(t, "bfd-pie")
	lib := c.Libs[0]
	orig, err := os.ReadFile(lib)
	require.NoError(t, err)
	assert.Equal(t, "execstack: -\n", mustRun(t, "--print-execstack", lib))
	assert.Equal(t, "execstack: -\n", mustRun(t, "--print-execstack", "--set-execstack", lib))
	assert.Equal(t, "execstack: -\n", mustRun(t, "--print-execstack", lib), "a print leaves the flag alone")
	mustRun(t, "--set-execstack", "--clear-execstack", lib)
	assert.Equal(t, "execstack: -\n", mustRun(t, "--print-execstack", lib), "clear wins")
	mustRun(t, "--set-execstack", lib)
	assert.Equal(t, "execstack: X\n", mustRun(t, "--print-execstack", lib))
	assert.Regexp(t, `GNU_STACK +0x0+ 0x0+ 0x0+ 0x0+ 0x0+ RWE`, readelf(t, "-l", lib))
	now, err := os.ReadFile(lib)
	require.NoError(t, err)
	assert.LessOrEqual(t, diffBytes(orig, now), 4, "one p_flags word")
	require.NoError(t, c.Load(t, lib))
	mustRun(t, "--clear-execstack", lib)
	now, err = os.ReadFile(lib)
	require.NoError(t, err)
	assert.Equal(t, orig, now, "set then cleared, the file is byte-identical")
}

func diffBytes(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// TestDynamicFlags: --add-debug-tag adds DT_DEBUG (once), --no-default-lib
// sets DF_1_NODEFLIB, as readelf reads them; with the flag the loader no
// longer looks in the default directories for the executable's
// dependencies, so libc is not found: the flag took effect.
func TestDynamicFlags(t *testing.T) {
	c := working(t, "bfd-pie")
	lib := c.Libs[0]
	require.NotContains(t, readelf(t, "-d", lib), "(DEBUG)")
	mustRun(t, "--add-debug-tag", lib)
	mustRun(t, "--add-debug-tag", lib)
	assert.Equal(t, 1, strings.Count(readelf(t, "-d", lib), "(DEBUG)"))
	require.NoError(t, c.Load(t, lib))

	mustRun(t, "--no-default-lib", c.Exe)
	assert.Regexp(t, `\(FLAGS_1\) +Flags: .*NODEFLIB`, readelf(t, "-d", c.Exe))
	out, err := c.Run(t, c.Exe)
	require.Error(t, err, "%s", out)
	assert.Contains(t, out, "libc.so.6: cannot open shared object file")
}

// TestClearSymbolVersion: the .gnu.version entries of the named symbols
// become 1 (global), as readelf shows, in one write; the program runs.
func TestClearSymbolVersion(t *testing.T) {
	c := working(t, "bfd-pie")
	before := readelf(t, "--dyn-syms", c.Exe)
	require.Regexp(t, `__libc_start_main@GLIBC_`, before)
	mustRun(t, "--clear-symbol-version", "__libc_start_main", "--clear-symbol-version", "nosuchsymbol", c.Exe)
	after := readelf(t, "--dyn-syms", c.Exe)
	assert.NotRegexp(t, `__libc_start_main@`, after)
	out, err := c.Run(t, c.Exe)
	require.NoError(t, err)
	assert.Equal(t, c.Want+"\n", out)
}

// TestArgsFromFile: "@FILE" stands for FILE's content; a missing FILE is
// patchelf's "getting info about" error.
func TestArgsFromFile(t *testing.T) {
	c := working(t, "bfd-pie")
	arg := filepath.Join(t.TempDir(), "rpath")
	require.NoError(t, os.WriteFile(arg, []byte(c.LibDir+":/from/a/file"), 0o644))
	mustRun(t, "--set-rpath", "@"+arg, c.Exe)
	assert.Equal(t, c.LibDir+":/from/a/file\n", mustRun(t, "--print-rpath", c.Exe))
	_, errOut, code := run("--add-rpath", "@/nonexistent/file", c.Exe)
	assert.Equal(t, 1, code)
	assert.Equal(t, "patchelf: getting info about '/nonexistent/file': No such file or directory\n", errOut)
}

// TestOutputDevNull: --output to something that is not a regular file gets
// the result through a temporary copy, and keeps its own mode.
func TestOutputDevNull(t *testing.T) {
	c := working(t, "bfd-pie")
	st, err := os.Stat("/dev/null")
	require.NoError(t, err)
	mustRun(t, "--set-rpath", "/x", "--output", "/dev/null", c.Exe)
	st2, err := os.Stat("/dev/null")
	require.NoError(t, err)
	assert.Equal(t, st.Mode(), st2.Mode())
	assert.NotEqual(t, "/x\n", mustRun(t, "--print-rpath", c.Exe), "the input is untouched")
}

// TestDebugObject: a separate debug object (objcopy --only-keep-debug) has
// an empty .dynamic: --print-rpath prints an empty line and a search path
// change does nothing, as in patchelf.
func TestDebugObject(t *testing.T) {
	c := working(t, "bfd-pie")
	dbg := filepath.Join(t.TempDir(), "libfoo.so.debug")
	out, err := exec.Command("objcopy", "--only-keep-debug", c.Libs[0], dbg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	before, err := os.ReadFile(dbg)
	require.NoError(t, err)
	assert.Equal(t, "\n", mustRun(t, "--print-rpath", dbg))
	mustRun(t, "--set-rpath", "/x", dbg)
	after, err := os.ReadFile(dbg)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}

// TestInvalidELF: files broken in one field each get patchelf's message
// (tests/invalid-elf.sh), exit 1, and stay as they were.
func TestInvalidELF(t *testing.T) {
	c := working(t, "bfd-pie")
	base, err := os.ReadFile(c.Exe)
	require.NoError(t, err)
	ef, err := elf.NewFile(bytes.NewReader(base))
	require.NoError(t, err)
	o := binary.LittleEndian
	shoff := o.Uint64(base[40:])
	shdr := func(i, field int) int { return int(shoff) + i*64 + field }
	shstr := ef.Sections[o.Uint16(base[62:])]
	dyn, dynstr := ef.Section(".dynamic"), ef.Section(".dynstr")
	dynIdx := sectionIndex(ef, ".dynamic")
	for _, tc := range []struct {
		name string
		poke func(b []byte)
		args []string
		msg  string
	}{
		{"shstrndx", func(b []byte) { o.PutUint16(b[62:], 0xffff) }, nil, "string table index out of bounds"},
		{"shentsize", func(b []byte) { o.PutUint16(b[58:], 48) }, nil, "section headers have wrong size"},
		{"shstrtab size", func(b []byte) { o.PutUint64(b[shdr(int(o.Uint16(b[62:])), 32):], 1<<62) }, nil, "data region extends past file end"},
		{"shstrtab empty", func(b []byte) { o.PutUint64(b[shdr(int(o.Uint16(b[62:])), 32):], 0) }, nil, "string table size is zero"},
		{"shstrtab not terminated", func(b []byte) { b[shstr.Offset+shstr.Size-1] = 'A' }, nil, "string table is not zero terminated"},
		{"section name", func(b []byte) { o.PutUint32(b[shdr(1, 0):], 0x7fffffff) }, nil, "section name offset out of bounds"},
		{"dynamic offset", func(b []byte) { o.PutUint64(b[shdr(dynIdx, 24):], 1<<62) }, []string{"--print-needed"}, "data offset extends past file end"},
		{"dynamic unaligned", func(b []byte) { o.PutUint64(b[shdr(dynIdx, 24):], dyn.Offset+1) }, []string{"--print-needed"}, "section content is not naturally aligned"},
		{"dynstr index", func(b []byte) { o.PutUint64(b[neededEntry(t, ef, dyn)+8:], 1<<40) }, []string{"--print-needed"}, "string table index out of bounds"},
		{"dynstr not terminated", func(b []byte) { b[dynstr.Offset+dynstr.Size-1] = 'A' }, []string{"--print-needed"}, "string table is not NUL-terminated"},
		{"dynamic not terminated", func(b []byte) {
			for i := dyn.Offset; i < dyn.Offset+dyn.Size; i++ {
				b[i] = 0xff
			}
		}, []string{"--add-debug-tag"}, "setSubstr: write extends past end of section"},
		{"program headers", func(b []byte) { o.PutUint64(b[32:], 1<<62) }, nil, "program header table out of bounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			tc.poke(b)
			p := filepath.Join(t.TempDir(), "main")
			require.NoError(t, os.WriteFile(p, b, 0o755))
			args := append(append([]string{}, tc.args...), "--set-rpath", "/x", p)
			if tc.args != nil {
				args = append(append([]string{}, tc.args...), p)
			}
			_, errOut, code := run(args...)
			assert.Equal(t, 1, code, errOut)
			assert.Contains(t, errOut, tc.msg)
			after, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, b, after, "file changed")
		})
	}
	t.Run("unnamed section", func(t *testing.T) {
		// A section a dynamic symbol of the library is defined in loses
		// its name.
		base, err := os.ReadFile(c.Libs[0])
		require.NoError(t, err)
		ef, err := elf.NewFile(bytes.NewReader(base))
		require.NoError(t, err)
		shoff := o.Uint64(base[40:])
		shdr := func(i, field int) int { return int(shoff) + i*64 + field }
		syms, err := ef.DynamicSymbols()
		require.NoError(t, err)
		idx := -1
		for _, s := range syms {
			if s.Section > 0 && s.Section < elf.SHN_LORESERVE {
				idx = int(s.Section)
			}
		}
		require.Positive(t, idx, "no defined dynamic symbol")
		b := append([]byte(nil), base...)
		o.PutUint32(b[shdr(idx, 0):], 0)
		p := filepath.Join(t.TempDir(), "main")
		require.NoError(t, os.WriteFile(p, b, 0o755))
		_, errOut, code := run("--set-rpath", "/x", p)
		assert.Equal(t, 0, code, errOut)
		assert.Regexp(t, `warning: .* refers to an unnamed section`, errOut)
	})
}

func sectionIndex(ef *elf.File, name string) int {
	for i, s := range ef.Sections {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// neededEntry is the file offset of the first DT_NEEDED entry.
func neededEntry(t *testing.T, ef *elf.File, dyn *elf.Section) int {
	d, err := dyn.Data()
	require.NoError(t, err)
	for off := 0; off+16 <= len(d); off += 16 {
		if elf.DynTag(binary.LittleEndian.Uint64(d[off:])) == elf.DT_NEEDED {
			return int(dyn.Offset) + off
		}
	}
	t.Fatal("no DT_NEEDED")
	return 0
}

// TestHighAddresses: a library linked at 0x6000000000000000, where ia64
// puts data (patchelf's tests/no-rpath-ia64), gets a search path that
// needs a new segment above its own.
func TestHighAddresses(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libhigh.so")
	fixtures.Place(t, fixtures.C{Source: "int f(void) { return 1; }\n", Args: []string{"-shared", "-fPIC", "-nostdlib", "-Wl,-Ttext-segment=0x6000000000000000"}}, lib)
	long := "/" + strings.Repeat("x", 20000)
	mustRun(t, "--set-rpath", long, lib)
	assert.Equal(t, long+"\n", mustRun(t, "--print-rpath", lib))
	assert.Regexp(t, `LOAD +0x[0-9a-f]+ 0x60000000000[0-9a-f]{5} .* RW `, readelf(t, "-l", lib))
}

// TestEmptyDynamic: a PT_DYNAMIC of size 0 (patchelf's tests/empty-note)
// describes no dynamic linking; the interpreter can still be set.
func TestEmptyDynamic(t *testing.T) {
	c := working(t, "bfd-pie")
	patchProgs(t, c.Exe, elf.PT_DYNAMIC, func(ph []byte) {
		clear(ph[8:48]) // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
	})
	mustRun(t, "--set-interpreter", "/lib64/ld.so", c.Exe)
	assert.Equal(t, "/lib64/ld.so\n", mustRun(t, "--print-interpreter", c.Exe))
	// patchelf reads .dynamic through its section header and prints the
	// names; the loader has no dynamic section to read, and neither do we.
	_, errOut, code := run("--print-needed", c.Exe)
	assert.Equal(t, 1, code)
	assert.Equal(t, "patchelf: section '.dynamic' is not loaded (no PT_DYNAMIC describes it), so no loader reads it\n", errOut)
}

// TestReplaceNeededVersioned: renaming a DT_NEEDED that symbol versions
// are needed from renames the file of its .gnu.version_r record too, in
// the same commit: glibc's _dl_check_map_versions asserts that every
// vn_file names a loaded object (patchelf's property-rewrite.sh breaks a
// program that way when it does not). The program runs under the new name.
func TestReplaceNeededVersioned(t *testing.T) {
	dir := t.TempDir()
	fixtures.Place(t, fixtures.C{Source: "int dep_value(void) { return 42; }\n",
		Files: map[string]string{"dep.map": "LIBDEP_1.0 { global: dep_value; local: *; };\n"},
		Args:  []string{"-shared", "-fPIC", "-Wl,-soname,libdep.so.0", "-Wl,--version-script=dep.map"}}, filepath.Join(dir, "libdep.so.0"))
	fixtures.Place(t, fixtures.C{Source: "#include <stdio.h>\nint dep_value(void);\nint main(void) { printf(\"%d\\n\", dep_value()); return 0; }\n",
		Args: []string{"-L" + dir, "-l:libdep.so.0", "-Wl,-rpath," + dir}}, filepath.Join(dir, "app"))
	require.NoError(t, os.Symlink("libdep.so.0", filepath.Join(dir, "dep.so.0")))
	require.NoError(t, os.Symlink("libdep.so.0", filepath.Join(dir, "libdep-renamed-with-a-long-name.so.0")))
	app := filepath.Join(dir, "app")
	// A suffix of the old name (the string is reused), then a new, longer
	// one (appended).
	old := "libdep.so.0"
	for _, name := range []string{"dep.so.0", "libdep-renamed-with-a-long-name.so.0"} {
		mustRun(t, "--replace-needed", old, name, app)
		v := readelf(t, "-V", app)
		assert.Contains(t, v, "File: "+name, "the version requirement follows")
		assert.NotContains(t, v, "File: "+old+" ")
		out, err := exec.Command(app).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, "42\n", string(out))
		old = name
	}
	// The rewritten records live in the region: later edits, which build
	// new regions, carry them along.
	for _, args := range [][]string{
		{"--add-needed", "libdep.so.0"},
		{"--set-rpath", dir + ":/" + strings.Repeat("r", 3000)},
		{"--remove-needed", "libdep.so.0"},
		{"--set-rpath", dir},
		{"--replace-needed", old, "dep.so.0"},
		{"--add-rpath", "/" + strings.Repeat("y", 5000)},
	} {
		mustRun(t, append(args, app)...)
		out, err := exec.Command(app).CombinedOutput()
		require.NoError(t, err, "after %q: %s", args, out)
		assert.Equal(t, "42\n", string(out), "after %q", args)
		assert.Empty(t, mustVerify(t, app), "after %q", args)
	}
}

// mustVerify runs the engine's invariant checks on path.
func mustVerify(t *testing.T, path string) []string {
	t.Helper()
	ps, err := elfedit.VerifyFile(path)
	require.NoError(t, err)
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// TestRenameDynamicSymbols: every dynamic symbol of a library and of the
// program using it renamed, with each hash style (DT_GNU_HASH, DT_HASH,
// both): nm -D and the relocations show the new names, the program runs
// with eager binding, and renaming back gives the original names.
func TestRenameDynamicSymbols(t *testing.T) {
	for _, style := range []string{"gnu", "sysv", "both"} {
		t.Run(style, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, s string) string {
				p := filepath.Join(dir, name)
				require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
				return p
			}
			var lib strings.Builder
			for i := range 300 {
				fmt.Fprintf(&lib, "int f%d(void) { return %d; }\n", i, i)
			}
			lib.WriteString("int total(void) { int s = 0;\n")
			for i := range 300 {
				fmt.Fprintf(&lib, "s += f%d();\n", i)
			}
			lib.WriteString("return s; }\n")
			fixtures.Place(t, fixtures.C{Source: lib.String(), Args: []string{"-shared", "-fPIC", "-Wl,--hash-style=" + style, "-Wl,-soname,libmany.so"}}, filepath.Join(dir, "libmany.so"))
			fixtures.Place(t, fixtures.C{Source: "#include <stdio.h>\nint total(void); int f299(void);\nint main(void) { printf(\"%d %d\\n\", total(), f299()); return 0; }\n",
				Args: []string{"-Wl,--hash-style=" + style, "-L" + dir, "-lmany", "-Wl,-rpath," + dir}}, filepath.Join(dir, "app"))
			app, so := filepath.Join(dir, "app"), filepath.Join(dir, "libmany.so")
			defined := func(p string) []string {
				out, err := exec.Command("nm", "-D", "--defined-only", p).CombinedOutput()
				require.NoError(t, err, "%s", out)
				var names []string
				for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					f := strings.Fields(l)
					names = append(names, f[len(f)-1])
				}
				return names
			}
			orig := defined(so)
			var fwd, back strings.Builder
			for _, n := range orig {
				fmt.Fprintf(&fwd, "%s %s_renamed\n", n, n)
				fmt.Fprintf(&back, "%s_renamed %s\n", n, n)
			}
			mapFile, backFile := write("map", fwd.String()), write("rmap", back.String())
			mustRun(t, "--rename-dynamic-symbols", mapFile, so)
			mustRun(t, "--rename-dynamic-symbols", mapFile, app)
			assert.Contains(t, defined(so), "f150_renamed")
			assert.NotContains(t, defined(so), "f150")
			assert.Contains(t, readelf(t, "-r", app), "total_renamed")
			assert.Empty(t, mustVerify(t, so))
			cmd := exec.Command(app)
			cmd.Env = append(os.Environ(), "LD_BIND_NOW=1")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, "44850 299\n", string(out))
			mustRun(t, "--rename-dynamic-symbols", backFile, so)
			assert.Equal(t, orig, defined(so))
		})
	}
}

// TestInterpOverNotes: a PT_INTERP that covers more than .interp (a linker
// script can put notes under it; patchelf's contiguous-note-sections test
// has a build-id note there) is not the interpreter's to overwrite. Here
// PT_INTERP of a working program is stretched over the notes after .interp
// (the kernel reads up to the first NUL, so the program still runs). A new,
// shorter interpreter written in place with NUL padding would wipe those
// notes; it goes elsewhere, every note reads back the same, and the
// program runs with the new interpreter. As in patchelf's test, the note
// may also be in no PT_NOTE ("unlisted": its PT_NOTE retyped PT_NULL): the
// note headers then disagree, which stops an edit of notes, but
// --set-interpreter, which only names the resolution cache among the notes
// it would drop, writes none and was refused all the same.
func TestInterpOverNotes(t *testing.T) {
	for _, unlisted := range []bool{false, true} {
		t.Run(fmt.Sprintf("unlisted=%v", unlisted), func(t *testing.T) {
			c := working(t, "bfd-pie")
			ef, err := elf.Open(c.Exe)
			require.NoError(t, err)
			interp := ef.Section(".interp")
			require.NotNil(t, interp)
			// The first note section after .interp (GNU ld puts
			// .note.gnu.property or .note.gnu.build-id there).
			var start, end uint64
			for _, s := range ef.Sections {
				if s.Type == elf.SHT_NOTE && s.Offset >= interp.Offset+interp.Size && s.Offset-(interp.Offset+interp.Size) < 16 {
					start, end = s.Offset, s.Offset+s.Size
					break
				}
			}
			ef.Close()
			require.NotZero(t, end, "no note section after .interp")
			o := binary.LittleEndian
			patchProgs(t, c.Exe, elf.PT_INTERP, func(ph []byte) {
				require.Equal(t, interp.Offset, o.Uint64(ph[8:]))
				o.PutUint64(ph[32:], end-interp.Offset) // p_filesz
				o.PutUint64(ph[40:], end-interp.Offset) // p_memsz
			})
			if unlisted {
				retyped := 0
				patchProgs(t, c.Exe, elf.PT_NOTE, func(ph []byte) {
					if o.Uint64(ph[8:]) == start && o.Uint64(ph[32:]) == end-start {
						o.PutUint32(ph, uint32(elf.PT_NULL))
						retyped++
					}
				})
				require.Equal(t, 1, retyped, "a PT_NOTE of that note section alone")
				require.Contains(t, mustRun(t, "--print-interpreter", c.Exe), "ld-linux")
			}
			out, err := c.Run(t, c.Exe)
			require.NoError(t, err, "the stretched PT_INTERP does not run: %s", out)
			// readelf -n, one block a note section, in any order (moved notes
			// come in another section header order).
			notes := func() []string {
				blocks := strings.Split(readelf(t, "-n", c.Exe), "Displaying notes found in: ")
				for i := range blocks {
					blocks[i] = strings.TrimSpace(blocks[i])
				}
				slices.Sort(blocks)
				return blocks
			}
			notesBefore := notes()
			require.Greater(t, len(notesBefore), 2)

			const short = "/lib64/ld-linux-x86-64.so.2"
			real, err := filepath.EvalSymlinks(short)
			require.NoError(t, err)
			_, errOut, code := run("--set-interpreter", real, c.Exe)
			require.Equal(t, 0, code, errOut)
			assert.Equal(t, real+"\n", mustRun(t, "--print-interpreter", c.Exe))
			assert.Equal(t, notesBefore, notes(), "notes under the old PT_INTERP changed")
			out, err = c.Run(t, c.Exe)
			require.NoError(t, err, "%s", out)
			assert.Equal(t, c.Want+"\n", out)
		})
	}
}

// TestNoteSectionAlignedEight: a loaded note section whose alignment is 8
// but whose notes are laid out with 4 (a 13-byte name; patchelf's
// contiguous-note-sections test has one, and readelf warns and stops on it)
// is read with 4, so edits that must look for a resolution note to drop (a
// new interpreter here) go through, and the note is kept as it was.
func TestNoteSectionAlignedEight(t *testing.T) {
	dir := t.TempDir()
	asm := `
	.section .note.eight,"a",@note
	.balign 8
	.long 13, 4, 1
	.asciz "a-note-owner"
	.balign 4
	.long 0xefbeadde
`
	exe := filepath.Join(dir, "main")
	fixtures.Place(t, fixtures.C{Source: "int main(void) { return 7; }\n", Files: map[string]string{"note.s": asm}, Args: []string{"note.s"}}, exe)
	// The hard case: readelf reads the section with 8 and gives up.
	assert.Contains(t, readelf(t, "-n", exe), "note with invalid namesz and/or descsz")

	f, err := elfedit.Open(exe)
	require.NoError(t, err)
	notes, err := f.Notes()
	f.Close()
	require.NoError(t, err)
	var found bool
	for _, n := range notes {
		if n.Owner == "a-note-owner" {
			found = true
			assert.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef}, n.Desc)
			assert.Equal(t, ".note.eight", n.Section)
			assert.True(t, n.Loaded)
		}
	}
	assert.True(t, found, "the note was not read: %v", notes)

	before, err := os.ReadFile(exe)
	require.NoError(t, err)
	i := bytes.Index(before, []byte("a-note-owner"))
	require.Greater(t, i, 12)
	note := before[i-12 : i+20]
	real, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
	require.NoError(t, err)
	_, errOut, code := run("--set-interpreter", real, exe)
	require.Equal(t, 0, code, errOut)
	after, err := os.ReadFile(exe)
	require.NoError(t, err)
	assert.True(t, bytes.Contains(after, note), "the note's bytes changed")
	err = exec.Command(exe).Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the program does not run")
	assert.Equal(t, 7, ee.ExitCode())
}

// TestUnloadedDynamic: a .dynamic section that no PT_DYNAMIC describes
// (patchelf's tests/phdr-corruption.so) is refused with a message that says
// so. patchelf writes the search path there and exits 0, but no loader
// reads it: readelf -d of its output finds no dynamic section.
func TestUnloadedDynamic(t *testing.T) {
	c := working(t, "bfd-pie")
	b := patchProgs(t, c.Exe, elf.PT_DYNAMIC, func(ph []byte) {
		binary.LittleEndian.PutUint32(ph, uint32(elf.PT_NULL))
	})
	_, errOut, code := run("--set-rpath", "/x", c.Exe)
	assert.Equal(t, 1, code)
	assert.Equal(t, "patchelf: section '.dynamic' is not loaded (no PT_DYNAMIC describes it), so no loader reads it\n", errOut)
	after, err := os.ReadFile(c.Exe)
	require.NoError(t, err)
	assert.Equal(t, b, after, "the file changed")
}
