package selector_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

var (
	realCompat = flag.String("selector.compat", "", "TestInitCost: also time the selector over this real cuda_compat libcuda")
	realDriver = flag.String("selector.driver", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "TestInitCost: the real driver libcuda, with -selector.compat")
)

// costSource dlopens libcuda.so.1 through its RUNPATH, prints the
// selector's own measure of its initialisation, and calls two functions.
const costSource = `#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	long *ns = dlsym(h, "cudapatch_selector_init_ns");
	printf("init_ns=%ld\n", ns ? *ns : -2L);
	for (int i = 1; i < argc; i++) {
		int (*f)(unsigned) = (int (*)(unsigned))dlsym(h, argv[i]);
		printf("%s=%d\n", argv[i], f ? f(0) : -1);
	}
	int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	if (count) {
		int n = -1, rc = count(&n);
		printf("devices=%d %d\n", rc, n);
	}
	FILE *m = fopen("/proc/self/maps", "r");
	char line[4096], last[4096] = "";
	while (m && fgets(line, sizeof line, m)) {
		char *p = strchr(line, '/');
		if (p && strstr(p, "/libcuda.so") && strcmp(p, last) != 0) {
			strcpy(last, p);
			printf("map=%s", p);
		}
	}
	return 0;
}
`

// TestInitCost times the selector's initialisation (reading the module
// version, deciding, dlopen, one dlsym per entry point) with as many
// entry points as libcuda 580 has, over fake libraries, and checks that
// the whole table resolves. With -selector.compat it also times it over
// a real cuda_compat libcuda and the real driver (a GPU machine).
func TestInitCost(t *testing.T) {
	a := arches()[0]
	a.need(t)
	const n = 682
	root := t.TempDir()
	var names []string
	var src strings.Builder
	for i := range n {
		names = append(names, fmt.Sprintf("cuDummy%03d", i))
		fmt.Fprintf(&src, "int cuDummy%03d(void) { return %d; }\n", i, i)
	}
	compat := filepath.Join(root, "compat", "libcuda.so.580.95.05")
	driver := filepath.Join(root, "driver", "libcuda.so.590.10.01")
	for _, l := range []string{compat, driver} {
		require.NoError(t, os.MkdirAll(filepath.Dir(l), 0o755))
		a.compile(t, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", l, write(t, l+".c", src.String()+noteAsm(compatNote)))
	}
	info, err := nvdriver.ReadCompat(compat)
	require.NoError(t, err)
	prog := filepath.Join(root, "cost")
	c := write(t, filepath.Join(root, "cost.c"), costSource)

	type run struct {
		name, module string
		spec         selector.Spec
		calls        []string
		want         []string
		mapped       string // the real libcuda mapped, when checked
	}
	runs := []run{
		{name: "fake compat, 682 entry points", module: "535.261.03", calls: []string{"cuDummy000", "cuDummy681"}, want: []string{"cuDummy000=0", "cuDummy681=681"},
			spec: selector.Spec{Compat: compat, Info: info, Driver: []string{driver}, Functions: names}, mapped: compat},
		{name: "fake driver, 682 entry points", module: "590.10.01", calls: []string{"cuDummy000", "cuDummy681"}, want: []string{"cuDummy000=0", "cuDummy681=681"},
			spec: selector.Spec{Compat: compat, Info: info, Driver: []string{driver}, Functions: names}, mapped: driver},
	}
	if *realCompat != "" {
		info, err := nvdriver.ReadCompat(*realCompat)
		require.NoError(t, err)
		fns, err := selector.Functions(*realCompat)
		require.NoError(t, err)
		t.Logf("real compat %s: version %s, %d functions", *realCompat, info.Version, len(fns))
		spec := selector.Spec{Compat: *realCompat, Info: info, Driver: []string{*realDriver}, Functions: fns}
		driver, err := filepath.EvalSymlinks(*realDriver)
		require.NoError(t, err)
		module := nvdriver.KernelModule("/proc", "/sys")
		t.Logf("real driver %s, kernel module %q: %s", driver, module, nvdriver.Choose(info, nvdriver.Machine{Module: module}).Reason)
		runs = append(runs,
			run{name: "real libcuda, this machine's module", spec: spec, calls: []string{"cuInit"}, want: []string{"cuInit=0"}, mapped: driver},
			// The negative control: told the module is older, the selector
			// loads compat, which fails on the real, newer module.
			run{name: "real libcuda, module said to be 535.261.03", module: "535.261.03", spec: spec, calls: []string{"cuInit"}, want: []string{"cuInit=803"}, mapped: *realCompat})
	}
	for _, r := range runs {
		spec := r.spec
		if r.module != "" {
			spec.Proc, spec.Sys = filepath.Join(root, "proc"), filepath.Join(root, "sys")
			require.NoError(t, os.RemoveAll(spec.Proc))
			write(t, filepath.Join(spec.Proc, "driver/nvidia/version"), procLine(0, r.module))
		}
		sel := filepath.Join(root, "sel")
		require.NoError(t, os.MkdirAll(sel, 0o755))
		require.NoError(t, selector.Build(context.Background(), spec, []string{a.cc, "-DCUDAPATCH_SELECTOR_TIMING"}, sel))
		a.compile(t, "-o", prog, c, "-Wl,--enable-new-dtags,-rpath,"+sel, "-ldl")
		var us []float64
		for range 11 {
			out, err := a.exec(t, nil, prog, r.calls...)
			require.NoError(t, err, "%s", out)
			l := lines(out)
			for _, w := range r.want {
				k, v, _ := strings.Cut(w, "=")
				require.Equal(t, v, l[k], "%s: %s", r.name, out)
			}
			if r.mapped != "" {
				real, err := filepath.EvalSymlinks(r.mapped)
				require.NoError(t, err)
				want := []string{real, filepath.Join(sel, selector.Name)}
				slices.Sort(want)
				require.Equal(t, want, sortedMaps(out), "one real libcuda: %s: %s", r.name, out)
			}
			ns, err := strconv.ParseInt(l["init_ns"], 10, 64)
			require.NoError(t, err, "%s", out)
			require.Greater(t, ns, int64(0), "the selector measured itself: %s", out)
			us = append(us, float64(ns)/1e3)
		}
		slices.Sort(us)
		t.Logf("%s: %s", r.name, strings.Join(r.want, " "))
		t.Logf("%s: selector init median %.1f µs, min %.1f, max %.1f (11 runs)", r.name, us[len(us)/2], us[0], us[len(us)-1])
		// Generous: the target is under 1 ms with a real libcuda; a fake
		// one far less.
		if r.module != "" {
			require.Less(t, us[len(us)/2], float64((50 * time.Millisecond).Microseconds()))
		}
	}
}

func sortedMaps(out string) []string {
	ms := maps(out)
	slices.Sort(ms)
	return slices.Compact(ms)
}
