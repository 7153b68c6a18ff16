package symcheck_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// lib is one test library: linked against with build, run with run (the
// same soname, lib<name>.so). Sources are C unless cxx.
type lib struct {
	name            string
	build, buildMap string
	run, runMap     string
	needs           []string // other test libraries it links
	cxx             bool
}

// class is one binding case of the oracle: a program linked against the
// build libraries, run against the run ones.
type class struct {
	name   string
	libs   []lib
	main   string
	cflags []string // for main
	// want is the check's status (lazy binding) for each "NAME/use" of a
	// reference or "version V" of a version need the class is about.
	want map[string]symcheck.Status
	// out is what the program prints when it starts (checked when the
	// check says it loads).
	out string
	cxx bool
	// unique names a symbol the first library defines as STB_GNU_UNIQUE.
	unique string
}

var classes = []class{{
	name: "bound-copy",
	libs: []lib{{name: "ok",
		build: "int okdata = 42; int okfunc(void) { return okdata; }", buildMap: "V1 { global: okfunc; okdata; local: *; };"}},
	main:   `extern int okdata; int okfunc(void); int main(int c, char **v) { printf("%d %d\n", okfunc(), okdata); return 0; }`,
	cflags: []string{"-fno-pic", "-no-pie"},
	want:   map[string]symcheck.Status{"okdata/copy": symcheck.Bound, "okfunc/function": symcheck.Bound, "version V1": symcheck.Bound},
	out:    "42 42",
}, {
	name: "missing-version",
	libs: []lib{{name: "ver",
		build: "int f1(void) { return 1; } int f2(void) { return 2; }", buildMap: "V1 { global: f1; local: *; }; V2 { global: f2; } V1;",
		run: "int f1(void) { return 1; } int f2(void) { return 2; }", runMap: "V1 { global: f1; f2; local: *; };"}},
	main: `int f1(void); int f2(void); int main(int c, char **v) { if (c > 1) return f2(); printf("%d\n", f1()); return 0; }`,
	want: map[string]symcheck.Status{"version V2": symcheck.FailsAtLoad, "version V1": symcheck.Bound, "f1/function": symcheck.Bound, "f2/function": symcheck.FailsWhenCalled},
}, {
	name: "missing-function-lazy",
	libs: []lib{{name: "fn",
		build: "int present(void) { return 1; } int gone(void) { return 2; }",
		run:   "int present(void) { return 1; }"}},
	main: `int present(void); int gone(void); int main(int c, char **v) { if (c > 1) return gone(); printf("%d\n", present()); return 0; }`,
	want: map[string]symcheck.Status{"gone/function": symcheck.FailsWhenCalled, "present/function": symcheck.Bound},
	out:  "1",
}, {
	name: "missing-function-now",
	libs: []lib{{name: "fn",
		build: "int present(void) { return 1; } int gone(void) { return 2; }",
		run:   "int present(void) { return 1; }"}},
	main:   `int present(void); int gone(void); int main(int c, char **v) { if (c > 1) return gone(); printf("%d\n", present()); return 0; }`,
	cflags: []string{"-Wl,-z,now"},
	want:   map[string]symcheck.Status{"gone/function": symcheck.FailsAtLoad},
}, {
	name: "missing-data",
	libs: []lib{
		{name: "dat", build: "int gdata = 7;", run: "int other = 1;"},
		{name: "use", build: "extern int gdata; int useit(void) { return gdata; }", needs: []string{"dat"}},
	},
	main: `int useit(void); int main(int c, char **v) { if (c > 1) return useit(); puts("ok"); return 0; }`,
	want: map[string]symcheck.Status{"gdata/data": symcheck.FailsAtLoad},
}, {
	name: "missing-copy",
	libs: []lib{{name: "cp",
		build: "int cdata = 5; int cfn(void) { return 1; }",
		run:   "int cfn(void) { return 1; }"}},
	main:   `extern int cdata; int cfn(void); int main(int c, char **v) { if (c > 1) return cdata; printf("%d\n", cfn()); return 0; }`,
	cflags: []string{"-fno-pic", "-no-pie"},
	want:   map[string]symcheck.Status{"cdata/copy": symcheck.FailsAtLoad},
}, {
	name: "weak-undefined",
	libs: []lib{{name: "wk",
		build: "int wfn(void) { return 3; } int sfn(void) { return 1; }",
		run:   "int sfn(void) { return 1; }"}},
	main: `int wfn(void) __attribute__((weak)); int sfn(void); int main(void) { printf("%d %d\n", sfn(), wfn ? wfn() : 0); return 0; }`,
	want: map[string]symcheck.Status{"wfn/data": symcheck.WeakUnbound, "sfn/function": symcheck.Bound},
	out:  "1 0",
}, {
	name: "protected",
	libs: []lib{{name: "pr",
		build: `__attribute__((visibility("protected"))) int pfn(void) { return 4; } int callp(void) { return pfn(); }`}},
	main: `int pfn(void); int callp(void); int main(void) { printf("%d %d\n", pfn(), callp()); return 0; }`,
	want: map[string]symcheck.Status{"pfn/function": symcheck.Bound},
	out:  "4 4",
}, {
	// A versioned reference binds to a hidden (non-default) version.
	name: "hidden-version",
	libs: []lib{{name: "hv",
		build: "int hv(void) { return 1; }", buildMap: "V1 { global: hv; local: *; };",
		run: `int hv_old(void) { return 1; } int hv_new(void) { return 2; }
__asm__(".symver hv_old,hv@V1"); __asm__(".symver hv_new,hv@@V2");`,
		runMap: "V1 { global: hv; local: *; }; V2 { global: hv; } V1;"}},
	main: `int hv(void); int main(void) { printf("%d\n", hv()); return 0; }`,
	want: map[string]symcheck.Status{"hv/function": symcheck.Bound},
	out:  "1",
}, {
	// An unversioned reference never binds to a hidden version past the
	// oldest one.
	name: "unversioned-to-hidden",
	libs: []lib{{name: "uh",
		build: "int uh(void) { return 1; } int keep(void) { return 0; }",
		run: `int keep(void) { return 0; } int uh_impl(void) { return 1; }
__asm__(".symver uh_impl,uh@V2");`,
		runMap: "V1 { global: keep; local: *; }; V2 { global: uh; } V1;"}},
	main: `int uh(void); int keep(void); int main(int c, char **v) { if (c > 1) return uh(); printf("%d\n", keep()); return 0; }`,
	want: map[string]symcheck.Status{"uh/function": symcheck.FailsWhenCalled, "keep/function": symcheck.Bound},
	out:  "0",
}, {
	// A function-local static of a C++ inline function is STB_GNU_UNIQUE.
	name:   "gnu-unique",
	cxx:    true,
	unique: "_ZZ7countervE1c",
	libs: []lib{{name: "uq", cxx: true,
		build: `inline int &counter() { static int c = 0; return c; } extern "C" int bump() { return ++counter(); }`}},
	main:   `extern int uc __asm__("_ZZ7countervE1c"); int bump(void); int main(void) { bump(); printf("%d\n", uc); return 0; }`,
	cflags: []string{"-fPIC", "-pie"},
	want:   map[string]symcheck.Status{"_ZZ7countervE1c/data": symcheck.Bound},
	out:    "1",
}}

// arch is a machine the oracle runs on.
type arch struct {
	name, cc, cxx string
	sysroot       string // "" for this machine; else the cross sysroot, run under qemu
	qemu          string
	classes       []string // "" all
}

func TestLoaderIsTheOracle(t *testing.T) {
	arches := []arch{
		{name: "x86_64", cc: "gcc", cxx: "g++"},
		{name: "i686", cc: "i686-linux-gnu-gcc", sysroot: "/usr/i686-linux-gnu", qemu: "qemu-i386",
			classes: []string{"bound-copy", "missing-version", "missing-function-lazy", "missing-data", "weak-undefined"}},
		{name: "aarch64", cc: "aarch64-linux-gnu-gcc", sysroot: "/usr/aarch64-linux-gnu", qemu: "qemu-aarch64",
			classes: []string{"bound-copy", "missing-version", "missing-function-lazy", "missing-function-now", "missing-data", "hidden-version"}},
	}
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Skip("not an x86_64 glibc host")
	}
	for _, a := range arches {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, tool := range []string{a.cc, a.qemu} {
				if tool == "" {
					continue
				}
				_, err := exec.LookPath(tool)
				require.NoError(t, err, "the oracle needs %s (scripts/deps.sh installs it)", tool)
			}
			for _, c := range classes {
				if a.classes != nil && !contains(a.classes, c.name) {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					if c.cxx {
						if _, err := exec.LookPath(a.cxx); a.cxx == "" || err != nil {
							t.Skipf("no C++ compiler for %s", a.name)
						}
					}
					oracle(t, a, c)
				})
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// oracle builds class c for arch a and checks the symbol check against
// ldd -r and against running the program.
func oracle(t *testing.T, a arch, c class) {
	root := t.TempDir()
	dir := filepath.Join(root, "t")
	for _, d := range []string{"build", "run", "src"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	cc := func(cxx bool, args ...string) {
		tool := a.cc
		if cxx {
			tool = a.cxx
		}
		fixtures.Cmd(t, tool, args...)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, "src", name)
		require.NoError(t, os.WriteFile(p, []byte(text+"\n"), 0o644))
		return p
	}
	for _, l := range c.libs {
		ext := ".c"
		if l.cxx {
			ext = ".cc"
		}
		for _, stage := range []string{"build", "run"} {
			src, vmap := l.build, l.buildMap
			if stage == "run" && l.run != "" {
				src, vmap = l.run, l.runMap
			}
			args := []string{"-shared", "-fPIC", "-o", filepath.Join(dir, stage, "lib"+l.name+".so"),
				write(stage+l.name+ext, src), "-Wl,-soname,lib" + l.name + ".so", "-Wl,--no-as-needed", "-Wl,-rpath,$ORIGIN"}
			if vmap != "" {
				args = append(args, "-Wl,--version-script="+write(stage+l.name+".map", vmap))
			}
			for _, n := range l.needs {
				args = append(args, "-L"+filepath.Join(dir, stage), "-l"+n)
			}
			cc(l.cxx, args...)
		}
	}
	exe := filepath.Join(dir, "prog")
	args := append([]string{"-o", exe, write("main.c", "#include <stdio.h>\n"+c.main)}, c.cflags...)
	args = append(args, "-L"+filepath.Join(dir, "build"), "-Wl,--no-as-needed", "-Wl,-rpath,$ORIGIN/run", "-Wl,-rpath-link,"+filepath.Join(dir, "build"))
	for _, l := range c.libs {
		args = append(args, "-l"+l.name)
	}
	cc(false, args...)

	if c.unique != "" {
		// The class's point: g++ made the definition STB_GNU_UNIQUE.
		lf, err := elf.Open(filepath.Join(dir, "run", "lib"+c.libs[0].name+".so"))
		require.NoError(t, err)
		syms, err := lf.DynamicSymbols()
		lf.Close()
		require.NoError(t, err)
		found := false
		for _, s := range syms {
			if s.Name == c.unique {
				require.Equal(t, elf.SymBind(10), elf.ST_BIND(s.Info), "%s is STB_GNU_UNIQUE", s.Name)
				found = true
			}
		}
		require.True(t, found, "%s defined", c.unique)
	}
	run := runner{prefix: []string{"/lib64/ld-linux-x86-64.so.2"}}
	logical, cfgRoot := exe, ""
	if a.sysroot != "" {
		// The program's own sysroot: its loader and libc, and the test
		// tree below, so that the check and qemu see the same files.
		require.NoError(t, os.MkdirAll(filepath.Join(root, "lib"), 0o755))
		ents, err := os.ReadDir(filepath.Join(a.sysroot, "lib"))
		require.NoError(t, err)
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, "ld-linux") || n == "libc.so.6" {
				b, err := os.ReadFile(filepath.Join(a.sysroot, "lib", n))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(root, "lib", n), b, 0o755))
			}
		}
		run = runner{prefix: []string{a.qemu, "-L", root}, qemu: true}
		logical, cfgRoot = "/t/prog", root
	}
	ef, err := elf.Open(exe)
	require.NoError(t, err)
	class, mach := ef.Class, ef.Machine
	ef.Close()
	cfg, err := ldso.DefaultConfig(cfgRoot, class, mach)
	require.NoError(t, err)
	cfg.Loader = ldso.LoaderStock
	tr, err := ldso.Resolve(cfg, ldso.ElfReader(), logical)
	require.NoError(t, err)
	require.Empty(t, tr.Missing(), "every library of the fixture is found")

	lazy, err := symcheck.New(symcheck.Options{}).Check(cfg, tr)
	require.NoError(t, err)
	now, err := symcheck.New(symcheck.Options{BindNow: true}).Check(cfg, tr)
	require.NoError(t, err)

	// The class is what it says.
	got := map[string]symcheck.Status{}
	for _, b := range lazy.Symbols {
		got[b.Name+"/"+b.Use] = b.Status
	}
	for _, v := range lazy.Versions {
		got["version "+v.Version] = v.Status
	}
	for k, w := range c.want {
		require.Equal(t, w, got[k], "%s: %s\n%s", c.name, k, formatted(lazy))
	}

	// A check of problems only (what the main job and lint run, with its
	// memo of each library's own unresolved references) finds the same
	// failures, a library's included.
	// So does one whose tables are dropped as soon as they are read (a
	// budget of one byte), and read again for the next check.
	only := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})
	tiny := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true, CacheBytes: 1})
	// So does one that reads every file first (as the main job reads its
	// outputs), the libraries before the program: their summaries, made
	// as they are read, answer for none of the names only the program
	// uses, and are made again when it looks those up.
	// And one given each file open (ReadFile, the main job's way).
	read := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})
	open := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})
	readOpen := func(path string) {
		f, err := elfedit.Open(path)
		require.NoError(t, err)
		defer f.Close()
		require.NoError(t, open.ReadFile(path, f))
	}
	for i := len(tr.Needs) - 1; i >= 0; i-- {
		if n := tr.Needs[i]; n.Found() && n.Step != ldso.StepInterp {
			hp, err := ldso.HostPath(cfg, n.Path)
			require.NoError(t, err)
			require.NoError(t, read.Read(hp))
			readOpen(hp)
		}
	}
	require.NoError(t, read.Read(exe))
	readOpen(exe)
	for range 2 { // the second time from the memo
		for _, chk := range []*symcheck.Checker{only, tiny, read, open} {
			p, err := chk.Check(cfg, tr)
			require.NoError(t, err)
			require.Equal(t, findings(now), findings(p), "%s: OnlyProblems", c.name)
		}
	}

	// ldd -r says the same.
	want, complete, err := lddFindings(t, run, exe)
	require.NoError(t, err)
	require.True(t, complete)
	if !assertSameFindings(t, exe, want, findings(now)) {
		t.Log(formatted(now))
	}

	// Running it agrees: it starts unless something fails at load, and a
	// function that fails when called fails when called.
	loadFails, callFails := false, false
	for _, b := range lazy.Symbols {
		loadFails = loadFails || b.Status == symcheck.FailsAtLoad
		callFails = callFails || b.Status == symcheck.FailsWhenCalled
	}
	for _, v := range lazy.Versions {
		loadFails = loadFails || v.Status == symcheck.FailsAtLoad
	}
	out, err := run.command(exe, nil).CombinedOutput()
	if loadFails {
		require.Error(t, err, "the check says it fails at load, but it ran: %s", out)
		require.Regexp(t, "version `.*' not found|symbol lookup error", string(out))
	} else {
		require.NoError(t, err, "the check says it loads: %s", out)
		if c.out != "" {
			require.Equal(t, c.out, strings.TrimSpace(string(out)))
		}
	}
	if callFails && !loadFails {
		out, err := run.command(exe, nil, "call").CombinedOutput()
		require.Error(t, err, "the check says the call fails, but it ran: %s", out)
		require.Contains(t, string(out), "symbol lookup error")
	}
	t.Logf("%s/%s: %s (ldd -r agrees; the run agrees)", a.name, c.name, verdicts(got, c.want))
}

func formatted(r *symcheck.Result) string {
	var b strings.Builder
	_ = r.Format(&b)
	return b.String()
}

// verdicts lists the class's own references and versions with their
// status, for the notes' table.
func verdicts(got map[string]symcheck.Status, want map[string]symcheck.Status) string {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s: %s", k, got[k])
	}
	return strings.Join(out, "; ")
}
