package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/patchelf"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// realPatchelf returns the patchelf these tests take as the oracle.
func realPatchelf(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("/usr/bin/patchelf")
	if err != nil {
		t.Skip("no /usr/bin/patchelf (apt-get install patchelf): nothing to compare with")
	}
	return p
}

// pfResult is what one patchelf run shows: its output, and the
// dynamic-linking state of the files it may have written, as readelf sees
// them.
type pfResult struct {
	Stdout, Stderr string
	Code           int
	State          map[string]elfState // by path relative to the work dir
	Runs           map[string]string   // output of running the patched executable
}

// elfState is a file's dynamic-linking data per tag. The order of entries
// in .dynamic is not compared: patchelf puts a new DT_SONAME first, elfedit
// after the DT_NEEDED entries, and no loader cares.
type elfState struct {
	Interp  string
	Soname  []string
	Needed  []string
	RPath   []string
	RunPath []string
	Missing bool
}

var (
	readelfDyn    = regexp.MustCompile(`\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+[^[]*\[(.*)\]`)
	readelfInterp = regexp.MustCompile(`\[Requesting program interpreter: (.*)\]`)
)

func readState(t *testing.T, path string) elfState {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return elfState{Missing: true}
	}
	out, _ := exec.Command("readelf", "-dlW", path).Output()
	var s elfState
	if m := readelfInterp.FindSubmatch(out); m != nil {
		s.Interp = string(m[1])
	}
	for _, m := range readelfDyn.FindAllSubmatch(out, -1) {
		v := string(m[2])
		switch string(m[1]) {
		case "NEEDED":
			s.Needed = append(s.Needed, v)
		case "SONAME":
			s.Soname = append(s.Soname, v)
		case "RPATH":
			s.RPath = append(s.RPath, v)
		case "RUNPATH":
			s.RunPath = append(s.RunPath, v)
		}
	}
	return s
}

// withoutEmptyPaths is the one normalisation applied to patchelf's result:
// where patchelf writes an empty RUNPATH or RPATH, we write none (see the
// list in docs/patchelf-suite.md).
func (s elfState) withoutEmptyPaths() elfState {
	empty := func(v string) bool { return v == "" }
	s.RPath = slices.DeleteFunc(slices.Clone(s.RPath), empty)
	s.RunPath = slices.DeleteFunc(slices.Clone(s.RunPath), empty)
	if len(s.RPath) == 0 {
		s.RPath = nil
	}
	if len(s.RunPath) == 0 {
		s.RunPath = nil
	}
	return s
}

type pfCase struct {
	name string
	// target picks the file FILE stands for: "exe" (bin/main) or "lib"
	// (lib/libfoo.so); cases for "lib" skip the static variants.
	target string
	// pre is run with the real patchelf on both copies first, to give the
	// case its starting file.
	pre  []string
	args []string
	// run runs the patched bin/main (native variants only) and compares its
	// output with the run patched by the real patchelf.
	run bool
	// stderrDiffers is set where patchelf's message cannot be matched; the
	// reason is in the name.
	stderrDiffers bool
	// patchelfBug names a bug of the oracle's version: the result is not
	// compared, but ours must run.
	patchelfBug string
}

// pfCases are run on every fixture variant, once with /usr/bin/patchelf and
// once with patchelfMain, on fresh copies at the same path. In args, FILE is
// the target, LIBDIR the variant's lib/, DIR the copy's root, OUT a path for
// --output and FOREIGN the lib/ of an aarch64 variant.
var pfCases = []pfCase{
	{name: "print-rpath", target: "exe", args: []string{"--print-rpath", "FILE"}},
	{name: "print-rpath lib", target: "lib", args: []string{"--print-rpath", "FILE"}},
	{name: "print-interpreter", target: "exe", args: []string{"--print-interpreter", "FILE"}},
	{name: "print-interpreter lib", target: "lib", args: []string{"--print-interpreter", "FILE"}},
	{name: "print-soname", target: "exe", args: []string{"--print-soname", "FILE"}},
	{name: "print-soname lib", target: "lib", args: []string{"--print-soname", "FILE"}},
	{name: "print-needed", target: "exe", args: []string{"--print-needed", "FILE"}},
	{name: "print all", target: "exe", args: []string{"--print-needed", "--print-rpath", "--print-soname", "--print-interpreter", "FILE"}},
	{name: "print all lib", target: "lib", args: []string{"--print-needed", "--print-rpath", "--print-soname", "FILE"}},
	{name: "print options after file", target: "exe", args: []string{"FILE", "--print-rpath"}},
	{name: "print two files", target: "exe", args: []string{"--print-rpath", "FILE", "DIR/lib/libfoo.so"}},
	{name: "print-rpath after set", target: "exe", args: []string{"--set-rpath", "/x", "--print-rpath", "FILE"}},
	{name: "no option", target: "exe", args: []string{"FILE"}},

	{name: "set-rpath", target: "exe", args: []string{"--set-rpath", "LIBDIR", "FILE"}, run: true},
	{name: "set-rpath origin", target: "exe", args: []string{"--set-rpath", "$ORIGIN/../lib", "FILE"}, run: true},
	{name: "set-rpath long", target: "exe", args: []string{"--set-rpath", "/a/very/long/directory/that/does/not/fit/in/place/" + strings.Repeat("x", 200) + ":LIBDIR", "FILE"}, run: true},
	{name: "set-rpath same", target: "exe", args: []string{"--set-rpath", fixtures.OldRunpath, "FILE"}},
	{name: "set-rpath force", target: "exe", args: []string{"--force-rpath", "--set-rpath", "LIBDIR", "FILE"}, run: true},
	{name: "set-rpath lib", target: "lib", args: []string{"--set-rpath", "$ORIGIN", "FILE"}},
	{name: "set-rpath two files", target: "exe", args: []string{"--set-rpath", "$ORIGIN/../lib", "FILE", "DIR/lib/libfoo.so"}, run: true},
	{name: "add-rpath", target: "exe", args: []string{"--add-rpath", "LIBDIR", "FILE"}, run: true},
	{name: "add-rpath twice", target: "exe", args: []string{"--add-rpath", "/x", "--add-rpath", "LIBDIR", "FILE"}, run: true},
	{name: "add-rpath to none", target: "exe", pre: []string{"--remove-rpath", "FILE"}, args: []string{"--add-rpath", "LIBDIR", "FILE"}, run: true},
	// Written as given, like patchelf; ours also warns on stderr
	// (TestPatchelfDeliberateDifferences).
	{name: "set-rpath empty entries", target: "exe", args: []string{"--set-rpath", ":LIBDIR::/x:", "FILE"}, run: true},
	{name: "remove-rpath", target: "exe", args: []string{"--remove-rpath", "FILE"}},
	{name: "remove-rpath wins over set", target: "exe", args: []string{"--set-rpath", "/x", "--remove-rpath", "FILE"}},
	{name: "force-rpath alone", target: "exe", args: []string{"--force-rpath", "FILE"}},
	{name: "shrink-rpath to nothing", target: "exe", args: []string{"--shrink-rpath", "FILE"}},
	{name: "shrink-rpath", target: "exe",
		pre:  []string{"--set-rpath", "/nonexistent:DIR/bin:LIBDIR:$ORIGIN/../lib:DIR/lib/:relative", "FILE"},
		args: []string{"--shrink-rpath", "FILE"}, run: true},
	{name: "shrink-rpath first dir wins", target: "exe",
		pre:  []string{"--set-rpath", "LIBDIR:DIR/lib/", "FILE"},
		args: []string{"--shrink-rpath", "--debug", "FILE"}, run: true},
	{name: "shrink-rpath other machine", target: "exe",
		pre:  []string{"--set-rpath", "FOREIGN:LIBDIR", "FILE"},
		args: []string{"--shrink-rpath", "--debug", "FILE"}, run: true},
	{name: "shrink-rpath allowed prefixes", target: "exe",
		pre:  []string{"--set-rpath", "/nonexistent:DIR/bin:LIBDIR:$ORIGIN/../lib", "FILE"},
		args: []string{"--shrink-rpath", "--allowed-rpath-prefixes", "/nix/store:DIR/l", "FILE"}, run: true},
	{name: "shrink-rpath no allowed prefix", target: "exe",
		pre:  []string{"--set-rpath", "LIBDIR:$ORIGIN/../lib", "FILE"},
		args: []string{"--shrink-rpath", "--allowed-rpath-prefixes", "/nix/store", "--debug", "FILE"}, run: true},
	{name: "shrink-rpath wins over set", target: "exe",
		args: []string{"--set-rpath", "LIBDIR", "--shrink-rpath", "FILE"}},
	{name: "shrink-rpath lib", target: "lib",
		pre:  []string{"--set-rpath", "/nonexistent:$ORIGIN", "FILE"},
		args: []string{"--shrink-rpath", "FILE"}},
	{name: "shrink-rpath keeps rpath tag when forced", target: "exe",
		pre:  []string{"--force-rpath", "--set-rpath", "LIBDIR", "FILE"},
		args: []string{"--force-rpath", "--shrink-rpath", "FILE"}, run: true},
	{name: "shrink-rpath retags unchanged rpath", target: "exe",
		pre:  []string{"--force-rpath", "--set-rpath", "LIBDIR", "FILE"},
		args: []string{"--shrink-rpath", "FILE"}, run: true},

	{name: "set-interpreter same", target: "exe", args: []string{"--set-interpreter", "/lib64/ld-linux-x86-64.so.2", "FILE"}},
	{name: "set-interpreter longer", target: "exe", args: []string{"--set-interpreter", "/lib/../lib/../lib64/ld-linux-x86-64.so.2", "--set-rpath", "LIBDIR", "FILE"}, run: true},
	{name: "set-interpreter lib", target: "lib", args: []string{"--set-interpreter", "/x", "FILE"}},
	{name: "print-interpreter before set", target: "exe", args: []string{"--set-interpreter", "/x", "--print-interpreter", "FILE"}},
	{name: "set-soname", target: "exe", args: []string{"--set-soname", "libmain.so.1", "FILE"}},
	{name: "set-soname lib", target: "lib", args: []string{"--set-soname", "libfoo-renamed-to-something-longer.so.1", "--print-soname", "FILE"}},
	{name: "add-needed", target: "exe", args: []string{"--add-needed", "libbar.so", "--add-needed", "libm.so.6", "FILE"}},
	{name: "add-needed and set-rpath", target: "exe", args: []string{"--add-needed", "libbar.so", "--add-needed", "libm.so.6", "--set-rpath", "LIBDIR", "FILE"}, run: true,
		patchelfBug: "patchelf 0.14.3 writes the first added name as the new RUNPATH"},
	{name: "remove-needed", target: "exe", args: []string{"--remove-needed", "libc.so.6", "--remove-needed", "libnone.so", "FILE"}},
	{name: "replace-needed", target: "exe", args: []string{"--replace-needed", "libfoo.so", "LIBDIR/libfoo.so", "FILE"}, run: true},
	{name: "replace-needed last wins", target: "exe", args: []string{"--replace-needed", "libfoo.so", "/x", "--replace-needed", "libfoo.so", "LIBDIR/libfoo.so", "FILE"}, run: true},
	{name: "print-needed before change", target: "exe", args: []string{"--remove-needed", "libfoo.so", "--print-needed", "FILE"}},
	{name: "everything at once", target: "exe", args: []string{
		"--set-interpreter", "/lib/../lib64/ld-linux-x86-64.so.2", "--set-rpath", "$ORIGIN/../lib",
		"--replace-needed", "libc.so.6", "libc.so.6", "--page-size", "65536", "FILE"}, run: true},
	{name: "output", target: "exe", args: []string{"--set-rpath", "LIBDIR", "--output", "OUT", "FILE"}},
	{name: "output unchanged", target: "exe", args: []string{"--output", "OUT", "FILE"}},
	{name: "output print", target: "exe", args: []string{"--print-rpath", "--output", "OUT", "FILE"}},
	{name: "output bad dir", target: "exe", args: []string{"--set-rpath", "/x", "--output", "DIR/nonexistent/out", "FILE"}},

	{name: "error missing file", target: "exe", args: []string{"--set-rpath", "/x", "DIR/nonexistent"}},
	{name: "error second file missing", target: "exe", args: []string{"--set-rpath", "/x", "FILE", "DIR/nonexistent"}},
	{name: "error first file missing", target: "exe", args: []string{"--set-rpath", "/x", "DIR/nonexistent", "FILE"}},
	{name: "error directory", target: "exe", args: []string{"--print-rpath", "DIR/lib"}},
	{name: "error not elf", target: "exe", args: []string{"--print-rpath", "DIR/notelf.txt"}},
	{name: "error short file", target: "exe", args: []string{"--print-rpath", "DIR/short"}},
	{name: "error unknown option", target: "exe", args: []string{"--bogus", "FILE"}},
	{name: "error missing argument", target: "exe", args: []string{"FILE", "--set-rpath"}},
	{name: "error missing arguments", target: "exe", args: []string{"FILE", "--replace-needed", "a"}},
	{name: "error missing filename", target: "exe", args: []string{"--print-rpath"}},
	{name: "error page size", target: "exe", args: []string{"--page-size", "0", "FILE"}},
	{name: "error page size text", target: "exe", args: []string{"--page-size", "big", "FILE"}},
	{name: "page size atoi", target: "exe", args: []string{"--page-size", "4096k", "--print-rpath", "FILE"}},
	{name: "error set and add", target: "exe", args: []string{"--set-rpath", "/x", "--add-rpath", "/y", "FILE"}},
	{name: "error output with two files", target: "exe", args: []string{"--output", "OUT", "FILE", "FILE"}},
	{name: "no arguments", target: "exe", args: []string{}, stderrDiffers: true},
}

// emptyEntryWarning matches the warning ours prints for a search path with
// an empty entry.
var emptyEntryWarning = regexp.MustCompile(`(?m)^patchelf: warning: search path '.*' has an empty entry, which the loader reads as the current directory\n`)

func hasPath(s elfState) bool { return len(s.RunPath)+len(s.RPath) > 0 }

// TestPatchelfStaticPIE pins a deliberate difference: glibc's static-PIE
// startup (_dl_relocate_static_pie) cannot cope with DT_RUNPATH or DT_RPATH
// in the program's own dynamic section, so the file patchelf writes crashes
// before main. cudapatch refuses with exit 1 and leaves the file as it was.
func TestPatchelfStaticPIE(t *testing.T) {
	real := realPatchelf(t)
	fx := fixtures.ByName(t, "static-pie").Copy(t)
	theirs := filepath.Join(t.TempDir(), "theirs")
	orig, err := os.ReadFile(fx.Exe)
	must(t, err)
	must(t, os.WriteFile(theirs, orig, 0o755))
	if out, err := exec.Command(real, "--set-rpath", "/x", theirs).CombinedOutput(); err != nil {
		t.Fatalf("patchelf: %v\n%s", err, out)
	}
	if out, err := fx.Run(t, theirs); err == nil {
		t.Errorf("the static PIE patched by /usr/bin/patchelf ran (%q): the difference is no longer needed", out)
	}
	var stdout, stderr bytes.Buffer
	if code := patchelfMain([]string{"--set-rpath", "/x", fx.Exe}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "static PIE") {
		t.Errorf("ours: exit %d, stderr %q", code, stderr.String())
	}
	now, err := os.ReadFile(fx.Exe)
	must(t, err)
	if !bytes.Equal(now, orig) {
		t.Error("the refused file changed")
	}
	if out, err := fx.Run(t, fx.Exe); err != nil || out != fx.Want+"\n" {
		t.Errorf("the refused file no longer runs: %q, %v", out, err)
	}
}

// TestPatchelfMatchesPatchelf runs every case with the real patchelf and
// with ours on every fixture variant and compares what they print, their
// exit codes, the resulting dynamic-linking data and, where asked, the
// patched program's output.
func TestPatchelfMatchesPatchelf(t *testing.T) {
	real := realPatchelf(t)
	foreign := fixtures.ByName(t, "aarch64-bfd-pie").LibDir
	short := []string{"bfd-pie", "bfd-nopie", "bfd-rpath", "bfd-norunpath", "static", "static-pie", "lld-pie", "i686-bfd-pie", "s390x-bfd-pie"}
	for _, fx := range fixtures.All(t) {
		if testing.Short() && !slices.Contains(short, fx.Name) {
			continue
		}
		t.Run(fx.Name, func(t *testing.T) {
			t.Parallel()
			pristine := fx.Copy(t)
			for _, c := range pfCases {
				if (c.target == "lib" || c.pre != nil) && fx.Static {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					work := filepath.Join(t.TempDir(), "w")
					runOnce := func(tool func(args []string) (string, string, int)) pfResult {
						t.Helper()
						if err := os.RemoveAll(work); err != nil {
							t.Fatal(err)
						}
						if err := os.CopyFS(work, os.DirFS(pristine.Dir)); err != nil {
							t.Fatal(err)
						}
						must(t, os.WriteFile(filepath.Join(work, "notelf.txt"), bytes.Repeat([]byte("not an ELF file\n"), 8), 0o644))
						must(t, os.WriteFile(filepath.Join(work, "short"), []byte("hi\n"), 0o644))
						file := filepath.Join(work, "bin", "main")
						if c.target == "lib" {
							file = filepath.Join(work, "lib", "libfoo.so")
						}
						expand := strings.NewReplacer("FILE", file, "LIBDIR", filepath.Join(work, "lib"),
							"DIR", work, "OUT", filepath.Join(work, "out"), "FOREIGN", foreign)
						subst := func(args []string) []string {
							out := make([]string, len(args))
							for i, a := range args {
								out[i] = expand.Replace(a)
							}
							return out
						}
						if c.pre != nil {
							if out, err := exec.Command(real, subst(c.pre)...).CombinedOutput(); err != nil {
								t.Fatalf("pre: patchelf %q: %v\n%s", c.pre, err, out)
							}
						}
						var r pfResult
						r.Stdout, r.Stderr, r.Code = tool(subst(c.args))
						r.Stdout = strings.ReplaceAll(r.Stdout, work, "$WORK")
						r.Stderr = strings.ReplaceAll(r.Stderr, work, "$WORK")
						r.State = map[string]elfState{}
						for _, rel := range []string{"bin/main", "lib/libfoo.so", "out"} {
							r.State[rel] = readState(t, filepath.Join(work, rel))
						}
						if c.run && fx.Arch == "x86_64" && !fx.Static {
							// libfoo.so needs libbar.so through its own
							// RUNPATH; give it one that works (the same for
							// both tools) so the run tests bin/main's.
							lib := filepath.Join(work, "lib", "libfoo.so")
							if out, err := exec.Command(real, "--set-rpath", "$ORIGIN", lib).CombinedOutput(); err != nil {
								t.Fatalf("patchelf --set-rpath $ORIGIN %s: %v\n%s", lib, err, out)
							}
							out, err := runFixture(t, fx, file)
							r.Runs = map[string]string{"bin/main": out}
							if err != nil {
								r.Runs["error"] = "failed"
							}
						}
						return r
					}
					want := runOnce(func(args []string) (string, string, int) { return runTool(real, args) })
					got := runOnce(func(args []string) (string, string, int) {
						var stdout, stderr bytes.Buffer
						code := patchelfMain(args, &stdout, &stderr)
						return stdout.String(), stderr.String(), code
					})
					for k, s := range want.State {
						want.State[k] = s.withoutEmptyPaths()
					}
					// Our warning about an empty search path entry, which
					// patchelf does not print (TestPatchelfDeliberateDifferences
					// checks it).
					got.Stderr = emptyEntryWarning.ReplaceAllString(got.Stderr, "")
					if c.stderrDiffers || strings.Contains(want.Stderr, "writing ") {
						// --debug: patchelf's layout lines are its own.
						want.Stderr, got.Stderr = "", ""
					}
					if fx.Name == "static-pie" && (hasPath(want.State["bin/main"]) || hasPath(want.State["out"])) {
						// Deliberate difference (TestPatchelfStaticPIE):
						// patchelf gives a static PIE a search path that its
						// startup code rejects; we refuse and write nothing.
						if got.Code != 1 || !strings.Contains(got.Stderr, "static PIE") || hasPath(got.State["bin/main"]) || hasPath(got.State["out"]) {
							t.Errorf("static PIE: exit %d, stderr %q, state %+v", got.Code, got.Stderr, got.State)
						}
						return
					}
					if c.patchelfBug != "" {
						t.Logf("not compared: %s", c.patchelfBug)
						want.State, want.Runs = got.State, got.Runs
					}
					if d := diffResults(want, got); d != "" {
						t.Errorf("patchelf %q differs from /usr/bin/patchelf:\n%s", c.args, d)
					}
					if c.run && want.Runs != nil && want.Runs["bin/main"] != fx.Want+"\n" {
						t.Logf("note: the program patched by /usr/bin/patchelf printed %q", want.Runs["bin/main"])
					}
					// Runs are not compared: ours must run whatever the
					// oracle's did (a loaded machine can kill either).
					if c.run && got.Runs != nil && got.Runs["bin/main"] != fx.Want+"\n" {
						t.Errorf("patched program does not run: %q", got.Runs["bin/main"])
					}
				})
			}
		})
	}
}

// runFixture runs bin/main of the work copy (file may be the program or a
// library next to it).
func runFixture(t *testing.T, fx fixtures.Fixture, file string) (string, error) {
	t.Helper()
	exe := filepath.Join(filepath.Dir(filepath.Dir(file)), "bin", "main")
	return fx.Run(t, exe)
}

func runTool(path string, args []string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return stdout.String(), stderr.String(), code
}

func diffResults(want, got pfResult) string {
	var b strings.Builder
	if want.Code != got.Code {
		fmt.Fprintf(&b, "exit code: patchelf %d, ours %d\n", want.Code, got.Code)
	}
	if want.Stdout != got.Stdout {
		fmt.Fprintf(&b, "stdout:\n  patchelf %q\n  ours     %q\n", want.Stdout, got.Stdout)
	}
	if want.Stderr != got.Stderr {
		fmt.Fprintf(&b, "stderr:\n  patchelf %q\n  ours     %q\n", want.Stderr, got.Stderr)
	}
	for k, w := range want.State {
		if g := got.State[k]; fmt.Sprintf("%+v", w) != fmt.Sprintf("%+v", g) {
			fmt.Fprintf(&b, "%s:\n  patchelf %+v\n  ours     %+v\n", k, w, g)
		}
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPatchelfDeliberateDifferences pins the places where we differ from
// patchelf on purpose (see the list in docs/patchelf-suite.md).
func TestPatchelfDeliberateDifferences(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie")
	tests := []struct {
		name       string
		args       []string // FILE is bin/main
		want       func(elfState) string
		wantOut    string
		wantStderr string
	}{
		{"empty set-rpath removes the path", []string{"--set-rpath", "", "FILE"},
			func(s elfState) string { return fmt.Sprint(s.RunPath, s.RPath) }, "[] []", ""},
		// Written as given, as patchelf writes it (its
		// build-resolution-cache-search-hint.sh needs the empty entry),
		// with a warning patchelf does not print.
		{"empty entries are written, with a warning", []string{"--set-rpath", ":/a::/b:", "FILE"},
			func(s elfState) string { return fmt.Sprint(s.RunPath) }, "[:/a::/b:]",
			"patchelf: warning: search path ':/a::/b:' has an empty entry, which the loader reads as the current directory\n"},
		{"remove-rpath", []string{"--remove-rpath", "FILE"},
			func(s elfState) string { return fmt.Sprint(s.RunPath) }, "[]", ""},
		{"shrink to nothing removes the path", []string{"--shrink-rpath", "FILE"},
			func(s elfState) string { return fmt.Sprint(s.RunPath, s.RPath) }, "[] []", ""},
		{"add-needed does not duplicate", []string{"--add-needed", "libfoo.so", "--add-needed", "libbar.so", "FILE"},
			func(s elfState) string { return fmt.Sprint(s.Needed) }, "[libbar.so libfoo.so libc.so.6]", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fx.Copy(t)
			args := slices.Clone(tt.args)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "FILE", c.Exe)
			}
			var stdout, stderr bytes.Buffer
			if code := patchelfMain(args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if got := tt.want(readState(t, c.Exe)); got != tt.wantOut {
				t.Errorf("got %s, want %s", got, tt.wantOut)
			}
			if stderr.String() != tt.wantStderr {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.wantStderr)
			}
		})
	}
	t.Run("shrink-rpath skips a non-ELF file named like a needed library", func(t *testing.T) {
		c := fx.Copy(t)
		decoy := filepath.Join(c.Dir, "decoy")
		must(t, os.Mkdir(decoy, 0o755))
		must(t, os.WriteFile(filepath.Join(decoy, "libfoo.so"), []byte("INPUT ( libfoo.so.1 ) /* a linker script */\n"), 0o644))
		var stdout, stderr bytes.Buffer
		if code := patchelfMain([]string{"--set-rpath", decoy + ":" + c.LibDir, c.Exe}, &stdout, &stderr); code != 0 {
			t.Fatal(stderr.String())
		}
		if code := patchelfMain([]string{"--shrink-rpath", c.Exe}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s (patchelf stops with \"missing ELF header\")", code, stderr.String())
		}
		if s := readState(t, c.Exe); fmt.Sprint(s.RunPath) != "["+c.LibDir+"]" {
			t.Errorf("RUNPATH %q, want %q", s.RunPath, c.LibDir)
		}
	})
	t.Run("debug prints the layout", func(t *testing.T) {
		c := fx.Copy(t)
		var stdout, stderr bytes.Buffer
		if code := patchelfMain([]string{"--debug", "--page-size", "65536", "--set-rpath", c.LibDir + strings.Repeat(":/long/path", 40), c.Exe}, &stdout, &stderr); code != 0 {
			t.Fatal(stderr.String())
		}
		for _, want := range []string{"patching ELF file '" + c.Exe + "'\n", "new rpath is '", "writing " + c.Exe + "\n",
			"cudapatch: --page-size 65536 ignored", "cudapatch: layout ", "cudapatch:   commit "} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("--debug output lacks %q:\n%s", want, stderr.String())
			}
		}
	})
	t.Run("hard links are kept apart", func(t *testing.T) {
		c := fx.Copy(t)
		link := filepath.Join(c.Dir, "bin", "main-link")
		must(t, os.Link(c.Exe, link))
		var stdout, stderr bytes.Buffer
		if code := patchelfMain([]string{"--set-rpath", c.LibDir, c.Exe}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if s := readState(t, link); fmt.Sprint(s.RunPath) != "["+fixtures.OldRunpath+"]" {
			t.Errorf("the other link changed too: %v", s.RunPath)
		}
	})
	t.Run("errors leave the file unchanged", func(t *testing.T) {
		c := fixtures.ByName(t, "static").Copy(t)
		before, err := os.ReadFile(c.Exe)
		must(t, err)
		var stdout, stderr bytes.Buffer
		code := patchelfMain([]string{"--set-rpath", "/x", "--set-interpreter", "/lib/ld.so", c.Exe}, &stdout, &stderr)
		want := "patchelf: cannot find section '.interp'. The input file is most likely statically linked\n"
		if code != 1 || stderr.String() != want {
			t.Errorf("exit %d, stderr %q; want 1, %q", code, stderr.String(), want)
		}
		after, err := os.ReadFile(c.Exe)
		must(t, err)
		if !bytes.Equal(before, after) {
			t.Error("file changed")
		}
	})
}

// TestPatchelfHelp golden-tests --help, which is ours: it says what the
// options do here.
func TestPatchelfHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := patchelfMain([]string{"--help"}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}
	golden := filepath.Join("testdata", "patchelf", "help.golden")
	if *update {
		must(t, os.MkdirAll(filepath.Dir(golden), 0o755))
		must(t, os.WriteFile(golden, stderr.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	must(t, err)
	if stderr.String() != string(want) {
		t.Errorf("--help differs from %s (go test -run TestPatchelfHelp -update):\n%s", golden, stderr.String())
	}
	stdout.Reset()
	if code := patchelfMain([]string{"FILE", "--version"}, &stdout, &stderr); code != 0 || stdout.String() != "patchelf "+patchelf.Version+"\n" {
		t.Errorf("--version: exit %d, %q", code, stdout.String())
	}
	stderr.Reset()
	if code := patchelfMain(nil, &stdout, &stderr); code != 1 || stderr.String() != string(want) {
		t.Errorf("no arguments: exit %d, want 1 and the usage", code)
	}
}

// TestPatchelfScripts runs the shell scripts in testdata/patchelf, which
// call patchelf the way build tools do, once with /usr/bin/patchelf and
// once with cudapatch installed as "patchelf", and compares their output.
// Each script gets the fixture copy in $FIXTURE and prints what it checks.
func TestPatchelfScripts(t *testing.T) {
	real := realPatchelf(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "cudapatch"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ours := filepath.Join(bin, "ours")
	theirs := filepath.Join(bin, "theirs")
	must(t, os.Mkdir(ours, 0o755))
	must(t, os.Mkdir(theirs, 0o755))
	must(t, os.Symlink(filepath.Join(bin, "cudapatch"), filepath.Join(ours, "patchelf")))
	must(t, os.Symlink(real, filepath.Join(theirs, "patchelf")))

	scripts, err := filepath.Glob(filepath.Join("testdata", "patchelf", "*.sh"))
	must(t, err)
	if len(scripts) == 0 {
		t.Fatal("no scripts")
	}
	fx := fixtures.ByName(t, "bfd-pie")
	for _, script := range scripts {
		t.Run(filepath.Base(script), func(t *testing.T) {
			abs, err := filepath.Abs(script)
			must(t, err)
			run := func(dir string) (string, int) {
				c := fx.Copy(t)
				cmd := exec.Command("bash", "-eu", abs)
				cmd.Dir = c.Dir
				cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "FIXTURE="+c.Dir, "WANT="+c.Want)
				out, err := cmd.CombinedOutput()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return strings.ReplaceAll(string(out), c.Dir, "$FIXTURE"), code
			}
			wantOut, wantCode := run(theirs)
			gotOut, gotCode := run(ours)
			if gotOut != wantOut || gotCode != wantCode {
				t.Errorf("with /usr/bin/patchelf (exit %d):\n%s\nwith cudapatch (exit %d):\n%s", wantCode, wantOut, gotCode, gotOut)
			}
			if gotCode != 0 {
				t.Errorf("script failed (exit %d):\n%s", gotCode, gotOut)
			}
		})
	}
}
