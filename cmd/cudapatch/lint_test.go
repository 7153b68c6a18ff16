package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
	"github.com/cudapatch/cudapatch/rpath/patch"
)

// runCLI runs the command line in-process.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"cudapatch"}, args...), &o, &e, env)
	return o.String(), e.String(), code
}

// lintTree builds the fixture tree and moves into its parent, so the tree
// is "root" and every path printed is relative and stable.
func lintTree(t *testing.T) *linttest.Tree {
	tr := linttest.Build(t)
	t.Chdir(filepath.Dir(tr.Root))
	return tr
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenFile(t, filepath.Join("lint", name), got)
}

// goldenFile compares got with testdata/NAME; `go test -update` rewrites
// the file instead.
func goldenFile(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test ./cmd/cudapatch -run %s -update", t.Name())
	assert.Equal(t, string(want), got, "golden file %s (rewrite with go test ./cmd/cudapatch -run %s -update)", p, t.Name())
}

// TestLintGolden checks every output format against its golden file.
func TestLintGolden(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	lintTree(t)
	for _, format := range []string{"text", "json", "sarif", "junit"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := runCLI(t, nil, "lint", "--root", "root", "--enable", "all", "--format", format, "root/nix/store")
			assert.Equal(t, exitFindings, code, errOut)
			assert.Empty(t, errOut)
			ext := map[string]string{"text": "txt", "json": "json", "sarif": "sarif", "junit": "xml"}[format]
			func() {
				cwd, _ := os.Getwd()
				require.NoError(t, os.Chdir(wd))
				defer os.Chdir(cwd)
				golden(t, "tree."+ext, out)
			}()
			switch format {
			case "sarif":
				checkSARIF(t, []byte(out))
			case "json":
				var rep lint.Report
				require.NoError(t, json.Unmarshal([]byte(out), &rep))
				assert.NotEmpty(t, rep.Findings)
			case "junit":
				var v struct {
					Tests    int `xml:"tests,attr"`
					Failures int `xml:"failures,attr"`
				}
				require.NoError(t, xml.Unmarshal([]byte(out), &v))
				assert.Positive(t, v.Failures)
				assert.Greater(t, v.Tests, v.Failures)
			}
		})
	}
}

func TestLintExitCodes(t *testing.T) {
	tr := lintTree(t)
	clean := []string{"lint", "--root", "root"}
	for _, c := range tr.Cases {
		if c.Rule == "" {
			rel, err := filepath.Rel(filepath.Dir(tr.Root), c.Host)
			require.NoError(t, err)
			clean = append(clean, rel)
		}
	}
	out, _, code := runCLI(t, nil, clean...)
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "0 with findings")

	// Only warnings (CP007 duplicate, CP008 DT_RPATH, CP011 missing dir):
	// fail-on error passes them, the default fails.
	warn := []string{"lint", "--root", "root", "root/nix/store/99999999999999999999999999999999-duplicate-entry"}
	_, _, code = runCLI(t, nil, warn...)
	assert.Equal(t, exitFindings, code)
	_, _, code = runCLI(t, nil, append(warn[:1:1], append([]string{"--fail-on", "error"}, warn[1:]...)...)...)
	assert.Equal(t, exitOK, code)
	_, _, code = runCLI(t, nil, "lint", "--root", "root", "--disable", "CP007,CP011", "root/nix/store/99999999999999999999999999999999-duplicate-entry")
	assert.Equal(t, exitOK, code)

	// --config replaces the tree's file.
	require.NoError(t, os.WriteFile("cfg.json", []byte(`{"ignore": [{"paths": ["**"]}]}`), 0o644))
	_, _, code = runCLI(t, nil, "lint", "--root", "root", "--config", "cfg.json", "root/nix/store")
	assert.Equal(t, exitOK, code)

	// $NIX_BUILD_TOP counts as a build directory.
	_, _, code = runCLI(t, []string{"NIX_BUILD_TOP=" + linttest.LibFoo}, "lint", "--root", "root", "--disable", "CP007", "root/nix/store/99999999999999999999999999999999-duplicate-entry")
	assert.Equal(t, exitFindings, code)

	for _, args := range [][]string{
		{"lint"},
		{"lint", "--format", "xml", "root"},
		{"lint", "--fail-on", "fatal", "root"},
		{"lint", "--enable", "CP999", "root"},
		{"lint", "nonexistent"},
		{"lint", "--config", "nonexistent.json", "root"},
	} {
		_, errOut, code := runCLI(t, nil, args...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.NotEmpty(t, errOut, "%v", args)
	}
	out, _, code = runCLI(t, nil, "lint", "--list-rules")
	assert.Equal(t, exitOK, code)
	for _, r := range lint.Rules() {
		assert.Contains(t, out, r.ID+" "+r.Name)
	}
}

// TestLintDocs: every rule has a section in docs/lint.md.
func TestLintDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/lint.md")
	require.NoError(t, err)
	for _, r := range lint.Rules() {
		assert.Contains(t, string(doc), "## "+r.ID+" "+r.Name, "docs/lint.md lacks a section for %s", r.ID)
	}
}

// checkSARIF checks the parts of the SARIF 2.1.0 schema
// (sarif-schema-2.1.0.json) that the output uses: required properties,
// types, enumerations, no properties the schema does not define (its
// objects are additionalProperties: false), and rule references that
// point at the right rule.
func checkSARIF(t *testing.T, data []byte) {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(data, &doc))
	obj := func(v any, where string, required []string, allowed ...string) map[string]any {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: not an object", where)
		for _, k := range required {
			assert.Contains(t, m, k, "%s: required property %q", where, k)
		}
		for k := range m {
			assert.Contains(t, append(required, allowed...), k, "%s: property %q is not in the schema", where, k)
		}
		return m
	}
	arr := func(v any, where string) []any {
		a, ok := v.([]any)
		require.True(t, ok, "%s: not an array", where)
		return a
	}
	str := func(v any, where string) string {
		s, ok := v.(string)
		require.True(t, ok, "%s: not a string", where)
		return s
	}
	uri := func(v any, where string) {
		_, err := url.Parse(str(v, where))
		assert.NoError(t, err, where)
	}
	levels := []string{"none", "note", "warning", "error"}

	obj(doc, "sarifLog", []string{"version", "runs"}, "$schema")
	assert.Equal(t, "2.1.0", doc["version"])
	uri(doc["$schema"], "$schema")
	runs := arr(doc["runs"], "runs")
	require.Len(t, runs, 1)
	run := obj(runs[0], "run", []string{"tool"}, "results")
	tool := obj(run["tool"], "tool", []string{"driver"})
	drv := obj(tool["driver"], "toolComponent", []string{"name"}, "informationUri", "rules", "version")
	str(drv["name"], "driver.name")
	uri(drv["informationUri"], "driver.informationUri")
	var ids []string
	for i, r := range arr(drv["rules"], "rules") {
		where := "rules[" + string(rune('0'+i%10)) + "]"
		rd := obj(r, where, []string{"id"}, "name", "shortDescription", "helpUri", "defaultConfiguration")
		ids = append(ids, str(rd["id"], where+".id"))
		sd := obj(rd["shortDescription"], where+".shortDescription", []string{"text"})
		assert.NotEmpty(t, str(sd["text"], where+".shortDescription.text"))
		uri(rd["helpUri"], where+".helpUri")
		assert.True(t, strings.HasPrefix(rd["helpUri"].(string), "https://"), where)
		dc := obj(rd["defaultConfiguration"], where+".defaultConfiguration", nil, "level")
		assert.Contains(t, levels, str(dc["level"], where+".level"))
	}
	results := arr(run["results"], "results")
	assert.NotEmpty(t, results)
	for _, r := range results {
		res := obj(r, "result", []string{"message"}, "ruleId", "ruleIndex", "level", "locations")
		id := str(res["ruleId"], "result.ruleId")
		idx, ok := res["ruleIndex"].(float64)
		require.True(t, ok, "ruleIndex not a number")
		require.True(t, idx >= 0 && int(idx) < len(ids), "ruleIndex %v out of range", idx)
		assert.Equal(t, ids[int(idx)], id, "ruleIndex points at another rule")
		assert.Contains(t, levels, str(res["level"], "result.level"))
		msg := obj(res["message"], "message", nil, "text")
		assert.NotEmpty(t, str(msg["text"], "message.text"))
		locs := arr(res["locations"], "locations")
		require.Len(t, locs, 1)
		loc := obj(locs[0], "location", nil, "physicalLocation")
		pl := obj(loc["physicalLocation"], "physicalLocation", []string{"artifactLocation"})
		al := obj(pl["artifactLocation"], "artifactLocation", nil, "uri")
		u := str(al["uri"], "artifactLocation.uri")
		_, err := url.Parse(u)
		assert.NoError(t, err)
		assert.False(t, strings.HasPrefix(u, "/"), "uri %q: relative paths stay relative", u)
	}
}

// TestLintDriverVersion: --driver-version turns on CP021 and says which
// cuda_compat fails with error 803 under that driver (the GPU machine's:
// compat 580.95.05, driver 580.159.04); a bad version is a usage error.
func TestLintDriverVersion(t *testing.T) {
	lintTree(t)
	file := "root/nix/store/99999999999999999999999999999999-clean-compat/bin/clean-compat"
	out, errOut, code := runCLI(t, nil, "lint", "--root", "root", file)
	assert.Equal(t, exitOK, code, out+errOut)
	out, errOut, code = runCLI(t, nil, "lint", "--root", "root", "--driver-version", "580.159.04", file)
	assert.Equal(t, exitFindings, code, errOut)
	assert.Contains(t, out, "  error   CP021 compat-older-than-driver: cuda_compat directory "+linttest.Compat+" holds libcuda 580.95.05, older than the driver 580.159.04 the file is to run with, and the loader takes it on every machine: CUDA fails with error 803")
	out, _, code = runCLI(t, nil, "lint", "--root", "root", "--driver-version", "580.95.05", file)
	assert.Equal(t, exitOK, code, out)
	_, errOut, code = runCLI(t, nil, "lint", "--root", "root", "--driver-version", "580", file)
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "cudapatch: lint: driver version \"580\": want an NVIDIA driver version like 580.159.04\n", errOut)
	_, errOut, code = runCLI(t, nil, "lint", "--root", "root", "--enable", "CP021", file)
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "cudapatch: lint: rule CP021 compat-older-than-driver needs the target driver version (Options.DriverVersion, --driver-version)\n", errOut)
}

// TestLintAgreesWithMainJob is issue 32's onnxruntime-node case through
// the command line, outside Nix: a tree with an x86_64 variant beside an
// aarch64 one, patched by the main job with this machine's interpreter
// (no $NIX_BINTOOLS, --interpreter or --libc) and an old $ORIGIN entry kept
// by --preserve-origin. lint, with nothing but --preserve-origin, takes the
// same interpreter, skips the aarch64 files with the main job's reason
// (--json's "skipped", text's "skipped:" lines), and finds nothing; -v logs
// each skip. Without --preserve-origin, the kept entry is CP011.
func TestLintAgreesWithMainJob(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"bfd-pie", "aarch64-bfd-pie"} {
		require.NoError(t, os.CopyFS(filepath.Join(dir, name), os.DirFS(fixtures.ByName(t, name).Dir)))
	}
	lib := filepath.Join(dir, "bfd-pie", "lib", "libfoo.so")
	old := "$ORIGIN/../plugins"
	_, err := elfedit.EditFile(lib, elfedit.Edit{SetPath: &old}, elfedit.Options{})
	require.NoError(t, err)

	_, errOut, code := runCLI(t, nil, "--relativize-rpath", "--preserve-origin", "--json", dir)
	require.Equal(t, exitOK, code, errOut)
	var rep patch.Report
	out, _, _ := runCLI(t, nil, "--relativize-rpath", "--preserve-origin", "--json", "--dry-run", dir)
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	skipped := map[string]string{}
	for _, f := range rep.Files {
		if f.Skipped != "" {
			skipped[f.Path] = f.Skipped
		}
	}
	require.Len(t, skipped, 4)

	out, errOut, code = runCLI(t, nil, "lint", "--preserve-origin", "--format", "json", dir)
	assert.Equal(t, exitOK, code, out+errOut)
	var lr lint.Report
	require.NoError(t, json.Unmarshal([]byte(out), &lr))
	assert.Empty(t, lr.Findings)
	assert.Len(t, lr.Files, 4)
	got := map[string]string{}
	for _, s := range lr.Skipped {
		got[s.Path] = s.Reason
	}
	assert.Equal(t, skipped, got)

	out, errOut, code = runCLI(t, nil, "lint", "-v", "--preserve-origin", dir)
	assert.Equal(t, exitOK, code, out+errOut)
	arm := filepath.Join(dir, "aarch64-bfd-pie", "lib", "libfoo.so")
	assert.Contains(t, out, arm+": skipped: ELFCLASS64 EM_AARCH64, not the interpreter's architecture\n")
	assert.Contains(t, out, "4 ELF files checked (4 skipped), 0 with findings: 0 errors, 0 warnings, 0 info\n")
	assert.Contains(t, errOut, `msg=skipped file=`+arm+` reason="ELFCLASS64 EM_AARCH64, not the interpreter's architecture"`)

	out, _, code = runCLI(t, nil, "lint", dir)
	assert.Equal(t, exitFindings, code)
	assert.Contains(t, out, "warning CP011 missing-dir: DT_RUNPATH entry "+old+" does not exist")
}

// TestLintStoreUnderTmp: a store under /tmp (a test's, an unprivileged
// Nix's), named with --store-dir, lints clean after the main job patched
// a package in it: its entries and note elements are in the store, no
// build-directory leak (CP005, CP017). An entry under /tmp outside that
// store still is one.
func TestLintStoreUnderTmp(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	pkg := filepath.Join(store, "00000000000000000000000000000000-pkg")
	require.NoError(t, os.CopyFS(pkg, os.DirFS(fixtures.ByName(t, "bfd-pie").Dir)))
	// A glibc in the store: the host's loader and libc, copied.
	host, err := ldso.FindHost("")
	require.NoError(t, err)
	glibc := filepath.Join(store, "11111111111111111111111111111111-glibc", "lib")
	require.NoError(t, os.MkdirAll(glibc, 0o755))
	for _, f := range []string{host.Interpreter, filepath.Join(host.LibcDir, "libc.so.6")} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(glibc, filepath.Base(f)), b, 0o755))
	}
	interp := filepath.Join(glibc, filepath.Base(host.Interpreter))
	_, errOut, code := runCLI(t, nil, "--interpreter", interp, "--libc", glibc, pkg)
	require.Equal(t, exitOK, code, errOut)

	out, errOut, code := runCLI(t, nil, "lint", "--store-dir", store, "--interpreter", interp, pkg)
	assert.Equal(t, exitOK, code, out+errOut)
	assert.NotContains(t, out, "CP005")
	assert.NotContains(t, out, "CP017")
	// $NIX_STORE names it when --store-dir does not, as for the main job.
	out, errOut, code = runCLI(t, []string{"NIX_STORE=" + store}, "lint", "--interpreter", interp, pkg)
	assert.Equal(t, exitOK, code, out+errOut)

	elsewhere := filepath.Join(filepath.Dir(store), "build", "lib")
	lib := filepath.Join(pkg, "lib", "libfoo.so")
	_, err = elfedit.EditFile(lib, elfedit.Edit{SetPath: &elsewhere}, elfedit.Options{})
	require.NoError(t, err)
	out, _, code = runCLI(t, nil, "lint", "--store-dir", store, "--interpreter", interp, pkg)
	assert.Equal(t, exitFindings, code, out)
	assert.Contains(t, out, "CP005 build-dir-leak: DT_RUNPATH entry "+elsewhere+" is under the build directory /tmp")
}
