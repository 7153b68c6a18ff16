// Package cfix builds the small C fixtures of the rpath and cmd/cudapatch
// tests at test time: shared libraries and executables with exactly the
// DT_NEEDED, DT_SONAME, RUNPATH and .note.dlopen a test asks for, for
// x86_64, i686 and aarch64.
//
// The policy tests need many files that differ in one dynamic entry, so a
// fixture is described by a [Spec] instead of a committed binary. Each Spec
// is compiled once per test process (gcc takes ~30 ms) into a cache
// directory shared by the test processes of one machine (keyed by the Spec
// and this file, written by rename, so concurrent go test binaries agree);
// [Place] copies the result into a test's own tree. Non-runnable
// fixtures are linked with -nostdlib, so their DT_NEEDED list is exactly
// Spec.Needed and no libc entry gets in the way of a RUNPATH assertion.
//
// It lives under testdata so that go build ./... never sees it; only tests
// import it.
package cfix

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
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

type entry struct {
	once sync.Once
	path string
	err  error
}

var (
	mu    sync.Mutex
	built = map[string]*entry{}
	self  = sync.OnceValue(func() string {
		_, file, _, _ := runtime.Caller(0)
		b, _ := os.ReadFile(file)
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	})
)

// cacheDir is where built fixtures are kept between runs.
func cacheDir() string { return filepath.Join(os.TempDir(), "cudapatch-cfix") }

// Build compiles s (once per process) and returns the path of the result,
// which the caller must not modify: copy it with Place.
func Build(tb testing.TB, s Spec) string {
	tb.Helper()
	key, _ := json.Marshal(s)
	sum := sha256.Sum256(append([]byte(self()), key...))
	id := hex.EncodeToString(sum[:8])
	mu.Lock()
	e := built[id]
	if e == nil {
		e = &entry{}
		built[id] = e
	}
	mu.Unlock()
	e.once.Do(func() { e.path, e.err = build(s, id) })
	if e.err != nil {
		tb.Fatalf("cfix: building %s: %v", key, e.err)
	}
	return e.path
}

// Place builds s and copies it to dst (creating directories), executable.
func Place(tb testing.TB, s Spec, dst string) {
	tb.Helper()
	Copy(tb, Build(tb, s), dst)
}

// Copy copies a file to dst, creating directories, mode 0755.
func Copy(tb testing.TB, src, dst string) {
	tb.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		tb.Fatal(err)
	}
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

func run(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
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

// build compiles s unless an earlier run did, into cacheDir()/id/out: it
// builds in a temporary directory and renames it into place, so a
// half-built fixture is never seen.
func build(s Spec, id string) (string, error) {
	name := "out"
	if s.DebugOnly {
		name = "out.debug"
	}
	final := filepath.Join(cacheDir(), id)
	if _, err := os.Stat(filepath.Join(final, name)); err == nil {
		return filepath.Join(final, name), nil
	}
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(cacheDir(), id+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir) // a no-op once renamed
	if err := compile(s, dir); err != nil {
		return "", err
	}
	if err := os.Rename(dir, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, name)); serr != nil {
			return "", err
		}
		// another process got there first with the same result
	}
	return filepath.Join(final, name), nil
}

func compile(s Spec, dir string) error {
	cc, err := compiler(s.Arch)
	if err != nil {
		return err
	}
	src := s.Source
	if (s.Exe || s.Static) && !s.Libc && src == "" {
		src = "void _start(void) { for (;;) ; }\n"
	}
	if src == "" {
		src = "int cfix_placeholder;\n"
	}
	if s.Dlopen != "" {
		if err := os.WriteFile(filepath.Join(dir, "note.s"), []byte(dlopenNote(s.Dlopen)), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "src.c"), []byte(src), 0o644); err != nil {
		return err
	}
	out := filepath.Join(dir, "out")
	args := []string{"-o", out, "-fPIC", "src.c"}
	if s.Dlopen != "" {
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
		if err := os.WriteFile(filepath.Join(dir, "version.map"), []byte(s.VersionScript), 0o644); err != nil {
			return err
		}
		args = append(args, "-Wl,--version-script=version.map")
	}
	if s.Strip {
		args = append(args, "-s")
	}
	for i, n := range s.Needed {
		stub := filepath.Join(dir, fmt.Sprintf("needed%d.so", i))
		if err := run(dir, cc, "-shared", "-nostdlib", "-o", stub, "-Xlinker", "-soname", "-Xlinker", n, "-x", "c", "/dev/null"); err != nil {
			return err
		}
		args = append(args, stub)
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
	if err := run(dir, cc, args...); err != nil {
		return err
	}
	if s.DebugOnly {
		if err := run(dir, objcopy(s.Arch), "--only-keep-debug", out, out+".debug"); err != nil {
			return err
		}
		out += ".debug"
	}
	if s.OSABI != 0 {
		f, err := os.OpenFile(out, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteAt([]byte{s.OSABI}, 7) // EI_OSABI
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
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
