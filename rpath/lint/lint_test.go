package lint_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

func rulesByFile(rep *lint.Report) map[string][]string {
	out := map[string][]string{}
	for _, f := range rep.Findings {
		if !slices.Contains(out[f.Path], f.Rule) {
			out[f.Path] = append(out[f.Path], f.Rule)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// TestOneFaultPerRule lints the fixture tree with every rule on, for a
// driver of linttest.CompatVersion: each planted file draws exactly its
// rule, each clean file nothing, and every rule is exercised. A file
// without a resolution-cache note that could have one also draws CP020,
// which is off by default.
func TestOneFaultPerRule(t *testing.T) {
	tr := linttest.Build(t)
	rep, err := lint.Lint(context.Background(), &lint.Options{
		Root:          tr.Root,
		Enable:        []string{"all"},
		DriverVersion: linttest.CompatVersion,
	}, []string{tr.Store})
	require.NoError(t, err)
	got := rulesByFile(rep)
	covered := map[string]bool{}
	for _, c := range tr.Cases {
		want := []string(nil)
		if c.Rule != "" {
			want = []string{c.Rule}
			covered[c.Rule] = true
		}
		if c.NoNote && c.Rule != lint.NoteMissing {
			want = append(want, lint.NoteMissing)
			sort.Strings(want)
		}
		assert.Equal(t, want, got[c.Host], "%s (%s)", c.Name, c.Path)
		assert.Contains(t, rep.Files, c.Host)
	}
	for _, r := range lint.Rules() {
		assert.True(t, covered[r.ID], "no fixture for %s %s", r.ID, r.Name)
	}
	for _, f := range rep.Findings {
		assert.NotEmpty(t, f.Message)
		r, ok := lint.RuleByID(f.Rule)
		require.True(t, ok)
		assert.Equal(t, r.Name, f.Name)
		assert.Equal(t, r.Severity, f.Severity)
	}
}

// TestCleanTree lints only the clean files: no findings at all.
func TestCleanTree(t *testing.T) {
	tr := linttest.Build(t)
	var clean []string
	for _, c := range tr.Cases {
		if c.Rule == "" {
			clean = append(clean, c.Host)
		}
	}
	rep, err := lint.Lint(context.Background(), &lint.Options{
		Root:          tr.Root,
		Enable:        []string{"all"},
		DriverVersion: linttest.CompatVersion,
	}, clean)
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
	assert.Len(t, rep.Files, len(clean))
}

// TestDriverVersion: CP021 compares the cuda_compat libcuda a file would
// take with the driver it is to run with. The GPU machine's case: compat
// 580.95.05 under the driver 580.159.04 fails with error 803; under
// 580.95.05 or older it works. The version is what the library carries,
// else its file name's. Without a version the rule is off, and turning it
// on without one is an error.
func TestDriverVersion(t *testing.T) {
	tr := linttest.Build(t)
	ctx := context.Background()
	compat := caseHost(t, tr, "clean-compat")
	old := caseHost(t, tr, "compat-older-than-driver")
	for _, tc := range []struct {
		version   string
		compat    bool // clean-compat (580.95.05) draws CP021
		oldCompat bool // compat-older-than-driver (575.57.08) draws CP021
	}{
		{"580.159.04", true, true},
		{"580.95.05", false, true},
		{"575.57.08", false, false},
		{"570.86.10", false, false},
	} {
		rep, err := lint.Lint(ctx, &lint.Options{Root: tr.Root, DriverVersion: tc.version}, []string{compat, old})
		require.NoError(t, err)
		var got []string
		for _, f := range rep.Findings {
			if f.Rule == lint.CompatTooOld {
				got = append(got, f.Path)
				assert.Equal(t, lint.Error, f.Severity)
			}
		}
		var want []string
		if tc.compat {
			want = append(want, compat)
		}
		if tc.oldCompat {
			want = append(want, old)
		}
		assert.Equal(t, want, got, "driver %s", tc.version)
		if tc.compat {
			assert.Equal(t, "cuda_compat directory "+linttest.Compat+" holds libcuda 580.95.05, older than the driver 580.159.04 the file is to run with, and the loader takes it on every machine: CUDA fails with error 803 (unsupported display driver / cuda driver combination); build with a selector (cudapatch --cuda-compat DIR --cuda-compat-selector OUT), which takes the driver there", rep.Findings[0].Message)
		}
	}
	rep, err := lint.Lint(ctx, &lint.Options{Root: tr.Root, Enable: []string{"all"}}, []string{compat, old})
	require.NoError(t, err)
	assert.NotContains(t, rulesByFile(rep)[old], lint.CompatTooOld, "no version, nothing to compare")
	_, err = lint.Lint(ctx, &lint.Options{Root: tr.Root, Enable: []string{"compat-older-than-driver"}}, []string{compat})
	assert.ErrorContains(t, err, "CP021 compat-older-than-driver needs the target driver version")
	_, err = lint.Lint(ctx, &lint.Options{Root: tr.Root, DriverVersion: "580"}, []string{compat})
	assert.ErrorContains(t, err, `driver version "580": want an NVIDIA driver version like 580.159.04`)
	rep, err = lint.Lint(ctx, &lint.Options{Root: tr.Root, DriverVersion: "580.159.04", Disable: []string{"CP021"}}, []string{old})
	require.NoError(t, err)
	assert.Empty(t, rep.Findings, "disabled wins over the version's enabling")
}

func caseHost(t *testing.T, tr *linttest.Tree, name string) string {
	for _, c := range tr.Cases {
		if c.Name == name {
			return c.Host
		}
	}
	t.Fatalf("no case %s", name)
	return ""
}

func TestSelection(t *testing.T) {
	tr := linttest.Build(t)
	ctx := context.Background()
	run := func(opts lint.Options) map[string][]string {
		opts.Root = tr.Root
		rep, err := lint.Lint(ctx, &opts, []string{tr.Store})
		require.NoError(t, err)
		return rulesByFile(rep)
	}
	// CP013 is off by default.
	assert.Nil(t, run(lint.Options{})[caseHost(t, tr, "no-search-path")])
	assert.Equal(t, []string{"CP013"}, run(lint.Options{Enable: []string{"CP013"}})[caseHost(t, tr, "no-search-path")])
	// Disable by ID or by name.
	assert.Nil(t, run(lint.Options{Disable: []string{"CP007"}})[caseHost(t, tr, "duplicate-entry")])
	assert.Nil(t, run(lint.Options{Disable: []string{"build-dir-leak"}})[caseHost(t, tr, "build-dir-leak")])
	// Unknown rules are errors.
	_, err := lint.Lint(ctx, &lint.Options{Enable: []string{"CP999"}}, []string{tr.Store})
	assert.ErrorContains(t, err, "CP999")
}

func TestConfigFile(t *testing.T) {
	tr := linttest.Build(t)
	cfg := `{
  "disable": ["CP008"],
  "severity": {"duplicate-entry": "error"},
  "ignore": [{"rules": ["CP011"], "paths": ["**/missing-dir"]}, {"paths": ["*-build-dir-leak/**"]}]
}`
	require.NoError(t, os.WriteFile(filepath.Join(tr.Store, lint.ConfigFile), []byte(cfg), 0o644))
	rep, err := lint.Lint(context.Background(), &lint.Options{Root: tr.Root}, []string{tr.Store})
	require.NoError(t, err)
	got := rulesByFile(rep)
	assert.Nil(t, got[caseHost(t, tr, "rpath-not-runpath")])
	assert.Nil(t, got[caseHost(t, tr, "missing-dir")])
	assert.Nil(t, got[caseHost(t, tr, "build-dir-leak")])
	assert.Equal(t, []string{"CP006"}, got[caseHost(t, tr, "relative-entry")])
	for _, f := range rep.Findings {
		if f.Rule == "CP007" {
			assert.Equal(t, lint.Error, f.Severity)
		}
	}
	// A flag wins over the file.
	rep, err = lint.Lint(context.Background(), &lint.Options{Root: tr.Root, Enable: []string{"CP008"}}, []string{tr.Store})
	require.NoError(t, err)
	assert.Equal(t, []string{"CP008"}, rulesByFile(rep)[caseHost(t, tr, "rpath-not-runpath")])

	// A bad file is an error, not silence.
	require.NoError(t, os.WriteFile(filepath.Join(tr.Store, lint.ConfigFile), []byte(`{"disabel": ["CP008"]}`), 0o644))
	_, err = lint.Lint(context.Background(), &lint.Options{Root: tr.Root}, []string{tr.Store})
	assert.ErrorContains(t, err, "disabel")
	_, err = lint.ParseConfig([]byte(`{"ignore": [{"paths": ["a/[b"]}]}`))
	assert.ErrorContains(t, err, "bad glob")
}

func TestErrors(t *testing.T) {
	_, err := lint.Lint(context.Background(), nil, []string{"/nonexistent/tree"})
	assert.ErrorIs(t, err, os.ErrNotExist)
	tr := linttest.Build(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "f"), nil, 0o644))
	_, err = lint.Lint(context.Background(), &lint.Options{Root: tr.Root}, []string{outside})
	assert.ErrorContains(t, err, "not under the root")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = lint.Lint(ctx, &lint.Options{Root: tr.Root}, []string{tr.Store})
	assert.ErrorIs(t, err, context.Canceled)
}

// TestNotELF: a file with the ELF magic that does not parse is a CP012
// finding; other files are not counted.
func TestNotELF(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.so"), []byte("\x7fELF\x02\x01\x01garbage"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("text"), 0o644))
	rep, err := lint.Lint(context.Background(), nil, []string{dir})
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "broken.so")}, rep.Files)
	require.Len(t, rep.Findings, 1)
	assert.Equal(t, "CP012", rep.Findings[0].Rule)
}

// TestTextColor: colour codes only when asked for.
func TestTextColor(t *testing.T) {
	rep := &lint.Report{Files: []string{"a"}, Findings: []lint.Finding{{Rule: "CP007", Name: "duplicate-entry", Severity: lint.Warning, Path: "a", Message: "m"}}}
	var plain, color strings.Builder
	require.NoError(t, lint.WriteText(&plain, rep, false))
	require.NoError(t, lint.WriteText(&color, rep, true))
	assert.NotContains(t, plain.String(), "\x1b[")
	assert.Contains(t, color.String(), "\x1b[33;1mwarning\x1b[0m CP007")
	assert.Equal(t, "a\n  warning CP007 duplicate-entry: m\n\n1 ELF file checked, 1 with findings: 0 errors, 1 warning, 0 info\n", plain.String())
}

// TestIssueStaleStubNote is issue 11's failure end to end, on real files:
// a program linked against the toolkit's stubs carries the note patchelf
// master writes from that link-time RUNPATH (CP016), and a later RUNPATH
// rewrite leaves it: lint reports it stale (CP014) and the simulated
// nixpkgs loader opens the stub libcuda although the RUNPATH is right.
// After cudapatch (patch.Patch) rewrote the RUNPATH and the note in one
// edit, lint finds nothing wrong with the note and the loader takes the
// driver's libcuda through the note's driver-link hint.
func TestIssueStaleStubNote(t *testing.T) {
	dir := t.TempDir()
	p := func(s string) string { return filepath.Join(dir, s) }
	gcc := func(out string, args ...string) {
		fixtures.Place(t, fixtures.C{Source: "int lib(void) { return 1; }\n", Args: append([]string{"-fPIC", "-nostdlib"}, args...)}, out)
	}
	gcc(p("toolkit/lib/stubs/libcuda.so.1"), "-shared", "-Wl,-soname,libcuda.so.1")
	gcc(p("driver/libcuda.so.1"), "-shared", "-Wl,-soname,libcuda.so.1")
	gcc(p("pkg/lib/libfoo.so"), "-shared", "-Wl,-soname,libfoo.so")
	linkPath := p("toolkit/lib/stubs") + ":" + p("pkg/lib")
	app := p("pkg/bin/app")
	gcc(app, "-nostartfiles", "-Wl,-e,lib", "-Wl,--no-as-needed", "-Wl,--enable-new-dtags", "-Wl,-rpath,"+linkPath,
		p("toolkit/lib/stubs/libcuda.so.1"), p("pkg/lib/libfoo.so"))
	// patchelf master's rule (no rules) on the link-time RUNPATH.
	old, outcome := ldcache.Build([]string{"libcuda.so.1", "libfoo.so"}, linkPath, ldcache.OS{}, ldcache.Rules{})
	require.Equal(t, ldcache.Built, outcome)
	_, err := elfedit.EditFile(app, elfedit.Edit{SetNote: &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: old.Encode()}}, elfedit.Options{})
	require.NoError(t, err)

	noteRules := func() map[string]bool {
		// The tree lies under the temporary directory, a build directory
		// for lint: CP017 would report every element.
		rep, err := lint.Lint(context.Background(), &lint.Options{Policy: policy.Config{DriverLink: p("driver")}, Enable: []string{"all"}, Disable: []string{lint.NoteOutsideStore}}, []string{p("pkg")})
		require.NoError(t, err)
		out := map[string]bool{}
		for _, f := range rep.Findings {
			if f.Path == app && f.Rule >= lint.NoteStale && f.Rule <= lint.NoteMissing {
				out[f.Rule] = true
			}
		}
		return out
	}
	libcuda := func() (string, ldso.Step) {
		tr, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{p("none")}}, ldso.ElfReader(), app)
		require.NoError(t, err)
		for _, n := range tr.Needs {
			if n.Name == "libcuda.so.1" {
				return n.Path, n.Step
			}
		}
		t.Fatal("libcuda.so.1 not needed")
		return "", ""
	}

	// At link time the note agrees with the RUNPATH, stubs aside.
	assert.Equal(t, map[string]bool{lint.NoteStub: true}, noteRules())
	// A RUNPATH rewrite that leaves the note (cudapatch before issue 11,
	// autoPatchelf's --set-rpath after generate-ld-cache with a writer that
	// keeps notes) makes it stale: the loader still opens the stub.
	fixed := p("driver") + ":" + p("pkg/lib")
	_, err = elfedit.EditFile(app, elfedit.Edit{SetPath: &fixed}, elfedit.Options{})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{lint.NoteStale: true, lint.NoteStub: true}, noteRules())
	path, step := libcuda()
	assert.Equal(t, p("toolkit/lib/stubs/libcuda.so.1"), path)
	assert.Equal(t, ldso.StepNote, step)

	_, err = patch.Run(context.Background(), &patch.Config{Policy: policy.Config{DriverLink: p("driver")}}, []string{p("pkg")})
	require.NoError(t, err)
	assert.Empty(t, noteRules())
	path, step = libcuda()
	assert.Equal(t, p("driver/libcuda.so.1"), path)
	assert.Equal(t, ldso.StepNote, step)
}

// TestSymbolFindings: CP022-CP024 say what the loader would say, and when
// it fails.
func TestSymbolFindings(t *testing.T) {
	tr := linttest.Build(t)
	want := map[string]string{
		"symbol-version-missing":    linttest.LibSym + "/libsym.so: version `V2' not found (required by " + casePath("symbol-version-missing") + "): fails at load",
		"symbol-undefined-at-load":  "gdata@V1 (data, required by " + casePath("symbol-undefined-at-load") + ") is defined by no library of the closure: fails at load",
		"symbol-undefined-function": "gone@V1 (required by " + casePath("symbol-undefined-function") + ") is defined by no library of the closure: fails when first called",
	}
	for name, msg := range want {
		rep, err := lint.Lint(context.Background(), &lint.Options{Root: tr.Root}, []string{caseHost(t, tr, name)})
		require.NoError(t, err)
		require.Len(t, rep.Findings, 1, name)
		assert.Equal(t, msg, rep.Findings[0].Message, name)
	}
}

func casePath(name string) string {
	return "/nix/store/99999999999999999999999999999999-" + name + "/bin/" + name
}
