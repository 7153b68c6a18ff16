package symcheck_test

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// lddFindings runs glibc's own check (ldd -r: LD_TRACE_LOADED_OBJECTS with
// LD_WARN and LD_BIND_NOW) on file, through runPrefix for a foreign
// machine, and returns what it reports failing: "undef NAME" and
// "version V", each with the base name of the object that needs it, and
// whether every library was found.
func lddFindings(t testing.TB, run runner, file string) (map[string]bool, bool, error) {
	t.Helper()
	out, err := run.command(file, []string{"LD_TRACE_LOADED_OBJECTS=1", "LD_WARN=yes", "LD_BIND_NOW=1"}).CombinedOutput()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v: %s", file, err, out)
	}
	got := map[string]bool{}
	complete := true
	for _, l := range strings.Split(string(out), "\n") {
		if m := lddUndef.FindStringSubmatch(l); m != nil {
			got["undef "+m[1]+" "+filepath.Base(m[2])] = true
		}
		if m := lddVersion.FindStringSubmatch(l); m != nil {
			got["version "+m[1]+" "+filepath.Base(m[2])] = true
		}
		if strings.Contains(l, "=> not found") {
			complete = false
		}
	}
	return got, complete, nil
}

// runner starts a program of one machine: directly through its loader,
// or under qemu-user with a sysroot, where the environment goes to the
// guest with -E (qemu itself may be a dynamic program).
type runner struct {
	prefix []string
	qemu   bool
}

func (r runner) command(file string, env []string, args ...string) *exec.Cmd {
	a := append([]string{}, r.prefix...)
	if r.qemu {
		for _, e := range env {
			a = append(a, "-E", e)
		}
	}
	a = append(append(a, file), args...)
	cmd := exec.Command(a[0], a[1:]...)
	// The loader's own search only: no LD_LIBRARY_PATH or LD_PRELOAD of
	// the test's environment.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "LD_LIBRARY_PATH=") || strings.HasPrefix(e, "LD_PRELOAD=")
	})
	if !r.qemu {
		cmd.Env = append(cmd.Env, env...)
	}
	return cmd
}

var (
	lddUndef   = regexp.MustCompile(`undefined symbol: ([^\s,]+)(?:, version \S+)?\s+\((.*)\)$`)
	lddVersion = regexp.MustCompile("version `([^']+)' not found \\(required by (.*)\\)$")
)

// findings is the same set from the symbol check.
func findings(r *symcheck.Result) map[string]bool {
	got := map[string]bool{}
	vs, bs := r.Failures()
	for _, v := range vs {
		got["version "+v.Version+" "+filepath.Base(v.Object)] = true
	}
	for _, b := range bs {
		got["undef "+b.Name+" "+filepath.Base(b.Object)] = true
	}
	return got
}

// TestLoaderAgreesOnHost: over a sample of this machine's programs and
// libraries that load today, the check reports exactly what glibc's ldd -r
// does: no false failure, none missed. CUDAPATCH_SYMCHECK_SAMPLE sets the
// sample size (default 40).
func TestLoaderAgreesOnHost(t *testing.T) {
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Skip("not an x86_64 glibc host")
	}
	n := 40
	if s := os.Getenv("CUDAPATCH_SYMCHECK_SAMPLE"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	// Programs, libraries, and the plugins below the library directory
	// (perl and python modules, gconv…), whose undefined symbols ldd -r
	// reports: the sample holds failures as well as clean files.
	var files []string
	ents, err := os.ReadDir("/usr/bin")
	require.NoError(t, err)
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join("/usr/bin", e.Name()))
		}
	}
	require.NoError(t, filepath.WalkDir("/usr/lib/x86_64-linux-gnu", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), ".so") {
			files = append(files, p)
		}
		return nil
	}))
	sort.Strings(files)
	// An even spread over both trees, the same every run.
	step := max(1, len(files)/n)
	// OnlyProblems and a small cache: the memo and the eviction lose nothing.
	chk := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true, CacheBytes: 1 << 20})
	checked, agreed, withFindings := 0, 0, 0
	var checkTime time.Duration
	for i := 0; i < len(files) && checked < n; i += step {
		f := files[i]
		ef, err := elf.Open(f)
		if err != nil {
			continue
		}
		dyn := ef.Class == elf.ELFCLASS64 && ef.Machine == elf.EM_X86_64 && ef.Section(".dynamic") != nil
		ef.Close()
		if !dyn {
			continue
		}
		want, complete, err := lddFindings(t, runner{prefix: []string{"/lib64/ld-linux-x86-64.so.2"}}, f)
		if err != nil || !complete {
			continue // does not load today
		}
		start := time.Now()
		cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
		require.NoError(t, err)
		cfg.Loader = ldso.LoaderStock
		tr, err := ldso.Resolve(cfg, ldso.ElfReader(), f)
		require.NoError(t, err)
		r, err := chk.Check(cfg, tr)
		require.NoError(t, err, f)
		checkTime += time.Since(start)
		got := findings(r)
		checked++
		if len(want) > 0 {
			withFindings++
		}
		if assertSameFindings(t, f, want, got) {
			agreed++
		}
	}
	t.Logf("%d files checked, %d agree with ldd -r (%d with findings per ldd -r); check time %v", checked, agreed, withFindings, checkTime)
	require.Greater(t, checked, n/2, "too few files load on this machine")
}

func assertSameFindings(t *testing.T, f string, want, got map[string]bool) bool {
	t.Helper()
	ok := true
	for k := range got {
		if !want[k] {
			t.Errorf("%s: false finding: %s", f, k)
			ok = false
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s: missed: %s", f, k)
			ok = false
		}
	}
	return ok
}

// TestLoaderAgreesOnCorpus: with CUDAPATCH_SYMCHECK_CORPUS=DIR (what
// scripts/cuda-corpus.sh builds: DIR/pristine/store and bintools), a copy
// of the CUDA corpus is patched by the main job with bench/run.sh's
// arguments (the stub directory searched, this machine's libc through the
// corpus' bintools) and a driver link of links to the corpus' nvidia-x11
// libraries; then every file the main job checked must get the verdict
// ldd -r gives for it as written: the same failing symbols and versions,
// each with the object that needs it (every class of the main job's
// findings is a failure to ldd -r, which binds now).
func TestLoaderAgreesOnCorpus(t *testing.T) {
	corpus := os.Getenv("CUDAPATCH_SYMCHECK_CORPUS")
	if corpus == "" {
		t.Skip("set CUDAPATCH_SYMCHECK_CORPUS to the CUDA corpus (scripts/cuda-corpus.sh)")
	}
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	out, err := exec.Command("cp", "-a", "--sparse=always", filepath.Join(corpus, "pristine/store"), store).CombinedOutput()
	require.NoError(t, err, "%s", out)
	bt := filepath.Join(corpus, "pristine/bintools/nix-support")
	interp, err := os.ReadFile(filepath.Join(bt, "dynamic-linker"))
	require.NoError(t, err)
	libc, err := os.ReadFile(filepath.Join(bt, "orig-libc"))
	require.NoError(t, err)

	// The driver link: the driver's libraries by their sonames.
	driver := filepath.Join(tmp, "opengl-driver/lib")
	require.NoError(t, os.MkdirAll(driver, 0o755))
	opts := patch.Config{
		Policy: policy.Config{
			Interpreter:   strings.TrimSpace(string(interp)),
			DriverLink:    driver,
			IgnoreMissing: []string{"libcuda.so.1"},
		},
		Libc:    filepath.Join(strings.TrimSpace(string(libc)), "lib"),
		Symbols: patch.SymbolsWarn,
	}
	var paths []string
	ents, err := os.ReadDir(store)
	require.NoError(t, err)
	for _, e := range ents {
		d := filepath.Join(store, e.Name())
		switch {
		case strings.Contains(e.Name(), "-gcc-") && strings.HasSuffix(e.Name(), "-lib"):
			opts.Search = append(opts.Search, filepath.Join(d, "lib"))
		case strings.HasSuffix(e.Name(), "-stubs"):
			opts.Search = append(opts.Search, filepath.Join(d, "lib/stubs"))
		case strings.Contains(e.Name(), "-nvidia-x11-"):
			libs, err := filepath.Glob(filepath.Join(d, "lib/nvidia/current/*.so.*"))
			require.NoError(t, err)
			for _, l := range libs {
				ef, err := elf.Open(l)
				if err != nil {
					continue
				}
				soname, _ := ef.DynString(elf.DT_SONAME)
				ef.Close()
				if len(soname) == 1 {
					_ = os.Symlink(l, filepath.Join(driver, soname[0]))
				}
			}
		default:
			paths = append(paths, d)
		}
	}
	rep, err := patch.Run(t.Context(), &opts, paths)
	require.NoError(t, err)
	require.True(t, rep.Written)
	mainJobAgrees(t, "CUDA corpus", rep)
}

// TestLoaderAgreesOnUsr: with CUDAPATCH_SYMCHECK_USR=1, the same over a
// copy of this machine's /usr/bin and /usr/lib/x86_64-linux-gnu patched as
// scripts/identical.sh patches it (the tree's lib/ searched, every missing
// library ignored): programs and plugins with real undefined symbols.
// Files ldd -r does not load completely are left out.
func TestLoaderAgreesOnUsr(t *testing.T) {
	if os.Getenv("CUDAPATCH_SYMCHECK_USR") == "" {
		t.Skip("set CUDAPATCH_SYMCHECK_USR=1 to patch a copy of /usr/bin and /usr/lib/x86_64-linux-gnu")
	}
	tmp := t.TempDir()
	for _, c := range [][2]string{{"/usr/bin/.", "bin"}, {"/usr/lib/x86_64-linux-gnu/.", "lib"}} {
		require.NoError(t, os.MkdirAll(filepath.Join(tmp, c[1]), 0o755))
		out, err := exec.Command("cp", "-a", "--no-preserve=links", c[0], filepath.Join(tmp, c[1])).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	rep, err := patch.Run(t.Context(), &patch.Config{
		Search: []string{filepath.Join(tmp, "lib")},
		Policy: policy.Config{
			IgnoreMissing: []string{"*"},
			Interpreter:   "/lib64/ld-linux-x86-64.so.2",
			DriverLinkFor: policy.DriverLinkNone,
		},
		Libc:    "/lib/x86_64-linux-gnu",
		Symbols: patch.SymbolsWarn,
	}, []string{filepath.Join(tmp, "bin"), filepath.Join(tmp, "lib")})
	require.NoError(t, err)
	require.True(t, rep.Written)
	mainJobAgrees(t, "/usr", rep)
}

// mainJobAgrees compares the main job's symbol findings of every dynamic
// file of rep with ldd -r's for the file as written.
func mainJobAgrees(t *testing.T, tree string, rep *patch.Report) {
	t.Helper()
	checked, agreed, withFindings, falses, missed, incomplete := 0, 0, 0, 0, 0, 0
	for _, f := range rep.Files {
		if f.Skipped != "" || (f.Kind != "executable" && f.Kind != "shared-library") {
			continue
		}
		got := map[string]bool{}
		for _, s := range f.Symbols {
			switch {
			case s.Class == patch.ClassSkippedDriver || s.Class == patch.ClassNotChecked:
				t.Logf("%s: %s", f.Path, s.Message)
			case s.Symbol == "":
				got["version "+s.Version+" "+filepath.Base(s.Object)] = true
			default:
				got["undef "+s.Symbol+" "+filepath.Base(s.Object)] = true
			}
		}
		want, complete, err := lddFindings(t, runner{prefix: []string{"/lib64/ld-linux-x86-64.so.2"}}, f.Path)
		if err != nil || !complete {
			incomplete++
			continue // does not load
		}
		checked++
		if len(want) > 0 {
			withFindings++
		}
		for k := range got {
			if !want[k] {
				falses++
			}
		}
		for k := range want {
			if !got[k] {
				missed++
			}
		}
		if assertSameFindings(t, f.Path, want, got) {
			agreed++
		}
	}
	t.Logf("%s: %d files checked, %d agree with ldd -r, %d with findings per ldd -r, %d false findings, %d missed (%d left out: ldd -r does not load them)", tree, checked, agreed, withFindings, falses, missed, incomplete)
	require.Positive(t, checked)
}
