package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// cliTree is a test's directory of C fixtures for the end-to-end tests of
// the main job; "{root}" in strings stands for its root.
type cliTree struct {
	t    *testing.T
	root string
}

func newCLITree(t *testing.T) *cliTree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &cliTree{t: t, root: root}
}

func (c *cliTree) x(s string) string { return strings.ReplaceAll(s, "{root}", c.root) }
func (c *cliTree) p(rel string) string {
	return filepath.Join(c.root, c.x(rel))
}

func (c *cliTree) place(rel string, s cfix.Spec) {
	c.t.Helper()
	s.RunPath, s.RPath = c.x(s.RunPath), c.x(s.RPath)
	cfix.Place(c.t, s, c.p(rel))
}

func (c *cliTree) write(rel, content string) {
	c.t.Helper()
	if err := os.MkdirAll(filepath.Dir(c.p(rel)), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.p(rel), []byte(c.x(content)), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cliTree) hashes() map[string][32]byte {
	c.t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cliTree) unchanged(before map[string][32]byte) {
	c.t.Helper()
	after := c.hashes()
	for p, h := range before {
		if after[p] != h {
			c.t.Errorf("%s was written", p)
		}
	}
}

// runpath reads DT_RUNPATH with debug/elf ("" when there is none).
func (c *cliTree) runpath(rel string) string {
	c.t.Helper()
	f, err := elf.Open(c.p(rel))
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	rp, _ := f.DynString(elf.DT_RUNPATH)
	if rpath, _ := f.DynString(elf.DT_RPATH); len(rpath) > 0 {
		c.t.Errorf("%s: DT_RPATH %q left", rel, rpath)
	}
	return strings.Join(rp, "|")
}

func (c *cliTree) interp(rel string) string {
	c.t.Helper()
	f, err := elf.Open(c.p(rel))
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// runCLI calls run as main would, with "{root}" expanded in args and env.
func (c *cliTree) runCLI(env []string, args ...string) (int, string, string) {
	c.t.Helper()
	full := []string{"cudapatch"}
	for _, a := range args {
		full = append(full, c.x(a))
	}
	var xenv []string
	for _, e := range env {
		xenv = append(xenv, c.x(e))
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), full, &stdout, &stderr, xenv)
	return code, stdout.String(), stderr.String()
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (c *cliTree) wantLines(what, got string, want ...string) {
	c.t.Helper()
	for i := range want {
		want[i] = c.x(want[i])
	}
	if g := lines(got); !slices.Equal(g, want) {
		c.t.Errorf("%s:\n got %q\nwant %q", what, g, want)
	}
}

func cExe(runpath string, needed ...string) cfix.Spec {
	return cfix.Spec{Exe: true, Needed: needed, RunPath: runpath}
}

func cLib(soname string, needed ...string) cfix.Spec {
	return cfix.Spec{Soname: soname, Needed: needed}
}

// pkgTree is the package most CLI tests patch.
func pkgTree(t *testing.T) *cliTree {
	c := newCLITree(t)
	c.place("out/bin/app", cExe("/old/lib", "libdep.so"))
	c.place("out/lib/libl.so", cLib("libl.so", "libdep.so"))
	c.place("out/lib/librp.so", cfix.Spec{Soname: "librp.so", RPath: "/opt/x"})
	c.write("out/share/doc.txt", "text\n")
	c.place("deps/libdep.so", cLib("libdep.so"))
	return c
}

const sysLoader = "/lib64/ld-linux-x86-64.so.2"

// TestPatchText: one line per changed file (old -> new RUNPATH, and the
// interpreter when it changes) on stdout, a summary line on stderr, exit 0;
// a second run changes nothing and says so.
func TestPatchText(t *testing.T) {
	for _, verb := range [][]string{nil, {"patch"}} {
		c := pkgTree(t)
		args := append(slices.Clone(verb), "--search", "{root}/deps", "--interpreter", "/nix/store/aaa-glibc/lib/ld-linux-x86-64.so.2", "{root}/out")
		code, stdout, stderr := c.runCLI(nil, args...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		c.wantLines("stdout", stdout,
			"{root}/out/bin/app: RUNPATH /old/lib -> /run/opengl-driver/lib:{root}/deps; interpreter "+sysLoader+" -> /nix/store/aaa-glibc/lib/ld-linux-x86-64.so.2; resolution note for 1 name",
			"{root}/out/lib/libl.so: RUNPATH (none) -> /run/opengl-driver/lib:{root}/deps; resolution note for 1 name",
			"{root}/out/lib/librp.so: RUNPATH /opt/x (RPATH) -> /run/opengl-driver/lib",
		)
		c.wantLines("stderr", stderr, "cudapatch: patched 3 files, 0 unchanged, 1 skipped, 0 failed, 0 missing dependencies")
		if got := c.runpath("out/bin/app"); got != c.x("/run/opengl-driver/lib:{root}/deps") {
			t.Errorf("RUNPATH %q", got)
		}
		if got := c.interp("out/bin/app"); got != "/nix/store/aaa-glibc/lib/ld-linux-x86-64.so.2" {
			t.Errorf("interpreter %q", got)
		}

		code, stdout, stderr = c.runCLI(nil, args...)
		if code != 0 || stdout != "" {
			t.Errorf("second run: exit %d, stdout %q", code, stdout)
		}
		c.wantLines("second stderr", stderr, "cudapatch: patched 0 files, 3 unchanged, 1 skipped, 0 failed, 0 missing dependencies")
	}
}

// TestPatchedLines: every shape of the line the main job prints for a
// patched file, and the plural forms of the summary.
func TestPatchedLines(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		f    patch.File
		want string
	}{
		{patch.File{Path: "/o/a", OldRunPath: str("/old"), RunPath: "/new"}, "/o/a: RUNPATH /old -> /new"},
		{patch.File{Path: "/o/b", OldRPath: str("/opt/x"), RunPath: "/new"}, "/o/b: RUNPATH /opt/x (RPATH) -> /new"},
		{patch.File{Path: "/o/c", RunPath: "/new"}, "/o/c: RUNPATH (none) -> /new"},
		{patch.File{Path: "/o/d", OldRunPath: str("/old")}, "/o/d: RUNPATH /old kept"},
		{patch.File{Path: "/o/e", RunPath: "/new", OldInterpreter: "/lib/ld.so", Interpreter: "/nix/ld.so"}, "/o/e: RUNPATH (none) -> /new; interpreter /lib/ld.so -> /nix/ld.so"},
		{patch.File{Path: "/o/f", RunPath: "/new", OldInterpreter: "/nix/ld.so", Interpreter: "/nix/ld.so"}, "/o/f: RUNPATH (none) -> /new"},
		{patch.File{Path: "/o/g", RunPath: "/new", Note: patch.NoteWritten, ResolutionCache: make(ldcache.Cache, 1)}, "/o/g: RUNPATH (none) -> /new; resolution note for 1 name"},
		{patch.File{Path: "/o/h", RunPath: "/new", Note: patch.NoteWritten, ResolutionCache: make(ldcache.Cache, 12)}, "/o/h: RUNPATH (none) -> /new; resolution note for 12 names"},
		{patch.File{Path: "/o/i", OldRunPath: str("/old"), Note: patch.NoteRemoved}, "/o/i: RUNPATH /old kept; resolution note removed"},
		{patch.File{Path: "/o/j", OldRunPath: str(""), RunPath: "/new", OldInterpreter: "/a", Interpreter: "/b", Note: patch.NoteWritten}, "/o/j: RUNPATH  -> /new; interpreter /a -> /b; resolution note for 0 names"},
	} {
		var b bytes.Buffer
		w := bufio.NewWriterSize(&b, 16) // lines longer than the buffer
		writePatched(w, &tc.f, false)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != tc.want+"\n" {
			t.Errorf("got  %q\nwant %q", got, tc.want+"\n")
		}
		// Not written (a dry run, a job stopped before writing): the
		// line says so.
		b.Reset()
		writePatched(w, &tc.f, true)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := b.String(), tc.want+" (not written)\n"; got != want {
			t.Errorf("planned: got  %q\nwant %q", got, want)
		}
	}
	for n, want := range map[int]string{0: "0 missing dependencies", 1: "1 missing dependency", 2: "2 missing dependencies", 10: "10 missing dependencies"} {
		if got := plural(n, "missing dependency"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
	if got := plural(3, "file"); got != "3 files" {
		t.Errorf("plural(3, file) = %q", got)
	}
}

// TestPatchMissing: each unsatisfied dependency gets auto-patchelf's exact
// error line, then the summary; exit 1 and nothing written.
func TestPatchMissing(t *testing.T) {
	c := pkgTree(t)
	c.place("out/bin/tool", cExe("", "libmiss.so.1", "libdep.so", "libother.so"))
	c.place("out/lib/libm.so", cLib("libm.so", "libmiss.so.1"))
	c.place("deps/libver.so.2.0", cLib("libver.so.2"))
	c.place("out/bin/ver", cExe("", "libver.so.2"))
	before := c.hashes()
	code, stdout, stderr := c.runCLI(nil, "--search", "{root}/deps", "--ignore-missing", "libother*", "{root}/out")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	if len(lines(stdout)) != 6 {
		t.Errorf("stdout %q", stdout)
	}
	// Nothing was written: each line says what was planned.
	for _, l := range lines(stdout) {
		if !strings.HasSuffix(l, " (not written)") {
			t.Errorf("line %q reads as done; nothing was written", l)
		}
	}
	c.wantLines("stderr", stderr,
		"error: auto-patchelf could not satisfy dependency libmiss.so.1 wanted by {root}/out/bin/tool",
		"error: auto-patchelf could not satisfy dependency libver.so.2 wanted by {root}/out/bin/ver",
		"  hint: {root}/deps/libver.so.2.0 has this DT_SONAME; the loader needs a file or link named libver.so.2 in {root}/deps",
		"error: auto-patchelf could not satisfy dependency libmiss.so.1 wanted by {root}/out/lib/libm.so",
		"cudapatch: nothing written: would patch 6 files, 0 unchanged, 1 skipped, 0 failed, 3 missing dependencies",
	)
	c.unchanged(before)
}

// TestPatchAudit: an entry that fails the audit is an error naming the file
// and the entry; exit 1, nothing written.
func TestPatchAudit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		entry string
		msg   string
	}{
		{"relative", nil, []string{"--append-rpath", "lib"}, "lib", "is relative: the loader resolves it against the current directory"},
		{"stubs", nil, []string{"--append-rpath", "/nix/store/x-cuda_cudart/lib/stubs"}, "/nix/store/x-cuda_cudart/lib/stubs",
			"is a stub directory: its libcuda would be loaded instead of the driver's"},
		{"/build", nil, []string{"--runtime-dependency", "/build/source/lib"}, "/build/source/lib", "points into the build directory /build"},
		{"NIX_BUILD_TOP", []string{"NIX_BUILD_TOP={root}/top"}, []string{"--runtime-dependency", "{root}/top/lib"}, "{root}/top/lib",
			"points into the build directory {root}/top"},
		{"TMPDIR in a Nix build", []string{"NIX_BUILD_TOP=/nonexistent-top", "TMPDIR={root}/tmp"}, []string{"--append-rpath", "{root}/tmp/x"},
			"{root}/tmp/x", "points into the build directory {root}/tmp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLITree(t)
			c.place("out/bin/app", cExe(""))
			before := c.hashes()
			code, _, stderr := c.runCLI(tc.env, append(tc.args, "{root}/out")...)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, stderr)
			}
			c.wantLines("stderr", stderr,
				`error: {root}/out/bin/app: RUNPATH audit failed: RUNPATH entry "`+tc.entry+`" `+tc.msg,
				"cudapatch: nothing written: would patch 0 files, 0 unchanged, 0 skipped, 1 failed, 0 missing dependencies")
			c.unchanged(before)
		})
	}
	// TMPDIR alone (outside a Nix build) is not a build directory: tests
	// and users patch trees under /tmp.
	c := newCLITree(t)
	c.place("out/bin/app", cExe(""))
	if code, _, stderr := c.runCLI([]string{"TMPDIR={root}"}, "--append-rpath", "{root}/x", "{root}/out"); code != 0 {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

// TestPatchUsage: a bad command line exits 2 before anything is read, with
// exactly one line on stderr. The commonest cases are a script:
// testdata/script/usage.txtar.
func TestPatchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--driver-link-for", "some", "{root}/out"}, `cudapatch: invalid value "some" for --driver-link-for: want all, needed or none (see 'cudapatch --help')`},
		{[]string{"patch", "--driver-link-for", "some", "{root}/out"}, `cudapatch: patch: invalid value "some" for --driver-link-for: want all, needed or none (see 'cudapatch patch --help')`},
		{[]string{"--driver-link", "run/opengl-driver/lib", "{root}/out"}, `cudapatch: driver link "run/opengl-driver/lib" is not absolute`},
		{[]string{"--cuda-compat", "compat", "{root}/out"}, `cudapatch: cuda_compat directory "compat" is not absolute`},
		{[]string{"-j", "x", "{root}/out"}, `cudapatch: invalid value "x" for -j: want a whole number (see 'cudapatch --help')`},
		{[]string{"--ignore-missing", "", "{root}/out"}, "cudapatch: empty ignore-missing pattern"},
		{[]string{"--append-rpath", "", "{root}/out"}, "cudapatch: empty RUNPATH entry to append"},
		{[]string{"-x", "{root}/out"}, "cudapatch: unknown flag -x (see 'cudapatch --help')"},
		{[]string{"{root}/nonexistent"}, "cudapatch: {root}/nonexistent: no such file or directory"},
		{[]string{"lint", "--dry-run", "{root}/out"}, "cudapatch: lint: --dry-run is an option of the main job, not of lint (see 'cudapatch lint --help')"},
		{[]string{"--dry-run", "patch", "{root}/out"}, "cudapatch: patch: --dry-run goes after 'patch' (cudapatch patch [OPTIONS] PATH...)"},
	} {
		c := newCLITree(t)
		c.place("out/bin/app", cExe(""))
		before := c.hashes()
		code, _, stderr := c.runCLI(nil, tc.args...)
		if code != 2 || stderr != c.x(tc.msg)+"\n" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, c.x(tc.msg))
		}
		c.unchanged(before)
	}
}

// TestPatchNixBintools: in a Nix build the interpreter and the libc come
// from $NIX_BINTOOLS/nix-support/{dynamic-linker,orig-libc}; --interpreter
// wins over them.
func TestPatchNixBintools(t *testing.T) {
	const ld = "/nix/store/bbb-glibc-2.40/lib/ld-linux-x86-64.so.2"
	for _, flag := range []bool{false, true} {
		c := newCLITree(t)
		c.place("out/bin/app", cExe("", "libc.so.6", "libm.so.6", "libdep.so"))
		c.place("out/lib/libl.so", cLib("libl.so", "libc.so.6"))
		c.place("deps/libdep.so", cLib("libdep.so"))
		c.place("glibc/lib/libc.so.6", cLib("libc.so.6"))
		c.place("glibc/lib/libm.so.6", cLib("libm.so.6"))
		c.write("bintools/nix-support/dynamic-linker", ld+"\n")
		c.write("bintools/nix-support/orig-libc", "{root}/glibc\n")
		args := []string{"--search", "{root}/deps", "{root}/out"}
		want := ld
		if flag {
			want = "/nix/store/ccc-other/ld.so"
			args = append([]string{"--interpreter", want}, args...)
		}
		code, _, stderr := c.runCLI([]string{"NIX_BINTOOLS={root}/bintools"}, args...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		if got := c.interp("out/bin/app"); got != want {
			t.Errorf("interpreter %q, want %q", got, want)
		}
		if got := c.runpath("out/bin/app"); got != c.x("/run/opengl-driver/lib:{root}/deps") {
			t.Errorf("app RUNPATH %q", got)
		}
		if got := c.runpath("out/lib/libl.so"); got != "/run/opengl-driver/lib" {
			t.Errorf("libl.so RUNPATH %q", got)
		}
	}
}

// TestPatchFlags: every flag of the main job reaches the policy.
func TestPatchFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want map[string]string // file → RUNPATH
	}{
		{[]string{"--search", "{root}/deps"}, map[string]string{
			"out/bin/app": "/run/opengl-driver/lib:{root}/deps:{root}/out/lib"}},
		{[]string{"--search", "{root}/deps", "--cuda-compat", "/nix/store/c-compat/compat", "--driver-link", "/drv/lib"}, map[string]string{
			"out/bin/app": "/nix/store/c-compat/compat:/drv/lib:{root}/deps:{root}/out/lib"}},
		{[]string{"--search", "{root}/deps", "--driver-link-for", "needed"}, map[string]string{
			"out/bin/app": "{root}/deps:{root}/out/lib", "out/lib/libcu.so": "/run/opengl-driver/lib"}},
		{[]string{"--search", "{root}/deps", "--driver-link-for", "none"}, map[string]string{
			"out/bin/app": "{root}/deps:{root}/out/lib", "out/lib/libcu.so": "(none)"}},
		{[]string{"--search", "{root}/deps", "--driver-link-for", "none", "--runtime-dependency", "/rt/a/lib", "--runtime-dependency", "/rt/b/lib",
			"--append-rpath", "$ORIGIN", "--append-rpath", "/z"}, map[string]string{
			"out/bin/app": "/rt/a/lib:/rt/b/lib:{root}/deps:{root}/out/lib:$ORIGIN:/z", "out/lib/libcu.so": "$ORIGIN:/z"}},
		// libo.so is found in out/lib, where the old $ORIGIN/../lib leads:
		// that entry stands for it (auto-patchelf's --preserve-origin).
		{[]string{"--search", "{root}/deps", "--driver-link-for", "none", "--preserve-origin"}, map[string]string{
			"out/bin/app": "{root}/deps:$ORIGIN/../lib"}},
		{[]string{"--search-recursive", "{root}/tree", "--driver-link-for", "none"}, map[string]string{
			"out/bin/app": "{root}/tree/a/lib:{root}/out/lib"}},
		{[]string{"--search", "{root}/tree/b", "--search", "{root}/deps", "--driver-link-for", "none"}, map[string]string{
			"out/bin/app": "{root}/tree/b:{root}/out/lib"}},
		{[]string{"--search", "{root}/deps", "--driver-link-for", "none", "--libc", "{root}/deps"}, map[string]string{
			"out/bin/app": "{root}/out/lib"}},
		{[]string{"--search", "{root}/deps", "--driver-link-for", "none", "--libc", "{root}/deps", "--keep-libc"}, map[string]string{
			"out/bin/app": "{root}/deps:{root}/out/lib"}},
		{[]string{"--search", "{root}/hop", "--driver-link-for", "none", "--jobs", "1"}, map[string]string{
			"out/bin/app": "{root}/tree/a/lib:{root}/out/lib"}},
	} {
		c := newCLITree(t)
		c.place("out/bin/app", cExe("$ORIGIN/../lib:/old", "libdep.so", "libo.so"))
		c.place("out/lib/libo.so", cLib("libo.so"))
		c.place("out/lib/libcu.so", cLib("libcu.so", "libcuda.so.1"))
		c.place("deps/libdep.so", cLib("libdep.so"))
		c.place("tree/a/lib/libdep.so", cLib("libdep.so"))
		c.place("tree/b/libdep.so", cLib("libdep.so"))
		c.place("hop/libhop.so", cfix.Spec{Soname: "libhop.so", RunPath: "{root}/tree/a/lib"})
		code, _, stderr := c.runCLI(nil, append(tc.args, "{root}/out")...)
		if code != 0 {
			t.Errorf("%q: exit %d\n%s", tc.args, code, stderr)
			continue
		}
		for rel, want := range tc.want {
			got := c.runpath(rel)
			if got == "" {
				got = "(none)"
			}
			if got != c.x(want) {
				t.Errorf("%q: %s RUNPATH %q, want %q", tc.args, rel, got, c.x(want))
			}
		}
	}
	// --no-recurse and --ignore-existing: a file below is not patched, a
	// library behind a RUNPATH not found.
	c := newCLITree(t)
	c.place("out/app", cExe("", "libh.so", "libhop.so"))
	c.place("out/sub/app2", cExe("/keep"))
	c.place("hop/libhop.so", cfix.Spec{Soname: "libhop.so", RunPath: "{root}/hidden"})
	c.place("hidden/libh.so", cLib("libh.so"))
	code, _, stderr := c.runCLI(nil, "--no-recurse", "--search", "{root}/hop", "{root}/out")
	if code != 0 || c.runpath("out/sub/app2") != "/keep" || c.runpath("out/app") != c.x("/run/opengl-driver/lib:{root}/hidden:{root}/hop") {
		t.Errorf("--no-recurse: exit %d, %q, %q\n%s", code, c.runpath("out/sub/app2"), c.runpath("out/app"), stderr)
	}
	// --ignore-existing: the outputs' own libraries are not indexed.
	c = newCLITree(t)
	c.place("out/app", cExe("", "libown.so"))
	c.place("out/lib/libown.so", cLib("libown.so"))
	code, _, stderr = c.runCLI(nil, "--ignore-existing", "{root}/out")
	if code != 1 || !strings.Contains(stderr, c.x("error: auto-patchelf could not satisfy dependency libown.so wanted by {root}/out/app\n")) {
		t.Errorf("--ignore-existing: exit %d\n%s", code, stderr)
	}
}

// TestPatchJSON: --json prints the whole report as JSON on stdout, and
// nothing else there, also when dependencies are missing.
func TestPatchJSON(t *testing.T) {
	for _, missing := range []bool{false, true} {
		c := pkgTree(t)
		if missing {
			c.place("out/bin/broken", cExe("", "libnowhere.so"))
		}
		code, stdout, stderr := c.runCLI(nil, "--json", "--search", "{root}/deps", "{root}/out")
		if want := map[bool]int{false: 0, true: 1}[missing]; code != want {
			t.Fatalf("exit %d, want %d\n%s", code, want, stderr)
		}
		var rep patch.Report
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		if dec.More() {
			t.Errorf("more than one JSON value on stdout")
		}
		wantFiles := 4
		if missing {
			wantFiles = 5
		}
		if len(rep.Files) != wantFiles || rep.Written == missing {
			t.Errorf("files %d, written %v", len(rep.Files), rep.Written)
		}
		for _, f := range rep.Files {
			if f.Path == c.p("out/bin/app") {
				if f.RunPath != c.x("/run/opengl-driver/lib:{root}/deps") || len(f.Deps) != 1 ||
					f.Deps[0] != (policy.Dep{Name: "libdep.so", Source: "needed", How: policy.HowStore, Path: c.p("deps/libdep.so"), Dir: c.p("deps")}) {
					t.Errorf("app: %+v", f)
				}
			}
		}
		if missing && (len(rep.Missing) != 1 || rep.Missing[0].File != c.p("out/bin/broken")) {
			t.Errorf("missing %+v", rep.Missing)
		}
	}
}

// TestPatchDryRun: --dry-run prints what it would do and writes nothing.
func TestPatchDryRun(t *testing.T) {
	c := pkgTree(t)
	before := c.hashes()
	code, stdout, stderr := c.runCLI(nil, "--dry-run", "--search", "{root}/deps", "{root}/out")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if len(lines(stdout)) != 3 {
		t.Errorf("stdout %q", stdout)
	}
	for _, l := range lines(stdout) {
		if !strings.HasSuffix(l, " (not written)") {
			t.Errorf("line %q reads as done; nothing was written", l)
		}
	}
	c.wantLines("stderr", stderr, "cudapatch: would patch 3 files, 0 unchanged, 1 skipped, 0 failed, 0 missing dependencies")
	c.unchanged(before)
}

// TestPatchVerbose: -v logs, per file, each dependency and where it
// resolved (or why it needs no RUNPATH entry, is ignored, or is missing),
// and why each skipped file was skipped, in the report's order, before the
// job's own lines; without -v, stderr has only those.
func TestPatchVerbose(t *testing.T) {
	c := newCLITree(t)
	c.place("out/bin/app", cExe("/old/lib", "libdep.so", "libc.so.6", "libcuda.so.1", "libgone.so.3", "libmiss.so"))
	c.place("out/lib/arm.so", cfix.Spec{Arch: "aarch64", Soname: "arm.so"})
	c.write("out/share/doc.txt", "text\n")
	c.place("deps/libdep.so", cLib("libdep.so"))
	c.place("libc/libc.so.6", cLib("libc.so.6"))
	args := []string{"--search", "{root}/deps", "--interpreter", sysLoader, "--libc", "{root}/libc", "--ignore-missing", "libgone*", "--dry-run", "{root}/out"}
	code, _, quiet := c.runCLI(nil, args...)
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, quiet)
	}
	if strings.Contains(quiet, "level=") {
		t.Errorf("logs without -v:\n%s", quiet)
	}
	code, _, stderr := c.runCLI(nil, append([]string{"-v"}, args...)...)
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	// The lines carry no time (a build log has its own).
	var logs []string
	for _, l := range lines(stderr) {
		if strings.HasPrefix(l, "level=") {
			logs = append(logs, l)
		}
		if strings.Contains(l, "time=") {
			t.Errorf("a log line with a time: %q", l)
		}
	}
	c.wantLines("-v logs", strings.Join(logs, "\n"),
		"level=DEBUG msg=dependency file={root}/out/bin/app needed=libdep.so source=needed how=resolved path={root}/deps/libdep.so",
		`level=DEBUG msg=dependency file={root}/out/bin/app needed=libc.so.6 source=needed how=libc path={root}/libc/libc.so.6 why="in the libc directory: the interpreter finds it, no RUNPATH entry"`,
		`level=DEBUG msg=dependency file={root}/out/bin/app needed=libcuda.so.1 source=needed how=driver why="an NVIDIA driver library: found at run time through /run/opengl-driver/lib"`,
		`level=DEBUG msg=dependency file={root}/out/bin/app needed=libgone.so.3 source=needed how=ignored why="found nowhere, ignored" pattern=libgone*`,
		`level=DEBUG msg=dependency file={root}/out/bin/app needed=libmiss.so source=needed how=missing why="found nowhere"`,
		`level=DEBUG msg=skipped file={root}/out/lib/arm.so reason="ELFCLASS64 EM_AARCH64, not the interpreter's architecture"`,
		`level=DEBUG msg=skipped file={root}/out/share/doc.txt reason="not ELF"`,
	)
	// The job's own lines follow, as without -v.
	if !strings.HasSuffix(stderr, quiet) {
		t.Errorf("-v changed the job's lines:\n%s\nwant the tail\n%s", stderr, quiet)
	}
}

// TestPatchOutsideNix is the README's standalone use: no $NIX_BINTOOLS,
// --interpreter or --libc. The main job takes this machine's interpreter
// and libc directory (ldso.FindHost) and says so in one line; libc.so.6
// gets no RUNPATH entry, the program runs. Where this machine's cannot be
// found, the missing libc.so.6 ends with a one-line hint naming --libc
// and --interpreter; so it does when --interpreter alone is given.
func TestPatchOutsideNix(t *testing.T) {
	host, err := ldso.FindHost("")
	if err != nil {
		t.Fatal(err)
	}
	fix := fixtures.ByName(t, "bfd-pie").Copy(t)
	runOut := func(findHost func(string) (ldso.Host, error), args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		g := newGlobals(&stdout, &stderr, nil)
		if findHost != nil {
			g.findHost = findHost
		}
		return g.main(context.Background(), append([]string{"cudapatch"}, args...)), stderr.String()
	}
	noHost := func(string) (ldso.Host, error) {
		return ldso.Host{}, errors.New("/bin/sh has no interpreter (statically linked)")
	}
	hint := func(why string) string {
		return "hint: no libc directory (" + why + "): give --libc DIR and --interpreter FILE of the system the files are for ($NIX_BINTOOLS names them in a Nix build)"
	}
	for _, tc := range []struct {
		name     string
		findHost func(string) (ldso.Host, error)
		args     []string
		hint     string
	}{
		{"no host", noHost, nil, hint("this machine's could not be found: /bin/sh has no interpreter (statically linked)")},
		{"interpreter alone", nil, []string{"--interpreter", host.Interpreter}, hint("none was given")},
	} {
		code, stderr := runOut(tc.findHost, append(tc.args, "--dry-run", fix.Dir)...)
		if code != exitFindings {
			t.Errorf("%s: exit %d, want 1\n%s", tc.name, code, stderr)
		}
		l := lines(stderr)
		if !slices.Contains(l, tc.hint) || l[len(l)-2] != tc.hint {
			t.Errorf("%s: stderr\n%s\nwant before the summary\n%s", tc.name, stderr, tc.hint)
		}
	}

	code, stderr := runOut(nil, fix.Dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	want := "cudapatch: no $NIX_BINTOOLS, --interpreter or --libc: used this machine's interpreter " + host.Interpreter +
		" and libc directory " + host.LibcDir + " (libraries found there get no RUNPATH entry)"
	if l := lines(stderr); len(l) != 2 || l[0] != want {
		t.Errorf("stderr\n%s\nwant first\n%s", stderr, want)
	}
	f, err := elf.Open(fix.Exe)
	if err != nil {
		t.Fatal(err)
	}
	rp, _ := f.DynString(elf.DT_RUNPATH)
	f.Close()
	if want := []string{"/run/opengl-driver/lib:" + fix.LibDir}; !slices.Equal(rp, want) {
		t.Errorf("RUNPATH %q, want %q (no entry for libc)", rp, want)
	}
	out, err := fix.Run(t, fix.Exe)
	if err != nil || out != fix.Want+"\n" {
		t.Errorf("run: %q, %v", out, err)
	}

	// A tree where this machine's loader decides nothing: no line.
	c := pkgTree(t)
	code, _, stderr = c.runCLI(nil, "--search", "{root}/deps", "--dry-run", "{root}/out")
	if code != 0 || len(lines(stderr)) != 1 {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestPatchLinkOperand: a symbolic link named on the command line, as the
// issue's `cudapatch -v t2/libe.so` and doctor's fix name one, is patched
// through: its target gets the line and is counted once, also when the
// target is named too or walked; -v says it was followed. A link out of
// its directory and the directories named is refused in one line, exit 2,
// nothing written.
func TestPatchLinkOperand(t *testing.T) {
	c := newCLITree(t)
	c.place("t2/libe.so.1", cLib("libe.so.1", "libdep.so"))
	c.place("deps/libdep.so", cLib("libdep.so"))
	link := func(rel, target string) {
		t.Helper()
		if err := os.Symlink(target, c.p(rel)); err != nil {
			t.Fatal(err)
		}
	}
	link("t2/libe.so", "libe.so.1")
	link("t2/libdep.so", "../deps/libdep.so")
	t.Chdir(c.root)
	before := c.hashes()
	for _, args := range [][]string{
		{"t2/libe.so"},
		{"t2/libe.so", "t2/libe.so.1"},
		{"t2", "t2/libe.so"},
		{"t2/libe.so", "{root}/t2"},
	} {
		code, stdout, stderr := c.runCLI(nil, append([]string{"--dry-run", "--search", "deps"}, args...)...)
		if code != exitOK {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		c.wantLines(strings.Join(args, " ")+": stdout", stdout,
			"{root}/t2/libe.so.1: RUNPATH (none) -> /run/opengl-driver/lib:{root}/deps; resolution note for 1 name (not written)")
		if l := lines(stderr); l[len(l)-1] != "cudapatch: would patch 1 file, 0 unchanged, 0 skipped, 0 failed, 0 missing dependencies" {
			t.Errorf("%q: stderr\n%s", args, stderr)
		}
	}
	c.unchanged(before)
	code, _, stderr := c.runCLI(nil, "-v", "--search", "deps", "t2/libe.so")
	if code != exitOK || !strings.Contains(stderr, c.x("msg=followed path={root}/t2/libe.so target={root}/t2/libe.so.1")) {
		t.Errorf("exit %d, stderr\n%s\nwant a line saying the link was followed", code, stderr)
	}
	if got := c.runpath("t2/libe.so.1"); got != c.x("/run/opengl-driver/lib:{root}/deps") {
		t.Errorf("RUNPATH %q", got)
	}

	before = c.hashes()
	code, stdout, stderr := c.runCLI(nil, "t2/libdep.so")
	if code != exitUsage || stdout != "" {
		t.Errorf("link out: exit %d, stdout %q", code, stdout)
	}
	c.wantLines("link out: stderr", stderr,
		"cudapatch: {root}/t2/libdep.so: a symbolic link to {root}/deps/libdep.so, outside its directory and the directories to patch: not followed (name {root}/deps/libdep.so to patch it)")
	c.unchanged(before)
}

// TestPatchSearchDirs: a --search or --search-recursive DIR that does not
// exist (a typo) or is a file is one warning line naming it, and the job
// goes on; with --strict it is the one-line error, exit 2, nothing
// written. auto-patchelf's --libs are search directories too.
func TestPatchSearchDirs(t *testing.T) {
	c := pkgTree(t)
	bad := []string{"--search", "{root}/nope", "--search", "{root}/out/share/doc.txt", "--search-recursive", "{root}/gone"}
	warnings := []string{
		"cudapatch: warning: --search {root}/nope: no such file or directory; nothing is searched there",
		"cudapatch: warning: --search {root}/out/share/doc.txt: not a directory; nothing is searched there",
		"cudapatch: warning: --search-recursive {root}/gone: no such file or directory; nothing is searched there",
	}
	code, _, stderr := c.runCLI(nil, append(append([]string{"--dry-run"}, bad...), "--search", "{root}/deps", "{root}/out")...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	c.wantLines("stderr", stderr, append(warnings, "cudapatch: would patch 3 files, 0 unchanged, 1 skipped, 0 failed, 0 missing dependencies")...)

	before := c.hashes()
	for i, flag := range []string{"--search", "--search", "--search-recursive"} {
		code, stdout, stderr := c.runCLI(nil, "--strict", flag, c.x(bad[2*i+1]), "--search", "{root}/deps", "{root}/out")
		if code != exitUsage || stdout != "" {
			t.Errorf("--strict %s: exit %d, stdout %q", flag, code, stdout)
		}
		want := strings.Replace(strings.TrimSuffix(warnings[i], "; nothing is searched there"), "warning: ", "", 1) + " (--strict)"
		c.wantLines("--strict stderr", stderr, want)
	}
	c.unchanged(before)

	code, _, stderr = c.runCLI(nil, "auto-patchelf", "--paths", "{root}/out", "--libs", "{root}/deps", "{root}/nope")
	if code != exitOK || !strings.HasPrefix(stderr, c.x(warnings[0])+"\n") {
		t.Errorf("auto-patchelf: exit %d, stderr\n%s", code, stderr)
	}
}
