package lint_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestSkipsWhatTheMainJobSkips is the onnxruntime-node case: a tree with
// an x86_64 variant beside an aarch64 one (and a static program), patched
// by the main job with this machine's interpreter and libc. The patched
// x86_64 program runs; lint, given the same interpreter, checks the x86_64
// files, finds nothing, and skips the others with the main job's own
// reason. Without the interpreter it checks the aarch64 files too and
// fails them, as it did before.
func TestSkipsWhatTheMainJobSkips(t *testing.T) {
	host, err := ldso.FindHost("")
	require.NoError(t, err)
	tree := t.TempDir()
	x86 := fixtures.ByName(t, "bfd-pie").CopyTo(t, filepath.Join(tree, "bfd-pie"))
	fixtures.ByName(t, "aarch64-bfd-pie").CopyTo(t, filepath.Join(tree, "aarch64-bfd-pie"))
	fixtures.ByName(t, "static").CopyTo(t, filepath.Join(tree, "static"))

	ctx := context.Background()
	rep, err := patch.Run(ctx, &patch.Config{
		Policy: policy.Config{Interpreter: host.Interpreter, RelativizeRoot: true},
		Libc:   host.LibcDir,
	}, []string{tree})
	require.NoError(t, err)
	out, err := x86.Run(t, x86.Exe)
	require.NoError(t, err)
	assert.Equal(t, x86.Want+"\n", out)

	mainSkipped := map[string]string{}
	for _, f := range rep.Files {
		if f.Skipped != "" && f.Skipped != policy.SkippedNotELF {
			mainSkipped[f.Path] = f.Skipped
		}
	}
	require.Len(t, mainSkipped, 5, "4 aarch64 files and the static program")

	lr, err := lint.Lint(ctx, &lint.Options{Policy: policy.Config{Interpreter: host.Interpreter}}, []string{tree})
	require.NoError(t, err)
	assert.Empty(t, lr.Findings)
	assert.Len(t, lr.Files, 4, "the x86_64 variant's main, loadlib, libfoo, libbar")
	lintSkipped := map[string]string{}
	for _, s := range lr.Skipped {
		lintSkipped[s.Path] = s.Reason
	}
	assert.Equal(t, mainSkipped, lintSkipped)
	assert.Contains(t, lintSkipped[filepath.Join(tree, "aarch64-bfd-pie", "lib", "libfoo.so")], "EM_AARCH64, not the interpreter's architecture")
	assert.Equal(t, "static", lintSkipped[filepath.Join(tree, "static", "bin", "main")])

	// The same through Options.Target, as the CLI passes this machine's.
	lr2, err := lint.Lint(ctx, &lint.Options{Target: &policy.Target{Class: host.Class, Machine: host.Machine, OSABI: host.OSABI}}, []string{tree})
	require.NoError(t, err)
	assert.Equal(t, lr, lr2)

	// No interpreter: only kinds are skipped, and the aarch64 files fail
	// (their libc is nowhere on this machine).
	lr, err = lint.Lint(ctx, nil, []string{tree})
	require.NoError(t, err)
	assert.Len(t, lr.Skipped, 1)
	assert.Contains(t, rulesByFile(lr)[filepath.Join(tree, "aarch64-bfd-pie", "bin", "main")], lint.UnresolvableNeeded)

	_, err = lint.Lint(ctx, &lint.Options{Policy: policy.Config{Interpreter: filepath.Join(tree, "nonexistent")}}, []string{tree})
	assert.ErrorContains(t, err, "interpreter "+filepath.Join(tree, "nonexistent"))
}

// keptTree places, under a fresh directory, an executable and a library
// with the old RUNPATH $ORIGIN/../libexec (no such directory), needing
// libdep.so (in deps/) and libmissing.so (nowhere), and returns the
// directory and its out/.
func keptTree(t *testing.T) (string, string) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfix.Place(t, cfix.Spec{Exe: true, Needed: []string{"libdep.so", "libmissing.so"}, RunPath: "$ORIGIN/../libexec"}, filepath.Join(out, "bin", "app"))
	cfix.Place(t, cfix.Spec{Soname: "libl.so", Needed: []string{"libdep.so"}, RunPath: "$ORIGIN/../libexec"}, filepath.Join(out, "lib", "libl.so"))
	cfix.Place(t, cfix.Spec{Soname: "libdep.so"}, filepath.Join(dir, "deps", "libdep.so"))
	return dir, out
}

// underTmp is the configuration of lint runs on trees under the temporary
// directory, a build directory for lint: CP005 and CP017 would report
// every entry and note element naming deps/.
func underTmp() lint.Options {
	return lint.Options{Rules: &lint.Config{Disable: []string{lint.BuildDirLeak, lint.NoteOutsideStore}}}
}

// TestKeptEntries: what the main job was asked to keep, it writes, and
// lint given the same knobs does not report it; without them, lint
// reports CP011 missing-dir (and CP009 for the ignored libmissing.so).
func TestKeptEntries(t *testing.T) {
	const dep = "/nix/store/00000000000000000000000000000000-dep/lib"
	for _, tc := range []struct {
		name  string
		patch func(out string) policy.Config
		lint  func(out string) policy.Config
		// missingDir says lint reports CP011 without the knobs.
		missingDir bool
	}{{
		name:       "preserve-origin",
		patch:      func(string) policy.Config { return policy.Config{PreserveOrigin: true} },
		lint:       func(string) policy.Config { return policy.Config{PreserveOrigin: true} },
		missingDir: true,
	}, {
		name: "append-rpath",
		patch: func(string) policy.Config {
			return policy.Config{AppendRunpaths: []string{"/opt/vendor/lib", "$ORIGIN/../plugins"}}
		},
		lint: func(string) policy.Config {
			return policy.Config{AppendRunpaths: []string{"/opt/vendor/lib", "$ORIGIN/../plugins"}}
		},
		missingDir: true,
	}, {
		// Appended under the tree, and written relative to each file.
		name: "append-rpath-relativized",
		patch: func(out string) policy.Config {
			return policy.Config{AppendRunpaths: []string{out + "/lib/plugins"}, RelativizeRoot: true}
		},
		lint:       func(out string) policy.Config { return policy.Config{AppendRunpaths: []string{out + "/lib/plugins"}} },
		missingDir: true,
	}, {
		// nixpkgs adds DEP/lib whether it exists or not (executables only).
		name:       "runtime-dependency",
		patch:      func(string) policy.Config { return policy.Config{RuntimeDeps: []string{dep}} },
		lint:       func(string) policy.Config { return policy.Config{RuntimeDeps: []string{dep}} },
		missingDir: true,
	}, {
		name:  "nothing kept",
		patch: func(string) policy.Config { return policy.Config{} },
		lint:  func(string) policy.Config { return policy.Config{} },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, out := keptTree(t)
			opts := patch.Config{Search: []string{filepath.Join(dir, "deps")}, Policy: tc.patch(out)}
			opts.Policy.IgnoreMissing = []string{"libmissing.so"}
			_, err := patch.Run(context.Background(), &opts, []string{out})
			require.NoError(t, err)

			with := underTmp()
			with.Policy = tc.lint(out)
			with.Policy.IgnoreMissing = []string{"libmissing.so"}
			rep, err := lint.Lint(context.Background(), &with, []string{out})
			require.NoError(t, err)
			assert.Empty(t, rep.Findings, "with the main job's knobs")

			without := underTmp()
			rep, err = lint.Lint(context.Background(), &without, []string{out})
			require.NoError(t, err)
			got := map[string]bool{}
			for _, f := range rep.Findings {
				got[f.Rule] = true
			}
			want := map[string]bool{lint.UnresolvableNeeded: true}
			if tc.missingDir {
				want[lint.MissingDir] = true
			}
			assert.Equal(t, want, got, "without the knobs: %v", rep.Findings)
		})
	}
}

// TestIgnoreMissingAgrees: lint --ignore-missing has the main job's Python
// fnmatch semantics (rpath/fnmatch, on the basename): for each pattern,
// lint reports libmissing.so exactly when the main job stops on it.
func TestIgnoreMissingAgrees(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		ignored bool
	}{
		{"libmissing.so", true},
		{"libmiss*", true},
		{"*", true},
		{"libmis[!a]ing.so", true},
		{"libmis[a]ing.so", false},
		{"libmissing.so?", false},
		{"LIBMISSING.SO", false}, // case-sensitive on POSIX
		{"lib/libmissing.so", false},
		{"libdep.so", false},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			dir, out := keptTree(t)
			_, err := patch.Run(context.Background(), &patch.Config{
				Search: []string{filepath.Join(dir, "deps")},
				Policy: policy.Config{IgnoreMissing: []string{tc.pattern}},
				Write:  patch.WriteOptions{DryRun: true},
			}, []string{out})
			assert.Equal(t, !tc.ignored, errors.Is(err, patch.ErrUnsatisfied), "main job: %v", err)
			_, err = patch.Run(context.Background(), &patch.Config{
				Search: []string{filepath.Join(dir, "deps")},
				Policy: policy.Config{IgnoreMissing: []string{"*"}},
			}, []string{out})
			require.NoError(t, err)

			opts := underTmp()
			opts.Policy.IgnoreMissing = []string{tc.pattern}
			rep, err := lint.Lint(context.Background(), &opts, []string{out})
			require.NoError(t, err)
			var missing []string
			for _, f := range rep.Findings {
				assert.Equal(t, lint.UnresolvableNeeded, f.Rule)
				missing = append(missing, f.Entry)
			}
			if tc.ignored {
				assert.Empty(t, missing)
			} else {
				assert.Equal(t, []string{"libmissing.so"}, missing)
			}
		})
	}
	_, err := lint.Lint(context.Background(), &lint.Options{Policy: policy.Config{IgnoreMissing: []string{""}}}, []string{t.TempDir()})
	assert.ErrorContains(t, err, "empty ignore-missing pattern")
}
