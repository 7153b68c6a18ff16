package patch_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// A library linked against in one form and shipped in another: what a
// prebuilt binary meets when its inputs are older than what it was built
// with.
var (
	verBuild = cfix.Spec{Soname: "libver.so.1", Source: "int f1(void) { return 1; } int f2(void) { return 2; }",
		VersionScript: "V1 { global: f1; local: *; }; V2 { global: f2; } V1;"}
	verRun = cfix.Spec{Soname: "libver.so.1", Source: "int f1(void) { return 1; } int f2(void) { return 2; }",
		VersionScript: "V1 { global: f1; f2; local: *; };"}
	fnBuild  = cfix.Spec{Soname: "libfn.so.1", Source: "int present(void) { return 1; } int gone(void) { return 2; }"}
	fnRun    = cfix.Spec{Soname: "libfn.so.1", Source: "int present(void) { return 1; }"}
	datBuild = cfix.Spec{Soname: "libdat.so.1", Source: "int gdata = 5; int dpresent(void) { return 1; }"}
	datRun   = cfix.Spec{Soname: "libdat.so.1", Source: "int dpresent(void) { return 1; }"}
)

// symbolTree is out/bin/prog (linked against the build form of lib, run
// with the run form in deps/lib) and out/lib/libext.so, a library whose
// PyExt symbol its closure does not define (left to the program that
// loads it, as a Python extension's).
func symbolTree(t *testing.T, build, run cfix.Spec, main string) (root, prog string) {
	t.Helper()
	root = t.TempDir()
	prog = filepath.Join(root, "out/bin/prog")
	cfix.Place(t, cfix.Spec{Exe: true, Libc: true, Source: main, Link: []string{cfix.Build(t, build)}}, prog)
	cfix.Place(t, run, filepath.Join(root, "deps/lib", run.Soname))
	cfix.Place(t, cfix.Spec{Soname: "libext.so", Source: "extern int PyExt; int ext(void) { return PyExt; }"}, filepath.Join(root, "out/lib/libext.so"))
	return root, prog
}

func symbolConfig(root string) patch.Config {
	return patch.Config{
		Symbols: patch.SymbolsError,
		Search:  []string{filepath.Join(root, "deps/lib")},
		Policy:  policy.Config{Interpreter: hostLoader, DriverLinkFor: policy.DriverLinkNone},
		Libc:    hostLibcDir,
	}
}

// findings lists a report's symbol findings as "base(file) class
// name severity[ pattern]".
func findings(rep *patch.Report) []string {
	var out []string
	for _, f := range rep.Files {
		for _, s := range f.Symbols {
			l := filepath.Base(s.File) + " " + s.Class + " " + s.Name() + " " + s.Severity
			if s.Pattern != "" {
				l += " " + s.Pattern
			}
			out = append(out, l)
		}
	}
	return out
}

const (
	mainVer = `#include <stdio.h>
int f1(void); int f2(void);
int main(int c, char **v) { if (c > 1) return f2(); printf("%d\n", f1()); return 0; }`
	mainFn = `#include <stdio.h>
int present(void); int gone(void);
int main(int c, char **v) { if (c > 1) return gone(); printf("%d\n", present()); return 0; }`
	mainDat = `#include <stdio.h>
extern int gdata; int dpresent(void);
int main(int c, char **v) { printf("%d %d\n", dpresent(), gdata); return 0; }`
)

// TestSymbolCheck: the main job binds each output's closure as decided.
// A finding that fails at load stops the job before anything is written
// (as a missing library does) unless a pattern ignores it or the mode is
// warn; a function bound lazily is a warning; a library's symbols its
// closure lacks are left to the program. Each verdict is checked against
// the loader by running the patched program.
func TestSymbolCheck(t *testing.T) {
	ext := "libext.so left-to-program PyExt info"
	for _, c := range []struct {
		name       string
		build, run cfix.Spec
		main       string
		mode       patch.SymbolsMode // "": symbolConfig's
		ignore     []string
		wantErr    bool
		want       []string
		// runs: the written program starts and prints this; "" with
		// loadErr: it fails at load with loadErr.
		runs, loadErr string
	}{
		{name: "missing-version", build: verBuild, run: verRun, main: mainVer, wantErr: true,
			want: []string{"prog fails-at-load @V2 error", "prog fails-when-called f2@V2 warning", ext}},
		{name: "missing-version-ignored", build: verBuild, run: verRun, main: mainVer,
			ignore:  []string{"*@V2"},
			want:    []string{"prog fails-at-load @V2 ignored *@V2", "prog fails-when-called f2@V2 ignored *@V2", ext},
			loadErr: "version `V2' not found"},
		{name: "missing-version-ignored-by-file", build: verBuild, run: verRun, main: mainVer,
			ignore:  []string{"prog"},
			want:    []string{"prog fails-at-load @V2 ignored prog", "prog fails-when-called f2@V2 ignored prog", ext},
			loadErr: "version `V2' not found"},
		{name: "missing-version-warn", build: verBuild, run: verRun, main: mainVer,
			mode:    patch.SymbolsWarn,
			want:    []string{"prog fails-at-load @V2 warning", "prog fails-when-called f2@V2 warning", ext},
			loadErr: "version `V2' not found"},
		{name: "missing-version-off", build: verBuild, run: verRun, main: mainVer,
			mode: patch.SymbolsOff, loadErr: "version `V2' not found"},
		{name: "missing-function-lazy", build: fnBuild, run: fnRun, main: mainFn,
			want: []string{"prog fails-when-called gone warning", ext}, runs: "1\n"},
		{name: "missing-data", build: datBuild, run: datRun, main: mainDat, wantErr: true,
			want: []string{"prog fails-at-load gdata error", ext}},
		{name: "bound", build: fnBuild, run: fnBuild, main: mainFn, want: []string{ext}, runs: "1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, prog := symbolTree(t, c.build, c.run, c.main)
			before, err := os.ReadFile(prog)
			require.NoError(t, err)
			opts := symbolConfig(root)
			opts.IgnoreSymbols = c.ignore
			if c.mode != "" {
				opts.Symbols = c.mode
			}

			// A dry run finds the same: the closure as decided.
			cfg := opts
			cfg.Write.DryRun = true
			dry, err := patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
			require.Equal(t, c.wantErr, err != nil, "%v", err)
			require.ElementsMatch(t, c.want, findings(dry))
			for _, f := range dry.Files {
				for _, s := range f.Symbols {
					if s.Version != "" {
						require.Equal(t, c.run.Soname, s.Library, "%+v: the library its version need names", s)
					}
				}
			}

			rep, err := patch.Run(context.Background(), &opts, []string{filepath.Join(root, "out")})
			require.ElementsMatch(t, c.want, findings(rep))
			if c.wantErr {
				require.ErrorIs(t, err, patch.ErrSymbols)
				require.False(t, rep.WritePhase)
				require.Positive(t, rep.SymbolErrors)
				after, rerr := os.ReadFile(prog)
				require.NoError(t, rerr)
				require.Equal(t, before, after, "nothing is written")
				return
			}
			require.NoError(t, err)
			require.True(t, rep.Written)

			// Patched again, the files as written give the same findings:
			// the check of a decision is the check of its result.
			again, err := patch.Run(context.Background(), &opts, []string{filepath.Join(root, "out")})
			require.NoError(t, err)
			require.Zero(t, again.Changed)
			require.ElementsMatch(t, c.want, findings(again))

			out, err := exec.Command(prog).CombinedOutput()
			if c.loadErr != "" {
				require.Error(t, err, "%s", out)
				require.Contains(t, string(out), c.loadErr)
				return
			}
			require.NoError(t, err, "%s", out)
			require.Equal(t, c.runs, string(out))
			if strings.Contains(c.name, "lazy") {
				out, err = exec.Command(prog, "call").CombinedOutput()
				require.Error(t, err)
				require.Contains(t, string(out), "symbol lookup error")
			}
		})
	}
}

// TestSymbolCheckDriverStub: a driver library is checked against the
// toolkit's stub when a stub directory is searched, and otherwise skipped,
// said once for the file.
func TestSymbolCheckDriverStub(t *testing.T) {
	root := t.TempDir()
	stubBuild := cfix.Spec{Soname: "libcuda.so.1", Source: "int cuInit(int f) { return 0; } int cuGone(void) { return 0; }"}
	stubRun := cfix.Spec{Soname: "libcuda.so.1", Source: "int cuInit(int f) { return 0; }"}
	main := `int cuInit(int); int cuGone(void); int main(int c, char **v) { if (c > 1) return cuGone(); return cuInit(0); }`
	prog := filepath.Join(root, "out/bin/prog")
	cfix.Place(t, cfix.Spec{Exe: true, Libc: true, Source: main, Link: []string{cfix.Build(t, stubBuild)}}, prog)
	stubs := filepath.Join(root, "cuda_cudart-stubs/lib/stubs")
	cfix.Place(t, stubRun, filepath.Join(stubs, "libcuda.so"))
	base := patch.Config{Symbols: patch.SymbolsError, Policy: policy.Config{Interpreter: hostLoader}, Libc: hostLibcDir, Write: patch.WriteOptions{DryRun: true}}

	rep, err := patch.Run(context.Background(), &base, []string{filepath.Join(root, "out")})
	require.NoError(t, err)
	require.Equal(t, []string{"prog skipped-driver  info"}, findings(rep))
	require.Equal(t, "libcuda.so.1", rep.Files[0].Symbols[0].Library)

	cfg := base
	cfg.Search = append(cfg.Search, stubs)
	rep, err = patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
	require.NoError(t, err)
	require.Equal(t, []string{"prog fails-when-called cuGone warning"}, findings(rep))

	cfg = base
	cfg.SearchRecursive = append(cfg.SearchRecursive, filepath.Join(root, "cuda_cudart-stubs"))
	rep, err = patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
	require.NoError(t, err)
	require.Equal(t, []string{"prog fails-when-called cuGone warning"}, findings(rep))
}

func TestSymbolOptionsRefused(t *testing.T) {
	_, err := patch.Run(context.Background(), &patch.Config{Symbols: "loud"}, []string{t.TempDir()})
	require.ErrorContains(t, err, `symbols mode "loud": want off, warn or error`)
	_, err = patch.Run(context.Background(), &patch.Config{IgnoreSymbols: []string{""}}, []string{t.TempDir()})
	require.ErrorContains(t, err, "empty ignore-symbol pattern")
}

// TestSymbolSummaryMadeOnce: a library outside the outputs that several
// closures share is summarized for the names known when it is read; each
// closure that brings a library with new names (libq's g2, libr's g3)
// would have it summarized again, opening it each time. Every closure is
// resolved before any is bound, so it is opened again at most once. The
// outputs are not opened by the check at all. libs.so has no .gnu.hash, so no Bloom filter spares it a lookup, and it
// comes first in every scope.
func TestSymbolSummaryMadeOnce(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "deps/lib")
	libs := fixtures.Compile(t, fixtures.C{Source: "int s0(void) { return 0; }\n",
		Args: []string{"-shared", "-fPIC", "-Wl,--hash-style=sysv", "-Wl,-soname,libs.so"}})
	fixtures.CopyFile(t, libs, filepath.Join(lib, "libs.so"))
	libp := cfix.Spec{Soname: "libp.so", Source: "int p0(void) { return 0; } int g2(void) { return 2; } int g3(void) { return 3; }"}
	libq := cfix.Spec{Soname: "libq.so", Source: "int g2(void); int q(void) { return g2(); }", Link: []string{cfix.Build(t, libp)}}
	libr := cfix.Spec{Soname: "libr.so", Source: "int g3(void); int r(void) { return g3(); }", Link: []string{cfix.Build(t, libp)}}
	for _, s := range []cfix.Spec{libp, libq, libr} {
		cfix.Place(t, s, filepath.Join(lib, s.Soname))
	}
	for name, c := range map[string]struct {
		call string
		lib  cfix.Spec
	}{"a": {"p0", libp}, "b": {"q", libq}, "c": {"r", libr}} {
		src := "int s0(void); int " + c.call + "(void); int main(void) { return s0() + " + c.call + "(); }"
		cfix.Place(t, cfix.Spec{Exe: true, Libc: true, Source: src, Link: []string{libs, cfix.Build(t, c.lib)}}, filepath.Join(root, "out/bin", name))
	}
	cfg := symbolConfig(root)
	cfg.Jobs = 1 // a, b, c in turn: b and c bring new names
	opens := map[string]int{}
	patch.CountTableOpens(&cfg, opens)
	rep, err := patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
	require.NoError(t, err)
	require.Empty(t, findings(rep))
	require.LessOrEqual(t, opens[filepath.Join(lib, "libs.so")], 1, "libs.so opened again: %v", opens)
	for _, name := range []string{"a", "b", "c"} {
		// Read in the open that decides it (symcheck.Checker.ReadFile);
		// they define nothing the libraries look up.
		require.Zero(t, opens[filepath.Join(root, "out/bin", name)], "output %s opened again by the check: %v", name, opens)
	}
}
