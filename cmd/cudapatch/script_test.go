package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestScript runs the CLI scripts in testdata/script: each .txtar file is a
// testscript (github.com/rogpeppe/go-internal/testscript) whose commands
// run the binary as a user does, `exec cudapatch ...` and `exec patchelf
// ...` (this test binary, re-executed under that name by TestMain), and
// check the exit code, the output and the files. Besides testscript's own
// commands (exec, stdout, stderr, cmp, cmpenv, cp, exists, ...), a script
// has:
//
//	exits N PROGRAM [ARGS...]
//	    exec that wants the exit status N (exec wants 0, ! exec any but 0)
//	elf exe|lib FILE [soname=NAME] [needed=A,B] [runpath=P] [rpath=P]
//	    builds a small C fixture (rpath/testdata/cfix) at FILE
//	elf truncated FILE
//	    writes an ELF header whose program headers lie past the end
//	fixture NAME
//	    copies the shared fixture variant NAME (internal/fixtures; bin/main,
//	    lib/libfoo.so, lib/libbar.so) to $WORK/NAME and sets $WANT to the
//	    line its bin/main prints once it runs
//
// go test ./cmd/cudapatch -run TestScript -update rewrites the files that
// a failing cmp compares with.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		UpdateScripts:       *update,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			// Only scripts see the directory that holds "cudapatch" and
			// "patchelf" (TestMain).
			env.Setenv("PATH", scriptPATH)
			env.Values[tbKey{}] = env.T().(testing.TB)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   scriptExits,
			"elf":     scriptELF,
			"fixture": scriptFixture,
		},
	})
}

// tbKey holds the script's testing.TB in its values, for the commands
// that build fixtures.
type tbKey struct{}

func scriptTB(ts *testscript.TestScript) testing.TB {
	return ts.Value(tbKey{}).(testing.TB)
}

func scriptExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	var ee *exec.ExitError
	if err := ts.Exec(args[1], args[2:]...); errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("%v", err)
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

func scriptELF(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: elf exe|lib|truncated FILE [soname=NAME] [needed=A,B] [runpath=P] [rpath=P]")
	}
	dst := ts.MkAbs(args[1])
	ts.Check(os.MkdirAll(filepath.Dir(dst), 0o755))
	var s cfix.Spec
	switch args[0] {
	case "exe":
		s.Exe = true
	case "lib":
	case "truncated":
		if len(args) != 2 {
			ts.Fatalf("usage: elf truncated FILE")
		}
		truncatedELF(scriptTB(ts), dst)
		return
	default:
		ts.Fatalf("elf: want exe, lib or truncated, not %q", args[0])
	}
	for _, a := range args[2:] {
		k, v, ok := strings.Cut(a, "=")
		switch {
		case !ok:
			ts.Fatalf("elf: %q is not KEY=VALUE", a)
		case k == "soname":
			s.Soname = v
		case k == "needed":
			s.Needed = strings.Split(v, ",")
		case k == "runpath":
			s.RunPath = v
		case k == "rpath":
			s.RPath = v
		default:
			ts.Fatalf("elf: unknown key %q", k)
		}
	}
	cfix.Place(scriptTB(ts), s, dst)
}

func scriptFixture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fixture NAME")
	}
	f := fixtures.ByName(scriptTB(ts), args[0])
	ts.Check(os.CopyFS(ts.MkAbs(f.Name), os.DirFS(f.Dir)))
	ts.Setenv("WANT", f.Want)
}

// scriptPATH is $PATH with testscript's directory of commands first; the
// Go tests run with the PATH they were started with, so that one that
// runs "patchelf" from $PATH (the auto-patchelf references) gets the real
// one, not this binary.
var scriptPATH string

// scriptCommands are the names under which TestMain re-executes this test
// binary as the command: main itself, so a script runs what a user runs.
// As "patchelf" it is the drop-in (main looks at its name).
var scriptCommands = map[string]func(){
	"cudapatch": main,
	"patchelf":  main,
}

// hidePATH is the testing.M TestMain hands to testscript.Main: around the
// Go tests it keeps the PATH that testscript.Main extended for the
// scripts (scriptPATH) and restores the one the process had.
type hidePATH struct {
	m    *testing.M
	path string
}

func (h hidePATH) Run() int {
	scriptPATH = os.Getenv("PATH")
	if err := os.Setenv("PATH", h.path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return h.m.Run()
}

// TestScriptPATH: the directory of the scripts' commands is on the
// scripts' PATH only, not on the Go tests'.
func TestScriptPATH(t *testing.T) {
	dir := filepath.SplitList(scriptPATH)[0]
	for name := range scriptCommands {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("scripts' PATH: %v", err)
		}
	}
	if slices.Contains(filepath.SplitList(os.Getenv("PATH")), dir) {
		t.Errorf("PATH %q holds the scripts' commands (%s)", os.Getenv("PATH"), dir)
	}
}
