package elfedit_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// binutilsPrefix is the prefix of the binutils that handle each fixture
// arch: strip and objcopy must be the ones built for the file's machine
// (x86_64 binutils refuse to strip an s390x file, or worse, mangle it).
var binutilsPrefix = map[string]string{
	"x86_64":  "",
	"i686":    "i686-linux-gnu-",
	"aarch64": "aarch64-linux-gnu-",
	"armhf":   "arm-linux-gnueabihf-",
	"ppc64el": "powerpc64le-linux-gnu-",
	"riscv64": "riscv64-linux-gnu-",
	"s390x":   "s390x-linux-gnu-",
	"ppc64":   "powerpc64-linux-gnu-",
}

// sysroot is the directory qemu-user's -L option names for a foreign
// fixture, "" for a native one: the loader qemu starts is sysroot+PT_INTERP.
func sysroot(fx fixtures.Fixture) string {
	for i, a := range fx.RunPrefix {
		if a == "-L" && i+1 < len(fx.RunPrefix) {
			return fx.RunPrefix[i+1]
		}
	}
	return ""
}

// builtInterp is the PT_INTERP of the variant's main as built (read from
// the fixture cache, not from a copy a test may have edited).
func builtInterp(t testing.TB, fx fixtures.Fixture) string {
	t.Helper()
	f, err := elfedit.Open(fixtures.ByName(t, fx.Name).Exe)
	require.NoError(t, err)
	defer f.Close()
	return f.Interp
}

// realInterp is the host path of the loader that runs fx: the fixture's
// PT_INTERP as qemu -L sees it, with symlinks resolved.
func realInterp(t testing.TB, fx fixtures.Fixture) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(sysroot(fx) + builtInterp(t, fx))
	require.NoError(t, err)
	return p
}

// longInterp makes a path to the fixture's loader about n bytes long out of
// a chain of directory symlinks in a temp dir.
func longInterp(t testing.TB, fx fixtures.Fixture, n int) string {
	t.Helper()
	dir := t.TempDir()
	p := dir
	for i := 0; len(p) < n-20; i++ {
		next := filepath.Join(p, strings.Repeat(string(rune('a'+i%26)), 40))
		require.NoError(t, os.Mkdir(next, 0o755))
		p = next
	}
	p = filepath.Join(p, "ld.so")
	require.NoError(t, os.Symlink(realInterp(t, fx), p))
	return p
}

// dotdotInterp spells the fixture's interpreter differently and longer
// ("/lib64/../lib64/ld-linux-x86-64.so.2"), so that it no longer fits in
// PT_INTERP but names the same loader, also under qemu -L.
func dotdotInterp(t testing.TB, fx fixtures.Fixture) string {
	t.Helper()
	dir, base := filepath.Split(builtInterp(t, fx))
	d := strings.TrimSuffix(dir, "/")
	return d + "/.." + d + "/" + base
}

// str returns a pointer to s, for the optional fields of Edit.
func str(s string) *string { return &s }

func ptr[T any](v T) *T { return &v }

// pad makes a search path of about n bytes whose last entry is dir: the
// first entries name directories that do not exist.
func pad(n int, dir string) string {
	var b strings.Builder
	for i := 0; b.Len()+len(dir)+1 < n; i++ {
		seg := "/nonexistent/" + strings.Repeat(string(rune('a'+i%26)), 60)
		if b.Len()+len(seg)+1+len(dir) > n {
			seg = "/n" + strings.Repeat("x", max(0, n-b.Len()-len(dir)-3))
		}
		b.WriteString(seg)
		b.WriteByte(':')
	}
	b.WriteString(dir)
	return b.String()
}

// want is the dynamic-linking data a file must read back as.
type want struct {
	Interp  string
	Soname  string
	Needed  []string
	RunPath *string
	RPath   *string
	// The fields patchelf's other options change.
	OSABI     string
	ExecStack string
	Debug     bool
	NoDefLib  bool
}

func wantOf(in elfedit.Info) want {
	return want{Interp: in.Interpreter, Soname: in.Soname, Needed: slices.Clone(in.Needed), RunPath: in.RunPath, RPath: in.RPath,
		OSABI: in.OSABI, ExecStack: in.ExecStack, Debug: in.Debug, NoDefLib: in.Flags1&uint64(elf.DF_1_NODEFLIB) != 0}
}

// expect is an independent model of what an edit means: it applies e to
// the values of the original file, the way the Edit documentation says.
func expect(orig elfedit.Info, e elfedit.Edit) want {
	w := wantOf(orig)
	if e.OSABI != nil {
		w.OSABI = e.OSABI.String()
	}
	if e.ExecStack != nil && w.ExecStack != "" {
		w.ExecStack = map[bool]string{true: "X", false: "-"}[*e.ExecStack]
	}
	w.Debug = w.Debug || e.AddDebug
	w.NoDefLib = w.NoDefLib || e.NoDefaultLib
	if e.Interpreter != nil {
		w.Interp = *e.Interpreter
	}
	if e.Soname != nil {
		w.Soname = *e.Soname
	}
	for _, n := range e.RemoveNeeded {
		w.Needed = slices.DeleteFunc(w.Needed, func(s string) bool { return s == n })
	}
	for _, r := range e.ReplaceNeeded {
		for i := range w.Needed {
			if w.Needed[i] == r.Old {
				w.Needed[i] = r.New
			}
		}
	}
	var add []string
	for _, n := range e.AddNeeded {
		if !slices.Contains(w.Needed, n) && !slices.Contains(add, n) {
			add = append(add, n)
		}
	}
	w.Needed = append(add, w.Needed...)
	if len(w.Needed) == 0 {
		w.Needed = nil
	}
	switch {
	case e.RemovePath:
		w.RunPath, w.RPath = nil, nil
	case e.Tag == elfedit.TagKeep:
		if e.SetPath != nil {
			if w.RunPath != nil {
				w.RunPath = e.SetPath
			}
			if w.RPath != nil {
				w.RPath = e.SetPath
			}
			if w.RunPath == nil && w.RPath == nil {
				w.RunPath = e.SetPath
			}
		}
	case e.SetPath != nil:
		// The value moves to the requested tag; the other tag goes.
		have, other := &w.RunPath, &w.RPath
		if e.Tag == elfedit.TagRPath {
			have, other = other, have
		}
		*have, *other = e.SetPath, nil
	}
	return w
}

func deref(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}

// checkWant reads path back with elfedit and with debug/elf (which goes
// through the section headers, so it also checks that they followed the
// move) and compares both with w.
func checkWant(t testing.TB, path string, w want) {
	t.Helper()
	checkWantElfedit(t, path, w)
	checkWantDebugElf(t, path, w)
}

// checkWantElfedit reads path back with elfedit and compares with w.
func checkWantElfedit(t testing.TB, path string, w want) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err, "elfedit re-read")
	in := f.Info()
	f.Close()
	assert.Equal(t, w.Interp, in.Interpreter, "elfedit: interpreter")
	assert.Equal(t, w.Soname, in.Soname, "elfedit: soname")
	assert.Equal(t, w.Needed, in.Needed, "elfedit: needed")
	assert.Equal(t, deref(w.RunPath), deref(in.RunPath), "elfedit: runpath")
	assert.Equal(t, deref(w.RPath), deref(in.RPath), "elfedit: rpath")
	assert.Equal(t, w.OSABI, in.OSABI, "elfedit: OS ABI")
	assert.Equal(t, w.ExecStack, in.ExecStack, "elfedit: stack flag")
	assert.Equal(t, w.Debug, in.Debug, "elfedit: DT_DEBUG")
	assert.Equal(t, w.NoDefLib, in.Flags1&uint64(elf.DF_1_NODEFLIB) != 0, "elfedit: DF_1_NODEFLIB")
}

// checkWantDebugElf reads path back with debug/elf, which goes through the
// section headers, and compares with w.
func checkWantDebugElf(t testing.TB, path string, w want) {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err, "debug/elf re-read")
	defer ef.Close()
	var interp string
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			_, err := p.ReadAt(b, 0)
			require.NoError(t, err)
			interp, _, _ = strings.Cut(string(b), "\x00")
		}
	}
	assert.Equal(t, w.Interp, interp, "debug/elf: interpreter")
	dyn := func(tag elf.DynTag) *string {
		v, err := ef.DynString(tag)
		require.NoError(t, err, "debug/elf: %v", tag)
		if len(v) == 0 {
			return nil
		}
		return &v[0]
	}
	if ef.Section(".dynamic") == nil {
		return // static: nothing more debug/elf can tell
	}
	assert.Equal(t, deref(w.RunPath), deref(dyn(elf.DT_RUNPATH)), "debug/elf: runpath")
	assert.Equal(t, deref(w.RPath), deref(dyn(elf.DT_RPATH)), "debug/elf: rpath")
	soname := ""
	if p := dyn(elf.DT_SONAME); p != nil {
		soname = *p
	}
	assert.Equal(t, w.Soname, soname, "debug/elf: soname")
	libs, err := ef.ImportedLibraries()
	require.NoError(t, err)
	if len(libs) == 0 {
		libs = nil
	}
	assert.Equal(t, w.Needed, libs, "debug/elf: needed")
}

// problems returns the rules Verify reports for the file at path.
func problems(t testing.TB, path string) map[string]string {
	t.Helper()
	ps, err := elfedit.VerifyFile(path)
	require.NoError(t, err)
	m := map[string]string{}
	for _, p := range ps {
		m[p.Rule] = p.Msg
	}
	return m
}

// noNewProblems asserts that Verify finds nothing in after that it did not
// find in before.
func noNewProblems(t testing.TB, before map[string]string, path string) {
	t.Helper()
	for rule, msg := range problems(t, path) {
		if _, ok := before[rule]; !ok {
			t.Errorf("Verify: new problem %s: %s", rule, msg)
		}
	}
}

// run runs argv and returns stdout, stderr and the error.
func run(argv ...string) (string, string, error) {
	var o, e bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

// toolsAccept runs readelf, eu-elflint (where the original passed it),
// strip and objcopy on the edited file at path, and checks that the
// stripped and copied results still work with use (run or load them).
func toolsAccept(t testing.TB, fx fixtures.Fixture, path string, origReadelfErr string, use func(path string) error) {
	t.Helper()
	_, rerr := fixtures.Readelf(t, path)
	assert.Equal(t, origReadelfErr, rerr, "readelf -W -a warnings on %s", filepath.Base(path))
	if fx.ElflintClean {
		assert.NoError(t, elflint(t, path))
	}
	pre := binutilsPrefix[fx.Arch]
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	for _, tool := range []string{"strip", "objcopy"} {
		out := filepath.Join(dir, stem+"."+tool+ext)
		argv := []string{pre + tool, path, out}
		if tool == "strip" {
			argv = []string{pre + tool, "-o", out, path}
		}
		o, e, err := run(argv...)
		if !assert.NoError(t, err, "%s%s %s: %s%s", pre, tool, base, o, e) {
			continue
		}
		assert.Empty(t, o+e, "%s%s %s complained", pre, tool, base)
		assert.NoError(t, use(out), "%s %s result", tool, base)
		_, rerr := fixtures.Readelf(t, out)
		assert.Empty(t, rerr, "readelf warnings on the %s result of %s", tool, base)
		os.Remove(out)
	}
}

// unknownNote is eu-elflint's complaint about a note type it does not know,
// which it makes for any file that carries one (patchelf's resolution
// cache included): it is not a defect of the layout.
var unknownNote = regexp.MustCompile(`^(phdr\[\d+\]|section \[\d+\] '[^']*'): unknown object file note type \d+ with owner name 'NixOS' at offset \d+$`)

// elflint is fixtures.Elflint less the unknownNote lines.
func elflint(t testing.TB, path string) error {
	t.Helper()
	err := fixtures.Elflint(t, path)
	if err == nil {
		return nil
	}
	_, report, _ := strings.Cut(err.Error(), path+": ")
	var rest []string
	for _, line := range strings.Split(report, "\n") {
		if !unknownNote.MatchString(strings.TrimSpace(line)) {
			rest = append(rest, line)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return fmt.Errorf("eu-elflint %s: %s", path, strings.Join(rest, "\n"))
}

// runs returns a function that checks that exe runs and prints fx.Want.
func runs(t testing.TB, fx fixtures.Fixture) func(exe string) error {
	return func(exe string) error {
		out, err := fx.Run(t, exe)
		if err != nil {
			return err
		}
		if out != fx.Want+"\n" {
			return errors.New("unexpected output " + out)
		}
		return nil
	}
}

// loads returns a function that checks that loadlib can dlopen a library.
func loads(t testing.TB, fx fixtures.Fixture) func(lib string) error {
	return func(lib string) error { return fx.Load(t, lib) }
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b := readFile(t, src)
	st, err := os.Stat(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, b, st.Mode().Perm()))
}

func info(t testing.TB, path string) elfedit.Info {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return f.Info()
}

// dynamic returns the dynamic variants of the matrix (the static ones have
// nothing to edit).
func dynamic(t testing.TB) []fixtures.Fixture {
	t.Helper()
	var out []fixtures.Fixture
	for _, fx := range fixtures.All(t) {
		if !fx.Static {
			out = append(out, fx)
		}
	}
	return out
}

// keepOnFailure copies the variant directory of a failed test to
// $ELFEDIT_KEEP/<test name> for a post-mortem (t.TempDir is removed).
func keepOnFailure(t *testing.T, fx fixtures.Fixture) {
	t.Helper()
	root := os.Getenv("ELFEDIT_KEEP")
	if !t.Failed() || root == "" {
		return
	}
	dst := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	os.RemoveAll(dst)
	if err := os.CopyFS(dst, os.DirFS(fx.Dir)); err != nil {
		t.Logf("keeping %s: %v", fx.Dir, err)
		return
	}
	t.Logf("variant %s (%s): files kept under %s", fx.Name, fx.Flags, dst)
}

// noStale checks the Nix hygiene rule: a search path or interpreter that an
// edit replaced must not linger anywhere in the file, or Nix's reference
// scanner keeps the store paths it names in the closure.
func noStale(t testing.TB, path string, before, after want) {
	t.Helper()
	b := readFile(t, path)
	for _, old := range []string{deref(before.RunPath), deref(before.RPath), before.Interp} {
		if old == "" || old == "<none>" || len(old) < 8 {
			continue // too short to be told from other bytes
		}
		if strings.Contains(deref(after.RunPath), old) || strings.Contains(deref(after.RPath), old) || strings.Contains(after.Interp, old) {
			continue // still in use, or part of a new value
		}
		if i := bytes.Index(b, []byte(old)); i >= 0 {
			t.Errorf("replaced string %q still in the file at 0x%x", old, i)
		}
	}
}

// planString describes a plan without its data.
func planString(p *elfedit.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d -> %d:", p.Strategy, p.OldSize, p.NewSize)
	for _, s := range p.Steps {
		fmt.Fprintf(&b, " [%s %q 0x%x+0x%x]", s.Kind, s.What, s.Off, s.Len)
	}
	return b.String()
}
