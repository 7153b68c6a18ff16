// Package cfix builds the small C fixtures of the rpath and cmd/cudapatch
// tests at test time: shared libraries and executables with exactly the
// DT_NEEDED, DT_SONAME, RUNPATH and .note.dlopen a test asks for, for
// x86_64, i686 and aarch64.
//
// The policy tests need many files that differ in one dynamic entry, so a
// fixture is described by a [Spec] instead of a committed binary. A Spec
// is the vocabulary of these tests only: it turns into compiler flags,
// and internal/fixtures.Compile builds and caches the file, as it does for
// every C fixture; [Place] copies the result into a test's own tree.
// Non-runnable fixtures are linked with -nostdlib, so their DT_NEEDED list
// is exactly Spec.Needed and no libc entry gets in the way of a RUNPATH
// assertion.
//
// It lives under testdata so that go build ./... never sees it; only tests
// import it.
package cfix

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
)

// Spec describes one ELF file to build.
type Spec struct {
	// Arch is "" or "x86_64", "i686" or "aarch64".
	Arch string `json:",omitempty"`
	// Exe builds a PIE executable (with PT_INTERP); otherwise a shared
	// library.
	Exe bool `json:",omitempty"`
	// NoPIE makes an executable ET_EXEC instead of a PIE.
	NoPIE bool `json:",omitempty"`
	// Static builds a static executable (no PT_INTERP, no PT_DYNAMIC).
	Static bool `json:",omitempty"`
	// DebugOnly turns the result into a separate debug object
	// (objcopy --only-keep-debug), as separateDebugInfo makes.
	DebugOnly bool   `json:",omitempty"`
	Soname    string `json:",omitempty"`
	// Needed are DT_NEEDED names, in order: a stub library with that
	// DT_SONAME is linked in for each (an absolute name gives an absolute
	// DT_NEEDED).
	Needed []string `json:",omitempty"`
	// Link are real libraries (absolute paths) linked in after Needed.
	Link []string `json:",omitempty"`
	// RunPath and RPath are linked in as DT_RUNPATH or DT_RPATH.
	RunPath string `json:",omitempty"`
	RPath   string `json:",omitempty"`
	// Dlopen is the JSON payload of an FDO .note.dlopen note.
	Dlopen string `json:",omitempty"`
	// Source is the C source; a file with no code if empty.
	Source string `json:",omitempty"`
	// Libc links against the C library (and libdl), so the result can run.
	Libc bool `json:",omitempty"`
	// OSABI, when non-zero, is written into EI_OSABI of the result.
	OSABI byte `json:",omitempty"`
	// Strip links without the symbol table (ld -s), as installed
	// libraries ship.
	Strip bool `json:",omitempty"`
	// VersionScript is the text of a linker version script (symbol
	// versions of a library).
	VersionScript string `json:",omitempty"`
}

// Build compiles s, or finds it compiled, and returns the path of the
// result, which the caller must not modify: copy it with Place.
func Build(tb testing.TB, s Spec) string {
	tb.Helper()
	c, err := s.c(tb)
	if err != nil {
		key, _ := json.Marshal(s)
		tb.Fatalf("cfix: building %s: %v", key, err)
	}
	return fixtures.Compile(tb, c)
}

// Place builds s and copies it to dst (creating directories), executable.
func Place(tb testing.TB, s Spec, dst string) {
	tb.Helper()
	Copy(tb, Build(tb, s), dst)
}

// Copy copies a file to dst, creating directories, mode 0755.
func Copy(tb testing.TB, src, dst string) {
	tb.Helper()
	fixtures.CopyFile(tb, src, dst)
}

func compiler(arch string) (string, error) {
	switch arch {
	case "", "x86_64":
		return "gcc", nil
	case "i686":
		return "i686-linux-gnu-gcc", nil
	case "aarch64":
		return "aarch64-linux-gnu-gcc", nil
	}
	return "", fmt.Errorf("unknown arch %q", arch)
}

// dlopenNote is assembler for an FDO .note.dlopen note (owner "FDO", type
// 0x407c0c0a, NUL-terminated JSON, 4-byte aligned), as systemd's
// ELF_NOTE_DLOPEN macro emits it.
func dlopenNote(payload string) string {
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(payload)
	return ".pushsection .note.dlopen,\"a\",@note\n" +
		".balign 4\n.long 4\n.long 2f-1f\n.long 0x407c0c0a\n.asciz \"FDO\"\n" +
		"1: .asciz \"" + q + "\"\n2: .balign 4\n.popsection\n"
}

// osabiNames are binutils elfedit's names of EI_OSABI values.
var osabiNames = map[byte]string{
	1: "HPUX", 2: "NetBSD", 3: "GNU", 6: "Solaris", 7: "AIX", 8: "Irix", 9: "FreeBSD",
	10: "TRU64", 11: "Modesto", 12: "OpenBSD", 13: "OpenVMS", 14: "NSK", 15: "AROS", 16: "FenixOS",
}

// c is the compiler run that builds s. A stub library for each of
// s.Needed is compiled first.
func (s Spec) c(tb testing.TB) (fixtures.C, error) {
	cc, err := compiler(s.Arch)
	if err != nil {
		return fixtures.C{}, err
	}
	src := s.Source
	if (s.Exe || s.Static) && !s.Libc && src == "" {
		src = "void _start(void) { for (;;) ; }\n"
	}
	if src == "" {
		src = "int cfix_placeholder;\n"
	}
	c := fixtures.C{Compiler: cc, Source: src, Files: map[string]string{}}
	args := []string{"-fPIC"}
	if s.Dlopen != "" {
		c.Files["note.s"] = dlopenNote(s.Dlopen)
		args = append(args, "note.s")
	}
	switch {
	case s.Static:
		args = append(args, "-static", "-nostdlib")
	case s.Exe && s.NoPIE:
		args = append(args, "-no-pie")
	case s.Exe:
		args = append(args, "-pie")
	default:
		args = append(args, "-shared")
	}
	if !s.Libc {
		args = append(args, "-nostdlib")
	}
	if s.Soname != "" {
		args = append(args, "-Xlinker", "-soname", "-Xlinker", s.Soname)
	}
	if s.RunPath != "" {
		args = append(args, "-Wl,--enable-new-dtags", "-Xlinker", "-rpath", "-Xlinker", s.RunPath)
	}
	if s.RPath != "" {
		args = append(args, "-Wl,--disable-new-dtags", "-Xlinker", "-rpath", "-Xlinker", s.RPath)
	}
	args = append(args, "-Wl,--no-as-needed")
	if s.VersionScript != "" {
		c.Files["version.map"] = s.VersionScript
		args = append(args, "-Wl,--version-script=version.map")
	}
	if s.Strip {
		args = append(args, "-s")
	}
	for _, n := range s.Needed {
		args = append(args, fixtures.Compile(tb, fixtures.C{Compiler: cc,
			Args: []string{"-shared", "-nostdlib", "-Xlinker", "-soname", "-Xlinker", n, "-x", "c", "/dev/null"}}))
	}
	args = append(args, s.Link...)
	if len(s.Link) > 0 && (s.Exe || s.Static) {
		// The cached libraries are all called "out", so ld cannot find
		// their own DT_NEEDED to check their undefined symbols.
		args = append(args, "-Wl,--allow-shlib-undefined")
	}
	if s.Libc {
		args = append(args, "-ldl")
	}
	c.Args = args
	if s.DebugOnly {
		c.Then = append(c.Then, []string{objcopy(s.Arch), "--only-keep-debug", "out"})
	}
	if s.OSABI != 0 {
		name, ok := osabiNames[s.OSABI]
		if !ok {
			return fixtures.C{}, fmt.Errorf("no name for EI_OSABI %d", s.OSABI)
		}
		c.Then = append(c.Then, []string{"elfedit", "--output-osabi=" + name, "out"})
	}
	return c, nil
}

func objcopy(arch string) string {
	switch arch {
	case "i686":
		return "i686-linux-gnu-objcopy"
	case "aarch64":
		return "aarch64-linux-gnu-objcopy"
	}
	return "objcopy"
}

// FuzzLib is the versioned library of the fuzz targets' trees (rpath/patch
// FuzzRun, rpath/lint FuzzLint): a function and a data symbol at FZ_1.
var FuzzLib = Spec{Soname: "libfz.so.1", Source: "int fz_data = 3; int fz_get(void) { return fz_data; }\n",
	VersionScript: "FZ_1 { global: fz_get; fz_data; local: *; };"}

// FuzzApp is their program: it uses FuzzLib's function and data and
// dlopens libplugin.so.1 by a string constant.
func FuzzApp(tb testing.TB) Spec {
	return Spec{Exe: true, Libc: true, Link: []string{Build(tb, FuzzLib)}, Source: `#include <dlfcn.h>
extern int fz_data; int fz_get(void);
int main(void) {
	void *h = dlopen("libplugin.so.1", RTLD_NOW);
	return h ? fz_get() + fz_data : 1;
}
`}
}
