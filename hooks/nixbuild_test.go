package hooks_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// The Nix tier: real nix-builds of derivations that use cudaPatchelfHook,
// over the package set of nix/tests/build (no nixpkgs, offline), and what
// Nix decides from cudapatch's output: references, closures, validity and
// reproducibility. nix/tests/build/default.nix holds the derivations and,
// in its manifest, what each one must come out as.

// nixManifest is nix/tests/build's manifest attribute.
type nixManifest struct {
	Interpreter string            `json:"interpreter"`
	DriverLink  string            `json:"driverLink"`
	DriverLib   string            `json:"driverLib"`
	BuildOnly   map[string]string `json:"buildOnly"`
	// Build lists the derivations (.drv paths) of nix-build -A build.
	Build   []string              `json:"build"`
	Cases   map[string]nixCase    `json:"cases"`
	Failing map[string]nixFailing `json:"failing"`
}

type nixCase struct {
	DrvPath       string               `json:"drvPath"`
	AllOutputs    []string             `json:"allOutputs"`
	Outputs       map[string]nixOutput `json:"outputs"`
	AllowMissing  []string             `json:"allowMissing"`
	Log           []string             `json:"log"`
	LogCount      map[string]int       `json:"logCount"`
	SameClosureAs string               `json:"sameClosureAs"`
}

type nixOutput struct {
	Path       string   `json:"path"`
	References []string `json:"references"`
	// Runpaths holds the DT_RUNPATH of every ELF file of the output, by
	// path relative to it ("" for none).
	Runpaths map[string]string `json:"runpaths"`
	// Runs holds, for every executable, the runs and what each prints.
	Runs map[string][]nixProgramRun `json:"runs"`
	// Files must exist in the output (paths relative to it).
	Files []string `json:"files"`
	// NotInClosure: store paths, by name, that the output's closure must
	// not hold (cuda_compat where the hook has none, the Go toolchain).
	NotInClosure map[string]string `json:"notInClosure"`
	// InClosure: store paths, by name, that it must hold without
	// referencing them (cuda_compat, which the selector loads).
	InClosure map[string]string `json:"inClosure"`
}

type nixProgramRun struct {
	Args []string `json:"args"`
	// Want is the whole output (trimmed); WantLines, where given instead,
	// are lines the output must have.
	Want      string   `json:"want"`
	WantLines []string `json:"wantLines"`
	// WithDriver runs the program with the test's driver library mounted
	// at the driver link, in a private mount namespace.
	WithDriver bool `json:"withDriver"`
	// Module, where set, is the NVIDIA kernel module the program sees, in
	// a private mount namespace: a version ("535.261.03") is written to
	// /proc/driver/nvidia/version; "none" hides any module. Unset, the
	// machine's own (if any) is seen.
	Module string `json:"module"`
}

// noModule is nixProgramRun.Module's value that hides any kernel module.
const noModule = "none"

type nixFailing struct {
	DrvPath string            `json:"drvPath"`
	Outputs map[string]string `json:"outputs"`
	Stderr  []string          `json:"stderr"`
}

// driverLibraries are the NVIDIA driver's: without the driver on the
// machine (or cuda_compat) they are the only names allowed not to load.
var driverLibraries = []string{"libcuda.so.1", "libnvidia-ml.so.1"}

// nix runs Nix commands against the local store with settings that work as
// root on a machine without the nixbld group or a daemon, offline.
type nix struct {
	env  []string
	expr string
	args []string
}

// nixConfig: no sandbox (the builds use the host's toolchain), builds as the
// calling user (no build users), no binary cache (offline).
const nixConfig = "sandbox = false\nbuild-users-group =\nsubstituters =\nmax-jobs = 2\n"

func newNix(t *testing.T) *nix {
	t.Helper()
	if _, err := exec.LookPath("nix-build"); err != nil {
		t.Skip("nix-build is not on PATH: the Nix builds are not run (Debian: apt-get install nix-bin; CI installs it)")
	}
	for _, tool := range []string{"nix-store", "nix-instantiate"} {
		needTool(t, tool, "nix-bin")
	}
	needTool(t, "gcc", "gcc")
	needTool(t, "patchelf", "patchelf")
	if os.Geteuid() != 0 {
		if err := writable("/nix/store"); err != nil {
			t.Fatalf("the Nix builds need a local store they can write, with sandbox = false "+
				"(run as root, as CI does, or with a single-user Nix): %v", err)
		}
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "NIX_CONFIG=") || strings.HasPrefix(kv, "NIX_REMOTE=") ||
			strings.HasPrefix(kv, "LD_LIBRARY_PATH=")
	})
	env = append(env, "NIX_CONFIG="+nixConfig, "NIX_REMOTE=local")
	return &nix{
		env:  env,
		expr: filepath.Join(repoRoot(t), "nix", "tests", "build"),
		args: hostArgs(t),
	}
}

// writable says whether this process can create files in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".cudapatch-write-test-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// hostArgs are nix/tests/build's arguments: the host's Go toolchain and
// module cache (nix/package.nix is built from this checkout with them), its
// compiler, patchelf, loader (the interpreter of /bin/bash, which runs every
// builder) and libc; and with CUDAPATCH set, that binary in place of
// nix/package.nix.
func hostArgs(t *testing.T) []string {
	t.Helper()
	abs := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err = filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	f, err := elf.Open("/bin/bash")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		t.Fatal("/bin/bash has no interpreter")
	}
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		t.Fatalf("gcc -print-file-name=libc.so.6: %v", err)
	}
	libc, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the host's libc.so.6: %v", err)
	}
	gomodcache, err := exec.Command(abs("go"), "env", "GOMODCACHE").Output()
	if err != nil || len(bytes.TrimSpace(gomodcache)) == 0 {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	var args []string
	if bin := os.Getenv("CUDAPATCH"); bin != "" {
		bin, err := filepath.Abs(bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("testing CUDAPATCH=%s instead of nix/package.nix", bin)
		args = append(args, "--argstr", "cudapatchExe", bin)
	}
	return append(args,
		"--argstr", "hostGo", abs("go"),
		"--argstr", "hostGoModCache", string(bytes.TrimSpace(gomodcache)),
		"--argstr", "hostCC", abs("gcc"),
		"--argstr", "hostPatchelf", abs("patchelf"),
		"--argstr", "hostInterp", interp,
		"--argstr", "hostLibc", libc,
	)
}

// run runs a Nix command; stdout and stderr come back apart.
func (n *nix) run(name string, args ...string) (stdout, stderr []byte, err error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

func (n *nix) must(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, stderr, err := n.run(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(stderr, 60))
	}
	return out
}

// build runs nix-build on derivations (.drv paths) of the manifest's
// evaluation. Building what one evaluation wrote, not the attributes again,
// keeps every build on the store paths the manifest names: the checkout's
// Go sources (nix/package.nix's src) may change while the tier runs.
func (n *nix) build(drvs []string, extra ...string) (stdout, stderr []byte, err error) {
	args := append(append([]string{"--no-out-link"}, extra...), drvs...)
	return n.run("nix-build", args...)
}

func (n *nix) query(t *testing.T, what, path string) []string {
	t.Helper()
	return strings.Fields(string(n.must(t, "nix-store", "-q", what, path)))
}

// errorLines keeps Nix's error lines of a build log (each failed
// derivation's, whose log nix-store -l shows in full).
func errorLines(b []byte) string {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "error:") || strings.Contains(l, "stand-in") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// tail keeps the last lines of a log for a failure message.
func tail(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("[… %d lines]", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}

// TestNixBuild builds nix/tests/build with nix-build and checks every output
// of every case: exact references, no build-only input in any closure, the
// RUNPATH and interpreter of every ELF file, every library the loader
// resolves is a reference, no build-directory path in any file, every
// program runs from the store (loader cache inhibited, no LD_LIBRARY_PATH),
// the expected build-log lines; a package patched twice has the closure of
// one patched once; the failing cases fail with their message; and the
// store verifies and every case rebuilds bit-identically (--check).
func TestNixBuild(t *testing.T) {
	if os.Getenv("CUDAPATCH_FRESH_ROOT") != "" && os.Getenv("CUDAPATCH_NIX_IN_FRESH_ROOT") == "" {
		// CI builds the tier on the host first (scripts/test.sh); in the
		// fresh root Nix's build of the Go modules was killed by SIGKILL
		// in 2 of 6 runs (docs/fresh-root.md), which would fail CI for a
		// cause that is not cudapatch's. CUDAPATCH_NIX_IN_FRESH_ROOT=1
		// builds it there too.
		t.Skip("built by the host run of the suite; CUDAPATCH_NIX_IN_FRESH_ROOT=1 builds it in the fresh root too")
	}
	n := newNix(t)

	start := time.Now()
	// One evaluation: --read-write-mode writes the .drv files whose paths
	// the manifest holds, and only those are built below.
	var m nixManifest
	if err := json.Unmarshal(n.must(t, "nix-instantiate", append(
		[]string{"--eval", "--strict", "--json", "--read-write-mode", "-A", "manifest", n.expr}, n.args...)...), &m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	// --keep-going: a case that fails to build is reported by its own
	// subtest, and the others are still checked.
	_, stderr, err := n.build(m.Build, "--keep-going")
	for try := 2; try <= killedBuilds && err != nil && bytes.Contains(stderr, []byte(killedBuilder)); try++ {
		// Nix 2.8 kills a builder's process group when its log reaches
		// EOF (Pid::kill in getChildStatus); a builder caught between
		// closing its descriptors and exiting is reported killed by
		// signal 9 with an empty log (NixOS/nix#2176, open). Seen on the
		// quick go-modules build in fresh chroots and on a VM, twice in
		// a row once (docs/fresh-root.md). The build is made again;
		// its results are checked as always.
		t.Logf("nix-build (-A build): %s; build %d of %d:\n%s", killedBuilder, try, killedBuilds, errorLines(stderr))
		_, stderr, err = n.build(m.Build, "--keep-going")
	}
	if err != nil {
		t.Errorf("nix-build (-A build): %v\n%s", err, errorLines(stderr))
	}
	t.Logf("evaluated and built %d cases in %s", len(m.Cases), time.Since(start).Round(time.Millisecond))

	buildOnly := map[string]string{}
	for name, p := range m.BuildOnly {
		buildOnly[p] = name
	}
	ns := probeMountNamespace()
	if ns != nil {
		t.Logf("no private mount namespace (%v): programs that need the driver or a kernel module are checked "+
			"by what the loader resolves libcuda.so.1 to, and run only where that needs neither", ns)
	}

	var summary []closureRow
	for _, name := range sortedKeys(m.Cases) {
		c := m.Cases[name]
		t.Run(name, func(t *testing.T) {
			summary = append(summary, checkNixCase(t, n, &m, name, c, buildOnly, ns == nil)...)
		})
	}

	t.Run("patched-twice", func(t *testing.T) {
		for _, name := range sortedKeys(m.Cases) {
			c := m.Cases[name]
			if c.SameClosureAs == "" {
				continue
			}
			other, ok := m.Cases[c.SameClosureAs]
			if !ok {
				t.Fatalf("%s: sameClosureAs names no case %q", name, c.SameClosureAs)
			}
			compareClosures(t, n, name, c, c.SameClosureAs, other)
		}
	})

	for _, name := range sortedKeys(m.Failing) {
		f := m.Failing[name]
		t.Run("fails/"+name, func(t *testing.T) {
			_, stderr, err := n.build([]string{f.DrvPath})
			if err == nil {
				t.Fatalf("nix-build -A failing.%s succeeded", name)
			}
			for _, want := range f.Stderr {
				if !bytes.Contains(stderr, []byte(want)) {
					t.Errorf("stderr lacks %q:\n%s", want, tail(stderr, 40))
				}
			}
			for o, p := range f.Outputs {
				if _, _, err := n.run("nix-store", "--check-validity", p); err == nil {
					t.Errorf("output %s (%s) of the failed build is valid", o, p)
				}
			}
		})
	}

	t.Run("check-rebuild", func(t *testing.T) {
		start := time.Now()
		if _, stderr, err := n.build(m.Build, "--check"); err != nil {
			t.Fatalf("nix-build --check: %v\n%s", err, tail(stderr, 60))
		}
		t.Logf("nix-build --check rebuilt %d cases bit-identically in %s", len(m.Cases), time.Since(start).Round(time.Millisecond))
	})

	t.Run("verify-store", func(t *testing.T) {
		out, stderr, err := n.run("nix-store", "--verify", "--check-contents")
		if err != nil || bytes.Contains(stderr, []byte("modified")) || bytes.Contains(stderr, []byte("error")) {
			t.Fatalf("nix-store --verify --check-contents: %v\n%s%s", err, out, tail(stderr, 40))
		}
	})
	t.Logf("Nix tier: %s", time.Since(start).Round(time.Millisecond))
	t.Logf("closures (nix-store -q --requisites, --size summed; references by name):\n%s", closureTable(summary))
}

// closureRow is one output of one case, for the summary the tier logs.
type closureRow struct {
	drv, output, path string
	paths             int
	bytes             int64
	refs              []string
}

func closureTable(rows []closureRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %-7s %5s %9s  %s\n", "case", "output", "paths", "bytes", "references")
	for _, r := range rows {
		refs := strings.Join(r.refs, " ")
		if refs == "" {
			refs = "(none)"
		}
		fmt.Fprintf(&b, "%-28s %-7s %5d %9d  %s\n", r.drv, r.output, r.paths, r.bytes, refs)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// storePathOf returns /nix/store/HASH-NAME of a path below it, or "".
func storePathOf(p string) string {
	const store = "/nix/store/"
	if !strings.HasPrefix(p, store) {
		return ""
	}
	rest := p[len(store):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return store + rest
}

func isStubPath(p string) bool {
	return strings.Contains(p, "/stubs/") || strings.HasSuffix(p, "/stubs") || strings.Contains(p, "-stubs/")
}

func checkNixCase(t *testing.T, n *nix, m *nixManifest, name string, c nixCase, buildOnly map[string]string, namespaces bool) []closureRow {
	if got, want := sortedKeys(c.Outputs), slices.Sorted(slices.Values(c.AllOutputs)); !slices.Equal(got, want) {
		t.Fatalf("the manifest describes outputs %v, the derivation has %v", got, want)
	}
	var rows []closureRow
	for _, oname := range sortedKeys(c.Outputs) {
		o := c.Outputs[oname]
		t.Run(oname, func(t *testing.T) {
			if _, _, err := n.run("nix-store", "--check-validity", o.Path); err != nil {
				t.Fatalf("%s was not built (nix-store -l %s)", o.Path, c.DrvPath)
			}
			refs := n.query(t, "--references", o.Path)
			checkReferences(t, refs, o.References, buildOnly)
			refSet := map[string]bool{o.Path: true}
			for _, r := range refs {
				refSet[r] = true
			}

			reqs := n.query(t, "--requisites", o.Path)
			var size int64
			for _, r := range reqs {
				if name, ok := buildOnly[r]; ok && r != o.Path {
					t.Errorf("the closure holds %s (%s), a build-time input", name, r)
				}
				var s int64
				fmt.Sscan(string(n.must(t, "nix-store", "-q", "--size", r)), &s)
				size += s
			}
			for what, p := range o.NotInClosure {
				if slices.Contains(reqs, p) {
					t.Errorf("the closure holds %s (%s)", what, p)
				}
			}
			for what, p := range o.InClosure {
				if !slices.Contains(reqs, p) {
					t.Errorf("the closure lacks %s (%s)", what, p)
				}
			}
			t.Logf("%s: closure %d paths, %d bytes; references %v", o.Path, len(reqs), size, shortNames(refs))
			rows = append(rows, closureRow{name, oname, o.Path, len(reqs), size, shortNames(refs)})

			for _, f := range o.Files {
				if st, err := os.Stat(filepath.Join(o.Path, f)); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
					t.Errorf("%s: not a non-empty file of the output (%v)", f, err)
				}
			}
			checkFiles(t, m, c, o, refSet, namespaces)
		})
	}
	if len(c.Log) > 0 || len(c.LogCount) > 0 {
		log := n.must(t, "nix-store", "--read-log", c.DrvPath)
		for _, want := range c.Log {
			if !bytes.Contains(log, []byte(want)) {
				t.Errorf("build log lacks %q", want)
			}
		}
		for s, want := range c.LogCount {
			if got := bytes.Count(log, []byte(s)); got != want {
				t.Errorf("build log has %q %d times, want %d", s, got, want)
			}
		}
	}
	return rows
}

func shortNames(paths []string) []string {
	var s []string
	for _, p := range paths {
		base := filepath.Base(p)
		if i := strings.IndexByte(base, '-'); i >= 0 {
			base = base[i+1:]
		}
		s = append(s, base)
	}
	slices.Sort(s)
	return s
}

func checkReferences(t *testing.T, got, want []string, buildOnly map[string]string) {
	t.Helper()
	g, w := map[string]bool{}, map[string]bool{}
	for _, p := range got {
		g[p] = true
	}
	for _, p := range want {
		w[p] = true
	}
	for _, p := range got {
		if !w[p] {
			if name, ok := buildOnly[p]; ok {
				t.Errorf("references %s (%s), a build-time input", name, p)
			} else {
				t.Errorf("references %s, which it should not", p)
			}
		}
	}
	for _, p := range want {
		if !g[p] {
			t.Errorf("does not reference %s", p)
		}
	}
}

// checkFiles walks an output: every ELF file's RUNPATH and interpreter, the
// libraries the loader resolves for it, its resolution-cache note if it has
// one; no file holds a build-directory path; every executable runs.
func checkFiles(t *testing.T, m *nixManifest, c nixCase, o nixOutput, refs map[string]bool, namespaces bool) {
	t.Helper()
	seen := map[string]bool{}
	ran := map[string]bool{}
	err := filepath.WalkDir(o.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(o.Path, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		// Build directories: Nix's without a sandbox, the sandbox's, and
		// this test's temporary directory.
		for _, bad := range []string{"/tmp/nix-build-", "/build/", os.TempDir() + "/"} {
			if bytes.Contains(data, []byte(bad)) {
				t.Errorf("%s holds %q", rel, bad)
				break
			}
		}
		if !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
			return nil
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		defer f.Close()
		seen[rel] = true
		want, ok := o.Runpaths[rel]
		if !ok {
			t.Errorf("%s: an ELF file the manifest does not describe", rel)
		}
		rp, _ := f.DynString(elf.DT_RUNPATH)
		if got := strings.Join(rp, ":"); ok && got != want {
			t.Errorf("%s: RUNPATH %q, want %q", rel, got, want)
		}
		if old, _ := f.DynString(elf.DT_RPATH); len(old) > 0 {
			t.Errorf("%s: has a DT_RPATH %q", rel, old)
		}
		interp := ""
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err != nil {
					return err
				}
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		if interp != "" && interp != m.Interpreter {
			t.Errorf("%s: interpreter %s, want %s", rel, interp, m.Interpreter)
		}
		dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_DYNAMIC })
		if dynamic {
			checkLoaded(t, m, c, rel, p, refs)
		}
		for _, p := range noteProblems(f, refs) {
			t.Errorf("%s: %s", rel, p)
		}
		// Executables: those with an interpreter, and static ones.
		if interp != "" || (!dynamic && f.Type == elf.ET_EXEC) {
			runs, ok := o.Runs[rel]
			if !ok {
				t.Errorf("%s: an executable the manifest does not run", rel)
			}
			for _, r := range runs {
				runProgram(t, m, rel, p, interp != "", r, namespaces)
			}
			ran[rel] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range o.Runpaths {
		if !seen[rel] {
			t.Errorf("%s: described by the manifest but not an ELF file of the output", rel)
		}
	}
	for rel := range o.Runs {
		if !ran[rel] {
			t.Errorf("%s: the manifest runs it but it is not an executable of the output", rel)
		}
	}
}

// checkLoaded lists what the loader loads for a file (cache inhibited, no
// LD_LIBRARY_PATH): every store path it resolves to is referenced and no
// library comes from a stub directory; only driver libraries and the case's
// allowed names may be missing.
func checkLoaded(t *testing.T, m *nixManifest, c nixCase, rel, path string, refs map[string]bool) {
	t.Helper()
	cmd := exec.Command(m.Interpreter, "--inhibit-cache", path)
	cmd.Env = []string{"LD_TRACE_LOADED_OBJECTS=1", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: the loader cannot list it: %v\n%s", rel, err, out)
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, target, ok := strings.Cut(strings.TrimSpace(line), " => ")
		if !ok {
			continue
		}
		if target == "not found" {
			if !slices.Contains(driverLibraries, name) && !slices.Contains(c.AllowMissing, name) {
				t.Errorf("%s: %s is not found", rel, name)
			}
			continue
		}
		lib, _, _ := strings.Cut(target, " (0x")
		if isStubPath(lib) {
			t.Errorf("%s: %s loads from a stub directory: %s", rel, name, lib)
		}
		if sp := storePathOf(lib); sp != "" && !refs[sp] {
			t.Errorf("%s: %s resolves to %s, whose store path is not a reference", rel, name, lib)
		}
	}
}

// noteProblems checks a file's resolution-cache note (.note.nixos.ldcache),
// if it has one in a PT_NOTE: every "=" element's store path is a
// reference (Nix finds references by scanning for their hashes, so the
// note decides the closure as the RUNPATH does), and no element names a
// stub or build directory.
func noteProblems(f *elf.File, refs map[string]bool) []string {
	var problems []string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_NOTE {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return append(problems, fmt.Sprintf("PT_NOTE: %v", err))
		}
		a := max(prog.Align, 4)
		align := func(x uint32) int { return int((uint64(x) + a - 1) &^ (a - 1)) }
		for len(b) >= 12 {
			namesz, descsz, typ := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:]), f.ByteOrder.Uint32(b[8:])
			if 12+align(namesz)+align(descsz) > len(b) {
				break
			}
			name := strings.TrimRight(string(b[12:12+namesz]), "\x00")
			desc := b[12+align(namesz) : 12+align(namesz)+int(descsz)]
			b = b[12+align(namesz)+align(descsz):]
			if name != ldcache.Owner || typ != ldcache.Type {
				continue
			}
			cache, err := ldcache.Decode(desc)
			if err != nil {
				problems = append(problems, fmt.Sprintf("resolution-cache note: %v", err))
				continue
			}
			for _, e := range cache {
				for _, el := range e.Elements {
					if isStubPath(el.Path) || strings.HasPrefix(el.Path, "/build/") || strings.HasPrefix(el.Path, "/tmp/") {
						problems = append(problems, fmt.Sprintf("note entry %s → %s names a stub or build directory", e.Name, el))
					}
					if sp := storePathOf(el.Path); el.Exact && sp != "" && !refs[sp] {
						problems = append(problems, fmt.Sprintf("note entry %s → %s: its store path is not a reference", e.Name, el))
					}
				}
			}
		}
	}
	return problems
}

// runProgram runs a program from the store as the loader would find its
// libraries on a user's machine: no LD_LIBRARY_PATH, the loader cache
// inhibited (through the interpreter) and, separately, started directly
// (through its PT_INTERP); a static executable only directly. With
// WithDriver the test's libcuda is mounted at the driver link, and with
// Module the kernel module is faked or hidden, in a private mount
// namespace (nothing outside sees either).
func runProgram(t *testing.T, m *nixManifest, rel, path string, dynamic bool, r nixProgramRun, namespaces bool) {
	t.Helper()
	env := []string{"PATH=/usr/bin:/bin"}
	check := func(how string, cmd *exec.Cmd) {
		cmd.Env = env
		cmd.Args = append(cmd.Args, r.Args...)
		out, err := cmd.CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil {
			t.Errorf("%s %q (%s): %v\n%s", rel, r.Args, how, err, got)
			return
		}
		if r.WantLines == nil && got != r.Want {
			t.Errorf("%s %q (%s): printed %q, want %q", rel, r.Args, how, got, r.Want)
		}
		for _, l := range r.WantLines {
			if !slices.Contains(strings.Split(got, "\n"), l) {
				t.Errorf("%s %q (%s): printed %q, without the line %q", rel, r.Args, how, got, l)
			}
		}
	}
	direct := func(how string) {
		check(how+"loader cache inhibited", exec.Command(m.Interpreter, "--inhibit-cache", path))
		check(how+"started directly", exec.Command(path))
	}
	if !dynamic {
		check("static, started directly", exec.Command(path))
		return
	}
	if !r.WithDriver && r.Module == "" {
		direct("")
		return
	}
	if !namespaces {
		runWithoutNamespace(t, m, rel, path, r, direct)
		return
	}
	var what []string
	link, lib := "", ""
	if r.WithDriver {
		what = append(what, "driver mounted")
		link, lib = m.DriverLink, m.DriverLib
	}
	switch r.Module {
	case "":
	case noModule:
		what = append(what, "no kernel module")
	default:
		what = append(what, "kernel module "+r.Module)
	}
	for _, how := range []struct {
		name string
		argv []string
	}{
		{"loader cache inhibited", []string{m.Interpreter, "--inhibit-cache", path}},
		{"started directly", []string{path}},
	} {
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", machineScript, "sh", link, lib, r.Module}, how.argv...)
		check(strings.Join(append(what, how.name), ", "), exec.Command("unshare", args...))
	}
}

// machineScript, run by sh in a private mount namespace with the arguments
// LINK LIB MODULE COMMAND..., makes the machine a program sees: LIB's files
// at the driver link LINK (a tmpfs on /run), unless LINK is empty; the
// kernel module MODULE (nixProgramRun.Module) on a tmpfs over /proc/driver
// (/sys/module hidden too where it names an NVIDIA module: the selector
// reads /sys/module/nvidia/version, and takes a Jetson's nvgpu for a module);
// then runs COMMAND.
const machineScript = `set -e
link=$1 lib=$2 module=$3
shift 3
if [ -n "$link" ]; then
	mount -t tmpfs cudapatch-test /run
	mkdir -p "$link"
	cp "$lib"/* "$link"/
fi
if [ -n "$module" ]; then
	mount -t tmpfs cudapatch-test /proc/driver
	if [ -e /sys/module/nvidia ] || [ -e /sys/module/nvgpu ]; then
		mount -t tmpfs cudapatch-test /sys/module
	fi
	if [ "$module" != none ]; then
		mkdir /proc/driver/nvidia
		printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n' "$module" >/proc/driver/nvidia/version
	fi
fi
exec "$@"`

// runWithoutNamespace checks what can be checked of a run that needs the
// driver mounted or a kernel module faked, where no private mount namespace
// can be had: what the loader resolves libcuda.so.1 to decides it.
//   - Not found: the loader must have looked for it at the driver link.
//   - A selector: it must load the driver from the driver link when it takes
//     the driver; and a run on a machine without a kernel module, which
//     needs neither, is run when this machine has none.
//   - Another library in the store (compat's own): the driver link is never
//     read, so the run is run as it is.
func runWithoutNamespace(t *testing.T, m *nixManifest, rel, path string, r nixProgramRun, direct func(how string)) {
	t.Helper()
	cmd := exec.Command(m.Interpreter, "--inhibit-cache", path)
	cmd.Env = []string{"LD_TRACE_LOADED_OBJECTS=1", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: the loader cannot list it: %v\n%s", rel, err, out)
		return
	}
	libcuda := ""
	for _, line := range strings.Split(string(out), "\n") {
		if name, target, ok := strings.Cut(strings.TrimSpace(line), " => "); ok && name == "libcuda.so.1" {
			libcuda, _, _ = strings.Cut(target, " (0x")
		}
	}
	switch {
	case libcuda == "" || libcuda == "not found":
		cmd := exec.Command(m.Interpreter, "--inhibit-cache", path)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_DEBUG=libs"}
		out, _ := cmd.CombinedOutput()
		if !searchedDir(out, "libcuda.so.1", m.DriverLink) {
			t.Errorf("%s: the loader never searched %s for libcuda.so.1:\n%s", rel, m.DriverLink, out)
		}
	case storePathOf(libcuda) == "":
		t.Errorf("%s: libcuda.so.1 resolves to %s, outside the store", rel, libcuda)
	default:
		info, err := selector.Read(libcuda)
		if errors.Is(err, selector.ErrNotSelector) {
			direct("no namespace, libcuda.so.1 from " + libcuda + ", ")
			return
		}
		if err != nil {
			t.Errorf("%s: libcuda.so.1: %v", rel, err)
			return
		}
		if want := filepath.Join(m.DriverLink, "libcuda.so.1"); !slices.Contains(info.Driver, want) {
			t.Errorf("%s: the selector %s loads the driver from %q, not %s", rel, libcuda, info.Driver, want)
		}
		if here := nvdriver.ReadMachine("/proc", "/sys"); r.Module == noModule && here.Module == "" && !here.Tegra {
			direct("no namespace, no kernel module on this machine, ")
		}
	}
}

// searchedDir says whether glibc's LD_DEBUG=libs output shows lib looked
// up in dir. The loader prints "trying file=DIR/LIB" only while DIR exists:
// after a first lookup finds no DIR it drops DIR from that RUNPATH's search
// path for good. So where DIR is absent, lib counts as looked up in DIR when
// a RUNPATH it was searched with listed DIR the first time it was used.
func searchedDir(out []byte, lib, dir string) bool {
	if bytes.Contains(out, []byte("trying file="+dir+"/"+lib)) {
		return true
	}
	if _, err := os.Stat(dir); err == nil {
		return false
	}
	firstPath := map[string][]string{} // RUNPATH owner -> its search path when first used
	var owners []string                // the owners whose RUNPATH searched lib
	inLib := false
	for _, line := range strings.Split(string(out), "\n") {
		if _, rest, ok := strings.Cut(line, "find library="); ok {
			inLib = strings.HasPrefix(rest, lib+" ")
			continue
		}
		_, rest, ok := strings.Cut(line, "search path=")
		if !ok {
			continue
		}
		path, owner, ok := strings.Cut(rest, "\t\t(RUNPATH from file ")
		if !ok {
			continue
		}
		owner = strings.TrimSuffix(owner, ")")
		if _, seen := firstPath[owner]; !seen {
			firstPath[owner] = strings.Split(path, ":")
		}
		if inLib {
			owners = append(owners, owner)
		}
	}
	return slices.ContainsFunc(owners, func(o string) bool { return slices.Contains(firstPath[o], dir) })
}

// killedBuilder is how Nix reports a builder that died of SIGKILL.
const killedBuilder = "failed due to signal 9 (Killed)"

// killedBuilds is how many times the Nix tier builds while the only
// failures are builders Nix killed itself (NixOS/nix#2176).
const killedBuilds = 4

// probeMountNamespace says whether this process may run a command in a
// private mount namespace with a tmpfs on /run and one on /proc/driver
// (root on a VM or a privileged container), as machineScript does; nil
// when it may.
func probeMountNamespace() error {
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs cudapatch-test /run && mkdir -p /run/probe && "+
			"mount -t tmpfs cudapatch-test /proc/driver && mkdir /proc/driver/nvidia").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// compareClosures: a package rebuilt from already-patched outputs must have
// the closure of the package patched once: the same references and RUNPATHs
// once each package's own output paths are named by output.
func compareClosures(t *testing.T, n *nix, name string, c nixCase, otherName string, other nixCase) {
	t.Helper()
	norm := func(cc nixCase, s string) string {
		for oname, o := range cc.Outputs {
			s = strings.ReplaceAll(s, o.Path, "<"+oname+">")
		}
		return s
	}
	for _, oname := range sortedKeys(c.Outputs) {
		o, ok := other.Outputs[oname]
		if !ok {
			t.Errorf("%s has output %s, %s has not", name, oname, otherName)
			continue
		}
		// query: a nix-store query of one output, its own paths named.
		query := func(cc nixCase, q, path string) []string {
			var out []string
			for _, r := range n.query(t, q, path) {
				out = append(out, norm(cc, r))
			}
			slices.Sort(out)
			return out
		}
		if got, want := query(c, "--references", c.Outputs[oname].Path), query(other, "--references", o.Path); !slices.Equal(got, want) {
			t.Errorf("%s.%s references %v; %s.%s references %v", name, oname, got, otherName, oname, want)
		}
		if got, want := query(c, "--requisites", c.Outputs[oname].Path), query(other, "--requisites", o.Path); !slices.Equal(got, want) {
			t.Errorf("%s.%s has the closure %v; %s.%s has %v", name, oname, got, otherName, oname, want)
		}
		gr, wr := runpaths(t, c.Outputs[oname].Path), runpaths(t, o.Path)
		for rel, rp := range wr {
			if g := norm(c, gr[rel]); g != norm(other, rp) {
				t.Errorf("%s: RUNPATH %q in %s.%s, %q in %s.%s", rel, g, name, oname, norm(other, rp), otherName, oname)
			}
		}
		if len(gr) != len(wr) {
			t.Errorf("%s.%s has %d ELF files, %s.%s %d", name, oname, len(gr), otherName, oname, len(wr))
		}
	}
}

// runpaths reads the RUNPATH of every ELF file below dir.
func runpaths(t *testing.T, dir string) map[string]string {
	t.Helper()
	rps := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(data, []byte(elf.ELFMAG)) {
			return err
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		rp, _ := f.DynString(elf.DT_RUNPATH)
		rps[rel] = strings.Join(rp, ":")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rps
}

// TestNoteProblems: the note check of the Nix tier finds what it must in a
// library that carries a note in a PT_NOTE, as the loader reads it (written
// here with the assembler, before cudapatch writes notes in the Nix builds).
func TestNoteProblems(t *testing.T) {
	needTool(t, "gcc", "gcc")
	const (
		good  = "/nix/store/0000000000000000000000000000good-dep"
		other = "/nix/store/000000000000000000000000000other-dep"
		stubs = "/nix/store/00000000000000000000000000000000-cuda_cudart-12.0-stubs"
	)
	cache := ldcache.Cache{
		{Name: "libcuda.so.1", Elements: []ldcache.Element{{Exact: true, Path: stubs + "/lib/libcuda.so.1"}, {Path: "/run/opengl-driver/lib"}}},
		{Name: "libgood.so", Elements: []ldcache.Element{{Exact: true, Path: good + "/lib/libgood.so"}}},
		{Name: "libother.so", Elements: []ldcache.Element{{Exact: true, Path: other + "/lib/libother.so"}}},
		{Name: "libtmp.so", Elements: []ldcache.Element{{Path: "/tmp/nix-build-x.drv-0/build/lib"}}},
	}
	desc := cache.Encode()
	var asm strings.Builder
	fmt.Fprintf(&asm, ".section %s,\"a\",@note\n.balign 4\n.long %d, %d, %d\n.asciz \"%s\"\n.balign 4\n",
		ldcache.Section, len(ldcache.Owner)+1, len(desc), ldcache.Type, ldcache.Owner)
	for _, c := range desc {
		fmt.Fprintf(&asm, ".byte %d\n", c)
	}
	asm.WriteString(".balign 4\n.text\n.globl x\nx:\n\tret\n")
	lib := fixtures.Compile(t, fixtures.C{Files: map[string]string{"x.s": asm.String()}, Args: []string{"-shared", "-nostdlib", "x.s"}})
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := noteProblems(f, map[string]bool{good: true, stubs: true})
	want := []string{
		"note entry libcuda.so.1 → =" + stubs + "/lib/libcuda.so.1 names a stub or build directory",
		"note entry libother.so → =" + other + "/lib/libother.so: its store path is not a reference",
		"note entry libtmp.so → ?/tmp/nix-build-x.drv-0/build/lib names a stub or build directory",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := noteProblems(f, map[string]bool{good: true, other: true, stubs: true}); len(got) != 2 {
		t.Errorf("with libother referenced: %q, want the stub and the build directory", got)
	}
}

// TestSearchedDir: the LD_DEBUG reading above, on the loader's own words
// (glibc 2.36), with the driver link absent as on a machine without one.
func TestSearchedDir(t *testing.T) {
	const link = "/nonexistent/cudapatch-driver-link"
	first := "  1:\tfind library=libgpu.so [0]; searching\n" +
		"  1:\t search path=" + link + "/tls:" + link + ":/s/app/lib\t\t(RUNPATH from file /s/app/bin/app)\n" +
		"  1:\t  trying file=" + link + "/libgpu.so\n"
	for _, tc := range []struct {
		name string
		out  string
		want bool
	}{
		{"tried directly", "  1:\t  trying file=" + link + "/libcuda.so.1\n", true},
		{"pruned after the first lookup", first +
			"  1:\tfind library=libcuda.so.1 [0]; searching\n" +
			"  1:\t search path=\t\t(RUNPATH from file /s/app/bin/app)\n", true},
		{"searched with a RUNPATH without the link", first +
			"  1:\tfind library=libcuda.so.1 [0]; searching\n" +
			"  1:\t search path=/s/lib\t\t(RUNPATH from file /s/lib/libgpu.so)\n", false},
		{"the link only in another library's search", first +
			"  1:\tfind library=libcuda.so.1 [0]; searching\n" +
			"  1:\t search path=/lib\t\t(system search path)\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := searchedDir([]byte(tc.out), "libcuda.so.1", link); got != tc.want {
				t.Errorf("searchedDir = %v, want %v", got, tc.want)
			}
		})
	}
}
