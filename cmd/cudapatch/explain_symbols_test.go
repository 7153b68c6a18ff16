package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/cudapatch/cudapatch/internal/fixtures"
)

// TestExplainSymbols: explain --symbols names the provider of each symbol
// and version, and says when a missing one fails: when called under lazy
// binding, at load with --bind-now; exit 1 then, 0 on a clean file.
func TestExplainSymbols(t *testing.T) {
	dir := t.TempDir()
	libfn := func(out, src, script string) {
		fx.Place(t, fx.C{Source: src, Files: map[string]string{"fn.map": script},
			Args: []string{"-shared", "-fPIC", "-Wl,-soname,libfn.so", "-Wl,--version-script=fn.map"}}, filepath.Join(dir, out))
	}
	libfn("build/libfn.so", "int present(void) { return 1; } int gone(void) { return 2; }\n", "FN_1 { global: present; gone; local: *; };\n")
	libfn("run/libfn.so", "int present(void) { return 1; }\n", "FN_1 { global: present; local: *; };\n")
	exe := filepath.Join(dir, "prog")
	fx.Place(t, fx.C{Source: "int present(void); int gone(void); int main(int c, char **v) { return c > 1 ? gone() : present(); }\n",
		Args: []string{"-L" + filepath.Join(dir, "build"), "-lfn", "-Wl,-rpath,$ORIGIN/run"}}, exe)
	lib := filepath.Join(dir, "run/libfn.so")

	out, errOut, code := runFixed(t, nil, "explain", "--symbols", exe)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	require.Contains(t, out, "version FN_1 of libfn.so => "+lib+"\n")
	require.Contains(t, out, "present@FN_1 (function) => "+lib+"\n")
	require.Contains(t, out, "gone@FN_1 (function) => NOT FOUND: fails when called: undefined symbol: gone, version FN_1\n")
	require.Contains(t, out, "0 fail at load, 1 fail when called\n")

	out, _, code = runFixed(t, nil, "explain", "--symbols", "--bind-now", exe)
	require.Equal(t, 1, code)
	require.Contains(t, out, "gone@FN_1 (function) => NOT FOUND: fails at load: undefined symbol: gone, version FN_1\n")

	out, _, code = runFixed(t, nil, "explain", "--symbols", "--json", exe)
	require.Equal(t, 1, code)
	var doc struct {
		Symbols struct {
			Symbols []struct{ Name, Provider, Status string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	st := map[string]string{}
	for _, s := range doc.Symbols.Symbols {
		st[s.Name] = s.Status + " " + s.Provider
	}
	require.Equal(t, "bound "+lib, st["present"])
	require.Equal(t, "fails-when-called ", st["gone"])

	// Without --symbols, explain is what it was: every library is found.
	_, _, code = runFixed(t, nil, "explain", exe)
	require.Equal(t, 0, code)
	// A clean program of this machine.
	out, _, code = runFixed(t, nil, "explain", "--symbols", "/bin/sh")
	require.Equal(t, 0, code, "%s", out)
	require.Contains(t, out, " 0 fail at load, 0 fail when called\n")
}

// TestExplainSymbolsStubs: the driver's libraries are not read, and said
// so, unless --stubs names the toolkit's stubs, which stand in for them.
func TestExplainSymbolsStubs(t *testing.T) {
	dir := t.TempDir()
	cuda := func(out, src string) {
		fx.Place(t, fx.C{Source: src, Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}}, out)
	}
	stubs := filepath.Join(dir, "stubs")
	// The toolkit's stub is libcuda.so, with the driver's soname.
	cuda(filepath.Join(stubs, "libcuda.so"), "int cuInit(unsigned f) { return f; }\n")
	// The program was linked against a driver that has cuGone too.
	full := filepath.Join(dir, "full", "libcuda.so")
	cuda(full, "int cuInit(unsigned f) { return f; } int cuGone(void) { return 1; }\n")
	exe := filepath.Join(dir, "prog")
	fx.Place(t, fx.C{Source: "int cuInit(unsigned); int cuGone(void); int main(int c, char **v) { return c > 1 ? cuGone() : cuInit(0); }\n", Args: []string{full}}, exe)

	out, _, code := runFixed(t, nil, "explain", "--symbols", exe)
	require.Equal(t, 1, code, "libcuda.so.1 is not found at build time")
	require.Contains(t, out, "cuInit (function) => not checked (library missing or not read)\n")
	require.Contains(t, out, "not checked against libcuda.so.1: missing or not read\n")

	out, _, code = runFixed(t, nil, "explain", "--symbols", "--stubs", stubs, exe)
	require.Equal(t, 1, code)
	require.Contains(t, out, "libcuda.so.1 (checked against "+filepath.Join(stubs, "libcuda.so")+")\n")
	require.Contains(t, out, "cuInit (function) => libcuda.so.1\n")
	require.Contains(t, out, "cuGone (function) => NOT FOUND: fails when called: undefined symbol: cuGone\n")
}
