// Package linttest builds the fixture trees of the lint tests: a fake root
// holding a Nix store, a driver link, cuda_compat and toolkit stubs, and
// one file per planted fault next to clean files. The files are small ELF
// objects that gcc links without a libc (-nostdlib), so the tree needs no
// libc to resolve; internal/fixtures.Compile builds and caches them, and
// this package places copies and sets their RUNPATHs and interpreters with
// rpath/elfedit. Paths inside the tree are logical: lint and explain see it
// through --root.
package linttest

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// Store paths of the fixture tree.
const (
	Glibc    = "/nix/store/00000000000000000000000000000000-glibc"
	Interp   = Glibc + "/lib/ld-linux-x86-64.so.2"
	LibFoo   = "/nix/store/11111111111111111111111111111111-libfoo/lib"
	Compat   = "/nix/store/22222222222222222222222222222222-cuda_compat/compat"
	Stubs    = "/nix/store/33333333333333333333333333333333-cudatoolkit/lib/stubs"
	DriverCp = "/nix/store/44444444444444444444444444444444-nvidia-x11/lib"
	Gone     = "/nix/store/55555555555555555555555555555555-gone/lib"
	LibFoo2  = "/nix/store/66666666666666666666666666666666-libfoo2/lib"
	// LibSym is a library that lacks a version, a data object and a
	// function the programs linked against its prototypes use.
	LibSym = "/nix/store/88888888888888888888888888888888-libsym/lib"
	Driver = "/run/opengl-driver/lib"
	// DriverVersion and CompatVersion are the versions the driver link's
	// and cuda_compat's libcuda carry (the GPU machine's: kernel driver
	// 580.159.04, compat 580.95.05).
	DriverVersion = "580.159.04"
	CompatVersion = "580.95.05"
	// OldCompat holds a cuda_compat libcuda older than CompatVersion,
	// behind its versioned file name.
	OldCompat        = "/nix/store/77777777777777777777777777777777-cuda_compat-575/compat"
	OldCompatVersion = "575.57.08"
	// Selector holds the libcuda selector of Compat (rpath/selector),
	// outside the store the tests lint: built with the host's libc.
	Selector  = "/opt/cuda-compat-selector/lib"
	casePrefx = "/nix/store/99999999999999999999999999999999-"
)

// Case is one file of the tree.
type Case struct {
	Name string
	// Rule is the one rule the file breaks; "" for a clean file.
	Rule string
	// Path is the logical path inside the root.
	Path string
	// Host is Path on this machine.
	Host string
	// NoNote is set for a file that has DT_NEEDED names and a DT_RUNPATH
	// but no resolution-cache note: it also draws CP020 when that rule
	// (off by default) is on.
	NoNote bool
}

// Tree is a built fixture tree.
type Tree struct {
	Root  string // the fake root
	Store string // Root/nix/store, where every case lives
	Cases []Case
}

// Host returns logical path p inside the tree.
func (t *Tree) Host(p string) string { return filepath.Join(t.Root, filepath.FromSlash(p)) }

type builder struct {
	tb   testing.TB
	tr   *Tree
	exes map[string]string // prototype programs, built
}

// The sources of the tree's files, under the names their symbol tables
// record.
var (
	libC  = map[string]string{"lib.c": "int lib(void) { return 1; }\n"}
	mainC = map[string]string{"main.c": "int main(void) { return 0; }\n"}
	noteC = map[string]string{"note.c": `#define DESC "[{\"soname\":[\"libcuda.so.1\"],\"feature\":\"cuda\",\"priority\":\"required\"}]"
struct note { unsigned n, d, t; char name[4]; char desc[(sizeof(DESC) + 3) & ~3]; };
__attribute__((section(".note.dlopen"), used, aligned(4)))
static const struct note dl = {4, sizeof(DESC), 0x407c0c0a, "FDO", DESC};
int plugin(void) { return 0; }
`}
)

// compile builds c with gcc -fPIC -nostdlib, so that nothing in the tree
// needs a libc, and returns the built file; place puts a copy in the tree.
func (b *builder) compile(c fixtures.C) string {
	b.tb.Helper()
	c.Args = append([]string{"-fPIC", "-nostdlib"}, c.Args...)
	return fixtures.Compile(b.tb, c)
}

// link compiles files with args.
func (b *builder) link(files map[string]string, args ...string) string {
	b.tb.Helper()
	return b.compile(fixtures.C{Files: files, Args: args})
}

// lib builds a library with the given soname.
func (b *builder) lib(soname string) string {
	b.tb.Helper()
	return b.link(libC, "-shared", "-Wl,-soname,"+soname, "lib.c")
}

// libcuda builds a libcuda.so.1 that carries the strings a real driver of
// the version has: the bare version, a device node, a library named after
// the version; with version "", the device node only.
func (b *builder) libcuda(version string) string {
	b.tb.Helper()
	strs := `"/dev/nvidia%d"`
	if version != "" {
		strs += `, "` + version + `", "libnvidia-pkcs11.so.` + version + `"`
	}
	name := "libcuda-" + version + ".c"
	return b.link(map[string]string{name: `const char *const strs[] = {` + strs + `, 0};
int lib(int i) { return strs[i] != 0; }
`}, "-shared", "-Wl,-soname,libcuda.so.1", name)
}

// place copies the built file from to logical path p and returns p on
// this machine.
func (b *builder) place(from, p string) string {
	b.tb.Helper()
	h := b.tr.Host(p)
	fixtures.CopyFile(b.tb, from, h)
	return h
}

func (b *builder) edit(h string, e elfedit.Edit) {
	b.tb.Helper()
	if _, err := elfedit.EditFile(h, e, elfedit.Options{}); err != nil {
		b.tb.Fatal(err)
	}
}

// exe places a copy of prototype proto at the case's path with the given
// search path (nil: none) and interpreter ("": as linked).
func (b *builder) exe(name, rule, proto string, runpath *string, tag elfedit.PathTag, interp string) {
	p := casePrefx + name + "/bin/" + name
	h := b.place(b.exes[proto], p)
	e := elfedit.Edit{SetPath: runpath, Tag: tag}
	if interp != "" {
		e.Interpreter = &interp
	}
	if !e.IsZero() {
		b.edit(h, e)
	}
	b.tr.Cases = append(b.tr.Cases, Case{name, rule, p, h, runpath != nil && tag != elfedit.TagRPath})
}

// Note placements for linked.
const (
	noNote       = iota
	loadedNote   // linked in: the linker puts it in a PT_NOTE segment
	unloadedNote // objcopy --add-section after linking: in no segment
)

// noteRecord returns a whole ELF note (header, owner, descriptor) of the
// resolution cache, little-endian, 4-byte aligned.
func noteRecord(desc []byte) []byte {
	owner := "NixOS\x00"
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(owner)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, 0x63a86cb6)
	b = append(b, owner...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// NoteDesc builds a resolution-cache descriptor from (name, path list)
// pairs, written in the order given and ended by the empty name.
func NoteDesc(pairs ...string) []byte {
	var b []byte
	for _, p := range pairs {
		b = append(b, p...)
		b = append(b, 0)
	}
	return append(b, 0)
}

// linked links a case program from main.c against libs, with the search
// path and interpreter given to the linker and, as place says, the
// resolution-cache note desc: a real note in a real file, written by the
// toolchain (nothing here depends on cudapatch's own note writer).
func (b *builder) linked(name, rule string, libs []string, runpath string, desc []byte, place int) {
	b.tb.Helper()
	p := casePrefx + name + "/bin/" + name
	c := fixtures.C{Files: map[string]string{"main.c": mainC["main.c"]},
		Args: []string{"-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed", "-Wl,--enable-new-dtags", "-Wl,-rpath," + runpath, "-Wl,--dynamic-linker," + Interp, "main.c"}}
	switch place {
	case loadedNote:
		var asm strings.Builder
		asm.WriteString(".section .note.nixos.ldcache,\"a\",%note\n.balign 4\n")
		for _, c := range noteRecord(desc) {
			fmt.Fprintf(&asm, ".byte %d\n", c)
		}
		asm.WriteString(".section .note.GNU-stack,\"\",%progbits\n")
		c.Files[name+"-note.s"] = asm.String()
		c.Args = append(c.Args, name+"-note.s")
	case unloadedNote:
		c.Files[name+".note"] = string(noteRecord(desc))
		c.Then = [][]string{{"objcopy", "--add-section", ".note.nixos.ldcache=" + name + ".note", "out"}}
	}
	c.Args = append(c.Args, libs...)
	h := b.place(b.compile(c), p)
	b.tr.Cases = append(b.tr.Cases, Case{name, rule, p, h, place == noNote})
}

func str(s string) *string { return &s }

// Build makes the tree in a temporary directory.
func Build(tb testing.TB) *Tree {
	tb.Helper()
	b := &builder{tb: tb, tr: &Tree{Root: filepath.Join(tb.TempDir(), "root")}, exes: map[string]string{}}
	b.tr.Store = b.tr.Host("/nix/store")
	l := b.environment()
	b.programs(l)
	b.cleanCases(l)
	b.faultCases()
	b.noteCases(l)
	b.engineNoteCases()
	b.symbolCases()
	return b.tr
}

// libs are the libraries of the environment the programs link against, as
// built (the tree holds copies).
type libs struct{ cuda, foo, sys, missing string }

// environment: a driver link with libcuda, a store copy of the driver,
// cuda_compat, the toolkit's stubs, libfoo, a system library.
func (b *builder) environment() (l libs) {
	b.tb.Helper()
	// The driver libraries carry their version as real ones do (see
	// rpath/nvdriver); the stub carries none.
	l.cuda = b.libcuda(DriverVersion)
	b.place(l.cuda, Driver+"/libcuda.so.1")
	b.place(l.cuda, DriverCp+"/libcuda.so.1")
	b.place(b.libcuda(CompatVersion), Compat+"/libcuda.so.1")
	b.place(b.libcuda(""), OldCompat+"/libcuda.so."+OldCompatVersion) // known by its name only
	if err := os.Symlink("libcuda.so."+OldCompatVersion, b.tr.Host(OldCompat+"/libcuda.so.1")); err != nil {
		b.tb.Fatal(err)
	}
	b.place(b.lib("libcuda.so.1"), Stubs+"/libcuda.so")
	spec, err := selector.ForCompat(b.tr.Host(Compat), []string{Driver + "/libcuda.so.1"})
	if err == nil {
		err = os.MkdirAll(b.tr.Host(Selector), 0o755)
	}
	if err == nil {
		err = selector.Build(context.Background(), spec, []string{"gcc"}, b.tr.Host(Selector))
	}
	if err != nil {
		b.tb.Fatal(err)
	}
	l.foo = b.lib("libfoo.so")
	b.place(l.foo, LibFoo+"/libfoo.so")
	b.place(l.foo, LibFoo2+"/libfoo.so")
	l.sys = b.lib("libsys.so")
	b.place(l.sys, "/usr/lib/libsys.so")
	if err := os.MkdirAll(b.tr.Host(Glibc+"/lib"), 0o755); err != nil {
		b.tb.Fatal(err)
	}
	l.missing = b.lib("libmissing.so")

	return l
}

// programs are the prototypes the cases are copied from.
func (b *builder) programs(l libs) {
	b.tb.Helper()
	for name, libs := range map[string][]string{
		"foo": {l.foo}, "cuda": {l.cuda, l.foo}, "missing": {l.missing, l.foo}, "sys": {l.sys},
	} {
		b.exes[name] = b.link(mainC, append([]string{"-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed", "-Wl,--disable-new-dtags", "main.c"}, libs...)...)
	}
	// A program whose RUNPATH has an empty entry: elfedit refuses to write
	// one, so the linker does.
	b.exes["empty"] = b.link(mainC, "-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed", "-Wl,--enable-new-dtags", "-Wl,-rpath,"+LibFoo+":", "-Wl,--dynamic-linker,"+Interp, "main.c", l.foo)
}

// cleanCases are files no rule finds a fault in.
func (b *builder) cleanCases(l libs) {
	b.tb.Helper()
	// Clean files. Their notes are what cudapatch's rules give (issue 11):
	// the driver link is a "?" hint for every name, in RUNPATH order; the
	// driver's libcuda gets no "=" after it (cuda_compat's, before it, does);
	// $ORIGIN entries are "?" hints.
	b.linked("clean", "", []string{l.cuda, l.foo}, Driver+":"+LibFoo,
		NoteDesc("libcuda.so.1", "?"+Driver, "libfoo.so", "?"+Driver+":="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("clean-compat", "", []string{l.cuda, l.foo}, Compat+":"+Driver+":"+LibFoo,
		NoteDesc("libcuda.so.1", "="+Compat+"/libcuda.so.1:?"+Driver, "libfoo.so", "?"+Driver+":="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("clean-origin", "", []string{l.foo}, "$ORIGIN/../lib:"+LibFoo,
		NoteDesc("libfoo.so", "?$ORIGIN/../lib:="+LibFoo+"/libfoo.so"), loadedNote)
	if err := os.MkdirAll(b.tr.Host(casePrefx+"clean-origin/lib"), 0o755); err != nil {
		b.tb.Fatal(err)
	}
	// Two $ORIGIN entries, as --relativize-rpath writes them: joined with
	// ':' they spell no directory ("lib:$ORIGIN" is not there), though
	// path.Clean would make the join .../etc.
	b.linked("clean-origins", "", []string{l.foo}, "$ORIGIN/../lib:$ORIGIN/../etc:"+LibFoo,
		NoteDesc("libfoo.so", "?$ORIGIN/../lib:?$ORIGIN/../etc:="+LibFoo+"/libfoo.so"), loadedNote)
	for _, d := range []string{"lib", "etc"} {
		if err := os.MkdirAll(b.tr.Host(casePrefx+"clean-origins/"+d), 0o755); err != nil {
			b.tb.Fatal(err)
		}
	}
	cudart := casePrefx + "cudart/lib/libcudart.so.12"
	b.edit(b.place(b.lib("libcudart.so.12"), cudart), elfedit.Edit{SetPath: str(Driver + ":$ORIGIN")})
	b.tr.Cases = append(b.tr.Cases, Case{"cudart", "", cudart, b.tr.Host(cudart), false})
	b.tr.Cases = append(b.tr.Cases, Case{"libfoo", "", LibFoo + "/libfoo.so", b.tr.Host(LibFoo + "/libfoo.so"), false})
}

// faultCases have one fault each.
func (b *builder) faultCases() {
	b.tb.Helper()
	rp := elfedit.TagRunPath
	// One fault each.
	b.exe("driver-link-missing", "CP001", "cuda", str(LibFoo), rp, Interp)
	cudartBad := casePrefx + "cudart-nodriver/lib/libcudart.so.12"
	b.edit(b.place(b.lib("libcudart.so.12"), cudartBad), elfedit.Edit{SetPath: str("$ORIGIN")})
	b.tr.Cases = append(b.tr.Cases, Case{"dlopener-driver-link-missing", "CP001", cudartBad, b.tr.Host(cudartBad), false})
	plugin := casePrefx + "plugin/lib/libplugin.so"
	h := b.place(b.link(noteC, "-shared", "-Wl,-soname,libplugin.so", "note.c"), plugin)
	b.edit(h, elfedit.Edit{SetPath: str("$ORIGIN")})
	b.tr.Cases = append(b.tr.Cases, Case{"dlopen-note-driver-link-missing", "CP001", plugin, h, false})
	b.exe("driver-shadowed", "CP002", "cuda", str(DriverCp+":"+Driver+":"+LibFoo), rp, Interp)
	b.exe("compat-after-driver", "CP003", "cuda", str(Driver+":"+Compat+":"+LibFoo), rp, Interp)
	// Under a driver of CompatVersion (the tests' Options.DriverVersion),
	// OldCompat's libcuda fails with error 803; Compat's, equal, does not.
	b.exe("compat-older-than-driver", "CP021", "cuda", str(OldCompat+":"+Driver+":"+LibFoo), rp, Interp)
	// Compat's selector takes the driver there, and says so.
	b.exe("compat-choice", "CP026", "cuda", str(Selector+":"+Driver+":"+LibFoo), rp, Interp)
	b.exe("stub-dir", "CP004", "cuda", str(Driver+":"+LibFoo+":"+Stubs), rp, Interp)
	b.exe("build-dir-leak", "CP005", "foo", str("/build/source/lib:"+LibFoo), rp, Interp)
	b.exe("relative-entry", "CP006", "foo", str("lib:"+LibFoo), rp, Interp)
	p := casePrefx + "empty-entry/bin/empty-entry"
	b.tr.Cases = append(b.tr.Cases, Case{"empty-entry", "CP006", p, b.place(b.exes["empty"], p), true})
	b.exe("duplicate-entry", "CP007", "foo", str(LibFoo+":"+LibFoo), rp, Interp)
	b.exe("rpath-not-runpath", "CP008", "foo", str(LibFoo), elfedit.TagRPath, Interp)
	b.exe("unresolvable-needed", "CP009", "missing", str(LibFoo), rp, Interp)
	b.exe("interp-outside-store", "CP010", "foo", str(LibFoo), rp, "/lib64/ld-linux-x86-64.so.2")
	b.exe("missing-dir", "CP011", "foo", str(LibFoo+":"+Gone), rp, Interp)
	// A directory literally named $LIB: the loader searches lib/<triplet>.
	misread := casePrefx + "misread-entry/$LIB"
	if err := os.MkdirAll(b.tr.Host(misread), 0o755); err != nil {
		b.tb.Fatal(err)
	}
	b.exe("misread-entry", "CP025", "foo", str(LibFoo+":"+misread), rp, Interp)
	b.exe("verify-failed", "CP012", "foo", str(LibFoo), rp, Interp)
	makeWX(b.tb, b.tr.Cases[len(b.tr.Cases)-1].Host)
	b.exe("no-search-path", "CP013", "sys", nil, rp, Interp)
}

// noteCases have resolution-cache notes of every fault.
func (b *builder) noteCases(l libs) {
	b.tb.Helper()
	rp := elfedit.TagRunPath
	// Resolution-cache notes.
	fooNote := NoteDesc("libfoo.so", "="+LibFoo+"/libfoo.so")
	b.linked("ldcache-stale", "CP014", []string{l.foo}, LibFoo2+":"+LibFoo, fooNote, loadedNote)
	b.linked("ldcache-stale-gone", "CP014", []string{l.foo}, LibFoo,
		NoteDesc("libfoo.so", "="+Gone+"/libfoo.so:="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-needed", "CP015", []string{l.foo}, LibFoo,
		NoteDesc("libextra.so", "="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-stub", "CP016", []string{l.cuda, l.foo}, Driver+":"+LibFoo,
		NoteDesc("libcuda.so.1", "="+Stubs+"/libcuda.so:?"+Driver, "libfoo.so", "?"+Driver+":="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-outside-store", "CP017", []string{l.foo}, LibFoo,
		NoteDesc("libfoo.so", "=/usr/lib/libfoo.so:="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-build-dir", "CP017", []string{l.foo}, LibFoo,
		NoteDesc("libfoo.so", "?/build/source/lib:="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-unsorted", "CP018", []string{l.foo}, LibFoo,
		NoteDesc("libfoo.so", "="+LibFoo+"/libfoo.so", "libbar.so", "="+LibFoo+"/libbar.so"), loadedNote)
	b.linked("ldcache-empty-list", "CP018", []string{l.foo}, LibFoo,
		NoteDesc("liba.so", "", "libfoo.so", "="+LibFoo+"/libfoo.so"), loadedNote)
	b.linked("ldcache-empty", "CP018", []string{l.foo}, LibFoo, []byte{0, 0}, loadedNote)
	b.linked("ldcache-unloaded", "CP019", []string{l.foo}, LibFoo, fooNote, unloadedNote)
	b.exe("ldcache-missing", "CP020", "foo", str(LibFoo), rp, Interp)
}

// engineNoteCases have notes cudapatch's engine (elfedit) wrote.
func (b *builder) engineNoteCases() {
	b.tb.Helper()
	rp := elfedit.TagRunPath
	fooNote := NoteDesc("libfoo.so", "="+LibFoo+"/libfoo.so")
	// Notes written by cudapatch's engine (elfedit): in the same edit as
	// the RUNPATH, clean; then a RUNPATH rewrite by a tool that leaves the
	// note alone (as autoPatchelf after generate-ld-cache), stale.
	b.exe("clean-elfedit-note", "", "cuda", nil, rp, Interp)
	c := &b.tr.Cases[len(b.tr.Cases)-1]
	b.edit(c.Host, elfedit.Edit{SetPath: str(Driver + ":" + LibFoo), SetNote: ldcacheNote(NoteDesc("libcuda.so.1", "?"+Driver, "libfoo.so", "?"+Driver+":="+LibFoo+"/libfoo.so"))})
	b.exe("ldcache-stale-rewrite", "CP014", "foo", nil, rp, Interp)
	c = &b.tr.Cases[len(b.tr.Cases)-1]
	b.edit(c.Host, elfedit.Edit{SetPath: str(LibFoo), SetNote: ldcacheNote(fooNote)})
	b.edit(c.Host, elfedit.Edit{SetPath: str(LibFoo2 + ":" + LibFoo)})
}

// symbolCases are programs whose libraries lack a symbol they bind.
func (b *builder) symbolCases() {
	b.tb.Helper()
	// Symbols: each program is linked against a prototype libsym.so that
	// has what it uses, and runs against one that lacks it (a version, a
	// data object, a function bound lazily).
	b.place(b.link(map[string]string{
		"libsym.c":   "int verfn(void) { return 1; } int present(void) { return 1; }\n",
		"libsym.map": "V1 { global: present; };\n",
	}, "-shared", "-Wl,-soname,libsym.so", "libsym.c", "-Wl,--version-script=libsym.map"), LibSym+"/libsym.so")
	for _, sc := range []struct{ name, rule, lib, vmap, main string }{
		{"symbol-version-missing", "CP022", "int verfn(void) { return 1; }", "V2 { global: verfn; };",
			"int verfn(void); int main(void) { return verfn(); }"},
		{"symbol-undefined-at-load", "CP023", "int gdata = 1; int present(void) { return 1; }", "V1 { global: present; gdata; };",
			"extern int gdata; int main(void) { return gdata; }"},
		{"symbol-undefined-function", "CP024", "int gone(void) { return 1; } int present(void) { return 1; }", "V1 { global: present; gone; };",
			"int gone(void); int main(void) { return gone(); }"},
	} {
		proto := b.link(map[string]string{sc.name + "-lib.c": sc.lib + "\n", sc.name + ".map": sc.vmap + "\n"},
			"-shared", "-Wl,-soname,libsym.so", sc.name+"-lib.c", "-Wl,--version-script="+sc.name+".map")
		p := casePrefx + sc.name + "/bin/" + sc.name
		h := b.place(b.link(map[string]string{sc.name + "-main.c": sc.main + "\n"},
			"-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed", "-Wl,-z,lazy", "-Wl,--dynamic-linker,"+Interp, sc.name+"-main.c", proto), p)
		b.edit(h, elfedit.Edit{SetPath: str(LibSym), SetNote: ldcacheNote(NoteDesc("libsym.so", "="+LibSym+"/libsym.so"))})
		b.tr.Cases = append(b.tr.Cases, Case{sc.name, sc.rule, p, h, false})
	}
}

// ldcacheNote is a resolution-cache note of desc, as elfedit writes one.
func ldcacheNote(desc []byte) *elfedit.Note {
	return &elfedit.Note{NoteID: elfedit.NoteID{Owner: "NixOS", Type: 0x63a86cb6}, Desc: desc, Section: ".note.nixos.ldcache"}
}

// makeWX marks the executable PT_LOAD writable too, which the verifier
// refuses (load-wx) and nothing else looks at.
func makeWX(tb testing.TB, path string) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	var phoff int64
	idx := -1
	for i, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			idx = i
			break
		}
	}
	f.Close()
	if idx < 0 {
		tb.Fatalf("%s: no executable PT_LOAD", path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	phoff = int64(binary.LittleEndian.Uint64(raw[0x20:]))
	at := phoff + int64(idx)*56 + 4 // p_flags of an Elf64_Phdr
	flags := binary.LittleEndian.Uint32(raw[at:])
	binary.LittleEndian.PutUint32(raw[at:], flags|uint32(elf.PF_W))
	if err := os.WriteFile(path, raw, 0o755); err != nil {
		tb.Fatal(err)
	}
}
