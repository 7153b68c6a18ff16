package selector_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

func goodSpec() selector.Spec {
	return selector.Spec{
		Compat:    "/nix/store/x-cuda_compat/compat/libcuda.so.580.95.05",
		Info:      nvdriver.Compat{Version: "580.95.05", Note: &nvdriver.CompatNote{Format: 1, Driver: []int{535, 580}}},
		Driver:    []string{"/run/opengl-driver/lib/libcuda.so.1"},
		Functions: []string{"cuInit", "cuDriverGetVersion"},
	}
}

// TestReadAndBuild: Build writes libcuda.so.1 with the note Read reads
// back; nvdriver takes it for no real libcuda of any version; a real
// libcuda, a non-ELF file and a missing one are told apart.
func TestReadAndBuild(t *testing.T) {
	a := arches()[0]
	a.need(t)
	dir := t.TempDir()
	spec := goodSpec()
	spec.Compat = "/nix/store/x-cuda_compat/compat/libcuda.so.580.95.05 \"odd\\?\n"
	require.NoError(t, selector.Build(context.Background(), spec, []string{a.cc}, dir))
	sel := filepath.Join(dir, selector.Name)
	info, err := selector.Read(sel)
	require.NoError(t, err)
	assert.Equal(t, &selector.Info{Compat: spec.Compat, CompatVersion: "580.95.05", Branches: []int{535, 580},
		Driver: spec.Driver, Proc: "/proc", Sys: "/sys", Functions: 2}, info)
	assert.Equal(t, nvdriver.UseCompat, info.Choose(nvdriver.Machine{Module: "535.261.03"}).Use)
	assert.Equal(t, nvdriver.UseDriver, info.Choose(nvdriver.Machine{Module: "550.54.15"}).Use, "550 is not listed")
	assert.Equal(t, nvdriver.UseDriver, info.Choose(nvdriver.Machine{Module: "580.159.04"}).Use)
	assert.Equal(t, nvdriver.UseNone, info.Choose(nvdriver.Machine{Module: ""}).Use)
	fns, err := selector.Functions(sel)
	require.NoError(t, err)
	assert.Equal(t, []string{"cuDriverGetVersion", "cuInit"}, fns, "the selector exports the functions and nothing else")
	l, err := nvdriver.ReadLibcudaFile(sel)
	require.NoError(t, err)
	assert.Equal(t, nvdriver.Libcuda{}, l, "no version string: not taken for a real libcuda")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary left")

	// A failing compiler leaves the existing selector as it was.
	before, err := os.ReadFile(sel)
	require.NoError(t, err)
	err = selector.Build(context.Background(), spec, []string{a.cc, "-DNOPE", "-include", "/nonexistent.h"}, dir)
	require.ErrorContains(t, err, a.cc)
	after, err := os.ReadFile(sel)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary left")

	compat := filepath.Join(t.TempDir(), "libcuda.so.580.95.05")
	a.compile(t, "-shared", "-fPIC", "-o", compat, write(t, filepath.Join(t.TempDir(), "c.c"), fakeSource("compat", 1, true, compatNote)))
	_, err = selector.Read(compat)
	assert.True(t, errors.Is(err, selector.ErrNotSelector), "%v", err)
	assert.ErrorContains(t, err, compat)
	_, err = selector.Read(write(t, filepath.Join(t.TempDir(), "text"), "not ELF"))
	assert.ErrorContains(t, err, "text")
	_, err = selector.Read(filepath.Join(dir, "missing"))
	assert.ErrorContains(t, err, "missing")
}

// TestFunctions: exported defined functions only: no data (the cudbg*
// variables), no hidden or local functions, no undefined references, no
// _init or _fini.
func TestFunctions(t *testing.T) {
	a := arches()[0]
	a.need(t)
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.580.95.05")
	a.compile(t, "-shared", "-fPIC", "-o", lib, write(t, filepath.Join(dir, "l.c"), `
#include <string.h>
int cudbgReportDriverApiError = 1;
int cudbgIpcFlag;
int cuInit(unsigned f) { return (int)strlen(""); }
__attribute__((weak)) int cuWeak(void) { return 0; }
__attribute__((visibility("hidden"))) int cuHidden(void) { return 0; }
static int cuLocal(void) { return 0; }
int cuGetProcAddress(void) { return cuLocal() + cuHidden(); }
`))
	got, err := selector.Functions(lib)
	require.NoError(t, err)
	assert.Equal(t, []string{"cuGetProcAddress", "cuInit", "cuWeak"}, got)

	_, err = selector.Functions(write(t, filepath.Join(dir, "text"), "not ELF"))
	assert.ErrorContains(t, err, "text")
}

// TestSourceRejects: a spec that cannot make a working selector is an
// error naming the problem.
func TestSourceRejects(t *testing.T) {
	tests := []struct {
		name   string
		change func(*selector.Spec)
		want   string
	}{
		{"relative compat", func(s *selector.Spec) { s.Compat = "compat/libcuda.so.580.95.05" }, "not an absolute path"},
		{"relative driver", func(s *selector.Spec) { s.Driver = []string{"libcuda.so.1"} }, "not an absolute path"},
		{"relative proc", func(s *selector.Spec) { s.Proc = "proc" }, "not an absolute path"},
		{"NUL in a path", func(s *selector.Spec) { s.Driver = []string{"/a\x00b"} }, "not an absolute path"},
		{"no driver", func(s *selector.Spec) { s.Driver = nil }, "no driver"},
		{"no compat version", func(s *selector.Spec) { s.Info.Version = "" }, "compat version"},
		{"bad compat version", func(s *selector.Spec) { s.Info.Version = "13.0" }, "compat version"},
		{"no functions", func(s *selector.Spec) { s.Functions = nil }, "0 functions"},
		{"not an identifier", func(s *selector.Spec) { s.Functions = []string{"cuInit@@V1"} }, "cannot be forwarded"},
		{"_init", func(s *selector.Spec) { s.Functions = []string{"_init"} }, "cannot be forwarded"},
		{"own name", func(s *selector.Spec) { s.Functions = []string{"cudapatch_sel_table"} }, "cannot be forwarded"},
		{"twice", func(s *selector.Spec) { s.Functions = []string{"cuInit", "cuInit"} }, "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodSpec()
			tt.change(&s)
			_, err := selector.Source(s)
			assert.ErrorContains(t, err, tt.want)
			assert.ErrorContains(t, selector.Build(context.Background(), s, []string{"gcc"}, t.TempDir()), tt.want)
		})
	}
	_, err := selector.Source(goodSpec())
	require.NoError(t, err)
}

// TestBuildReproducible: two builds of one spec are the same bytes, as a
// Nix build checked with --check must be.
func TestBuildReproducible(t *testing.T) {
	dir := t.TempDir()
	compat := filepath.Join(dir, "compat")
	require.NoError(t, os.MkdirAll(compat, 0o755))
	fixtures.Place(t, fixtures.C{Source: "int cuInit(unsigned f) { return 0; }\n", Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}}, filepath.Join(compat, "libcuda.so.580.95.05"))
	require.NoError(t, os.Symlink("libcuda.so.580.95.05", filepath.Join(compat, "libcuda.so.1")))
	spec, err := selector.ForCompat(compat, []string{"/run/opengl-driver/lib/libcuda.so.1"})
	require.NoError(t, err)
	var built [][]byte
	for _, out := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		require.NoError(t, os.MkdirAll(out, 0o755))
		require.NoError(t, selector.Build(context.Background(), spec, []string{"gcc"}, out))
		data, err := os.ReadFile(filepath.Join(out, selector.Name))
		require.NoError(t, err)
		built = append(built, data)
	}
	assert.Equal(t, built[0], built[1])
}
