package patch_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

const srcBarMain = `#include <stdio.h>
int bar(void);
int main(void) { printf("bar=%d\n", bar()); return 0; }
`

// runIn runs a program from directory dir, with LD_LIBRARY_PATH and
// LD_PRELOAD removed.
func runIn(t *testing.T, dir, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// TestUnnameableLibraryDirs: a library directory whose name the loader
// would read otherwise than as that directory (a ':' splits the entry, a
// $ORIGIN, $LIB or $PLATFORM token is expanded) is refused, naming it:
// nothing is written, and the program does not load a libbar.so planted
// in the working directory (which "x:." once put in the RUNPATH as ".").
// A '$' that is no token is written as it is, and the program runs; so is
// a relative entry whose ':' lies in the part $ORIGIN stands for.
func TestUnnameableLibraryDirs(t *testing.T) {
	bar := cfix.Build(t, cfix.Spec{Soname: "libbar.so", Source: "int bar(void) { return 2; }\n"})
	evil := cfix.Build(t, cfix.Spec{Soname: "libbar.so", Source: "int bar(void) { return 666; }\n"})
	cwd := t.TempDir()
	cfix.Copy(t, evil, filepath.Join(cwd, "libbar.so"))
	cases := []struct {
		dir      string // of libbar.so, below the output
		relative bool   // Policy.RelativizeRoot
		why      string // the refusal's reason, "" when it is patched
	}{
		{dir: "x:.", why: "the loader splits entries at ':'"},
		{dir: "x:/elsewhere", why: "the loader splits entries at ':'"},
		{dir: "lib/a:b", relative: true, why: "the loader splits entries at ':'"},
		{dir: "$LIB", why: `the loader expands "$LIB" in it`},
		{dir: "${LIB}", why: `the loader expands "${LIB}" in it`},
		{dir: "$ORIGIN", why: `the loader expands "$ORIGIN" in it`},
		{dir: "x/${ORIGIN}", relative: true, why: `the loader expands "${ORIGIN}" in it`},
		{dir: "$PLATFORM", why: `the loader expands "$PLATFORM" in it`},
		{dir: "lib-$LIB.d", why: `the loader expands "$LIB" in it`},
		{dir: "$LIBx"},
		{dir: "$LIB_x"},
		{dir: "${LIB"},
		{dir: "$FOO"},
		{dir: "a$"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.dir, "/", "_"), func(t *testing.T) {
			tr := newTree(t)
			libDir := "out/" + c.dir
			cfix.Copy(t, bar, tr.p(libDir+"/libbar.so"))
			tr.place("out/bin/main", cfix.Spec{Exe: true, Libc: true, Source: srcBarMain, Link: []string{bar}})
			opts := patch.Config{
				Policy: policy.Config{
					Interpreter:    hostLoader,
					DriverLinkFor:  policy.DriverLinkNone,
					RelativizeRoot: c.relative,
				},
				Libc: hostLibcDir,
			}
			snap := tr.snapshot()
			rep, err := tr.patch([]string{"out"}, opts)
			if c.why == "" {
				if err != nil {
					t.Fatalf("Patch: %v", err)
				}
				want := tr.p(libDir)
				if got := tr.runpathOf("out/bin/main"); got != want {
					t.Errorf("RUNPATH %q, want %q", got, want)
				}
				if out, err := runIn(t, cwd, tr.p("out/bin/main")); err != nil || out != "bar=2" {
					t.Errorf("run: %v %q, want bar=2", err, out)
				}
				return
			}
			if err == nil || rep.Written {
				t.Fatalf("Patch: err %v, written %v: want the file refused, nothing written", err, rep.Written)
			}
			f := tr.file(rep, "out/bin/main")
			want := "libbar.so is in " + tr.p(libDir) + ", which no RUNPATH entry can name: " + c.why
			if len(f.Errors) != 1 || f.Errors[0].Kind != patch.ErrorAudit || !strings.HasSuffix(f.Errors[0].Error(), want) {
				t.Fatalf("errors %v, want one audit error ending %q", f.Errors, want)
			}
			tr.unchangedSince(snap)
			if out, _ := runIn(t, cwd, tr.p("out/bin/main")); strings.Contains(out, "bar=") {
				t.Errorf("run from a directory holding another libbar.so: %q", out)
			}
		})
	}
}

// TestUnnameableSharedPart: with Policy.RelativizeRoot, a ':' or a token in
// the part of the path the file's directory shares with the library's is
// what $ORIGIN stands for: the entry written is safe, and the program
// runs.
func TestUnnameableSharedPart(t *testing.T) {
	bar := cfix.Build(t, cfix.Spec{Soname: "libbar.so", Source: "int bar(void) { return 2; }\n"})
	for _, top := range []string{"pkg:1", "$LIB"} {
		tr := newTree(t)
		cfix.Copy(t, bar, tr.p(top+"/lib/libbar.so"))
		tr.place(top+"/bin/main", cfix.Spec{Exe: true, Libc: true, Source: srcBarMain, Link: []string{bar}})
		tr.mustPatch([]string{top}, patch.Config{
			Policy: policy.Config{
				Interpreter:    hostLoader,
				DriverLinkFor:  policy.DriverLinkNone,
				RelativizeRoot: true,
			},
			Libc: hostLibcDir,
		})
		if got := tr.runpathOf(top + "/bin/main"); got != "$ORIGIN/../lib" {
			t.Errorf("%s: RUNPATH %q, want $ORIGIN/../lib", top, got)
		}
		if out, err := runIn(t, t.TempDir(), tr.p(top+"/bin/main")); err != nil || out != "bar=2" {
			t.Errorf("%s: run: %v %q, want bar=2", top, err, out)
		}
	}
}
