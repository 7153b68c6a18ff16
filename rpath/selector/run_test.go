package selector_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

const compatNote = `{"format":1,"CUDA version":"13.0","driver":[535,550,565,570,575,580],"device":[1,2,7,8,9,10,11,12,13,14]}`

// tree is a fake machine for one arch: cuda_compat's libcuda, a driver
// directory whose libcuda.so.1 names one of two driver versions, fake
// proc and sys, the selector built over them, and the programs.
type tree struct {
	root, compat, driverDir, selDir, sel string
	needed, dlopen, early                string
}

func newTree(t *testing.T, a arch) *tree {
	t.Helper()
	root := t.TempDir()
	tr := &tree{root: root, driverDir: filepath.Join(root, "driver"), selDir: filepath.Join(root, "sel")}
	lib := func(path, src string) {
		c := write(t, filepath.Join(root, "src", filepath.Base(path)+".c"), src)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		a.compile(t, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", path, c)
	}
	tr.compat = filepath.Join(root, "compat", "libcuda.so.580.95.05")
	lib(tr.compat, fakeSource("compat 580.95.05", 13000, true, compatNote))
	require.NoError(t, os.Symlink("libcuda.so.580.95.05", filepath.Join(root, "compat", "libcuda.so.1")))
	lib(filepath.Join(tr.driverDir, "libcuda.so.535.261.03"), fakeSource("driver 535.261.03", 12020, false, ""))
	lib(filepath.Join(tr.driverDir, "libcuda.so.590.10.01"), fakeSource("driver 590.10.01", 13010, false, ""))

	info, err := nvdriver.ReadCompat(tr.compat)
	require.NoError(t, err)
	fns, err := selector.Functions(tr.compat)
	require.NoError(t, err)
	require.Equal(t, []string{"cuDriverGetVersion", "cuInit", "fakeBig", "fakeCompatOnly", "fakeCtorSaw", "fakeSum", "fakeWhich"}, fns)
	spec := selector.Spec{Compat: tr.compat, Info: info, Driver: []string{
		// The selector itself (skipped: it would forward to itself), a
		// missing file, then the driver link.
		filepath.Join(tr.selDir, selector.Name), filepath.Join(root, "nodriver", "libcuda.so.1"), filepath.Join(tr.driverDir, "libcuda.so.1")},
		Functions: fns, Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys")}
	require.NoError(t, os.MkdirAll(tr.selDir, 0o755))
	require.NoError(t, selector.Build(context.Background(), spec, []string{a.cc}, tr.selDir))
	tr.sel = filepath.Join(tr.selDir, selector.Name)

	main := write(t, filepath.Join(root, "src", "main.c"), progSource)
	runpath := "-Wl,--enable-new-dtags,-rpath," + tr.selDir + ":" + tr.driverDir
	tr.needed = filepath.Join(root, "needed")
	a.compile(t, "-o", tr.needed, main, tr.compat, runpath, "-ldl")
	tr.dlopen = filepath.Join(root, "dlopen")
	a.compile(t, "-DUSE_DLOPEN", "-o", tr.dlopen, main, runpath, "-ldl")
	early := filepath.Join(root, "early", "libearly.so")
	require.NoError(t, os.MkdirAll(filepath.Dir(early), 0o755))
	a.compile(t, "-shared", "-fPIC", "-o", early, write(t, filepath.Join(root, "src", "early.c"), earlySource), "-ldl")
	// libcuda.so.1 before libearly.so among DT_NEEDED: unrelated, they
	// initialise in the reverse order, libearly.so's constructor first.
	tr.early = filepath.Join(root, "earlyprog")
	a.compile(t, "-o", tr.early, main, "-Wl,--no-as-needed", tr.compat, early, runpath+":"+filepath.Dir(early))
	return tr
}

// machine sets the fake module version (proc or sys, "" for none) and
// the driver version libcuda.so.1 names.
func (tr *tree) machine(t *testing.T, proc, sys, driver string) {
	t.Helper()
	for _, d := range []string{"proc", "sys"} {
		require.NoError(t, os.RemoveAll(filepath.Join(tr.root, d)))
	}
	if proc != "" {
		write(t, filepath.Join(tr.root, "proc/driver/nvidia/version"), procLine(0, proc))
	}
	if sys != "" {
		write(t, filepath.Join(tr.root, "sys/module/nvidia/version"), sys+"\n")
	}
	link := filepath.Join(tr.driverDir, "libcuda.so.1")
	require.NoError(t, os.RemoveAll(link))
	require.NoError(t, os.Symlink("libcuda.so."+driver, link))
}

// TestSelectorRuns: on fake machines, a program that links libcuda.so.1
// and one that dlopens it, with the selector first in RUNPATH, get
// cuda_compat's libcuda on a module older than compat and the driver's on
// a newer one; exactly one real libcuda is mapped; a function the chosen
// library lacks returns 801; with no module, or the chosen file missing,
// every function returns 100.
func TestSelectorRuns(t *testing.T) {
	type want struct {
		cuInit     string
		which      string // "" when no library answers
		version    string
		compatOnly string
	}
	compat := want{"0", "compat 580.95.05", "13000", "0"}
	driver590 := want{"0", "driver 590.10.01", "13010", "801"}
	none := want{"100", "", "", "100"}
	tests := []struct {
		name           string
		proc, sys, drv string
		remove         string // a file removed for the case
		want           want
		mapped         string // the real libcuda mapped, relative to the tree
	}{
		{name: "older module takes compat", proc: "535.261.03", drv: "535.261.03", want: compat, mapped: "compat/libcuda.so.580.95.05"},
		{name: "older module from sys", sys: "535.261.03", drv: "535.261.03", want: compat, mapped: "compat/libcuda.so.580.95.05"},
		{name: "same branch older takes compat", proc: "580.65.06", drv: "535.261.03", want: compat, mapped: "compat/libcuda.so.580.95.05"},
		{name: "newer module takes the driver", proc: "590.10.01", drv: "590.10.01", want: driver590, mapped: "driver/libcuda.so.590.10.01"},
		{name: "same branch newer takes the driver", proc: "580.159.04", drv: "590.10.01", want: driver590, mapped: "driver/libcuda.so.590.10.01"},
		{name: "unlisted branch takes the driver", proc: "520.61.05", drv: "590.10.01", want: driver590, mapped: "driver/libcuda.so.590.10.01"},
		{name: "no module", drv: "590.10.01", want: none},
		{name: "compat missing", proc: "535.261.03", drv: "535.261.03", remove: "compat/libcuda.so.580.95.05", want: none},
		{name: "driver missing", proc: "590.10.01", drv: "590.10.01", remove: "driver/libcuda.so.590.10.01", want: none},
	}
	for _, a := range arches() {
		t.Run(a.name, func(t *testing.T) {
			a.need(t)
			tr := newTree(t, a)
			info, err := selector.Read(tr.sel)
			require.NoError(t, err)
			for _, tt := range tests {
				tr.machine(t, tt.proc, tt.sys, tt.drv)
				module := tt.proc + tt.sys
				// The choice doctor and lint report from the note is the
				// one the selector makes.
				wantUse := map[string]nvdriver.Use{"compat": nvdriver.UseCompat, "driver": nvdriver.UseDriver}[strings.Fields(tt.want.which + " none")[0]]
				if tt.remove == "" && tt.want.which != "" {
					assert.Equal(t, wantUse, info.Choose(nvdriver.Machine{Module: module}).Use, tt.name)
				}
				var saved []byte
				if tt.remove != "" {
					saved, err = os.ReadFile(filepath.Join(tr.root, tt.remove))
					require.NoError(t, err)
					require.NoError(t, os.Remove(filepath.Join(tr.root, tt.remove)))
				}
				for _, prog := range []string{tr.needed, tr.dlopen} {
					out, err := a.exec(t, nil, prog)
					require.NoError(t, err, "%s %s: %s", tt.name, prog, out)
					l := lines(out)
					what := tt.name + " (" + filepath.Base(prog) + "):\n" + out
					assert.Equal(t, tt.want.cuInit, l["cuInit"], what)
					assert.Equal(t, tt.want.compatOnly, l["compatOnly"], what)
					if tt.want.which != "" {
						assert.Equal(t, "0 "+tt.want.which, l["which"], what)
						assert.Equal(t, "0 "+tt.want.version, l["version"], what)
						// The library's constructor called its own entry
						// point; through the selector when the selector is
						// in the global scope (the linked program).
						assert.Equal(t, "0 "+tt.want.version, l["ctorSaw"], what)
						assert.Equal(t, "ok", l["sum"], what)
						assert.Equal(t, "ok", l["big"], what)
						assert.Equal(t, 1, strings.Count(out, "real-ctor\n"), what)
					} else {
						assert.Equal(t, "100 -", l["which"], what)
						assert.Equal(t, "100 -1", l["version"], what)
						assert.NotContains(t, out, "real-ctor", what)
					}
					assert.Equal(t, tr.sel, l["again"], what)
					// The selector is mapped, and one real libcuda at most.
					ms := maps(out)
					require.Contains(t, ms, tr.sel, what)
					var real []string
					for _, m := range ms {
						if m != tr.sel {
							real = append(real, m)
						}
					}
					if tt.mapped != "" {
						assert.Equal(t, []string{filepath.Join(tr.root, tt.mapped)}, real, what)
					} else {
						assert.Empty(t, real, what)
					}
				}
				if tt.remove != "" {
					require.NoError(t, os.WriteFile(filepath.Join(tr.root, tt.remove), saved, 0o755))
				}
			}
		})
	}
}

// TestLazyPath: a library initialised before the selector calls through
// it from its constructor. The call takes the resolver: it loads the
// chosen library then and there (its constructor runs between the call
// and the answer), and every argument register, integer and float, and
// the struct-return register arrive intact.
func TestLazyPath(t *testing.T) {
	for _, a := range arches() {
		t.Run(a.name, func(t *testing.T) {
			a.need(t)
			tr := newTree(t, a)
			for _, drv := range []string{"535.261.03", "590.10.01"} {
				tr.machine(t, drv, "", drv)
				for _, first := range []string{"sum", "big"} {
					out, err := a.exec(t, []string{"FAKE_FIRST=" + first}, tr.early)
					require.NoError(t, err, "%s", out)
					what := drv + " " + first + ":\n" + out
					i, j, k := strings.Index(out, "early-calling\n"), strings.Index(out, "real-ctor\n"), strings.Index(out, "early-result=")
					require.True(t, i >= 0 && j > i && k > j, "the call before the selector's constructor loads the library: %s", what)
					assert.Contains(t, out, "early-result=ok\n", what)
					assert.Equal(t, "0", lines(out)["cuInit"], what)
					assert.Equal(t, 1, strings.Count(out, "real-ctor\n"), what)
				}
			}
		})
	}
}
