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

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// The loader that runs the patched programs, with its cache out of the way,
// and the directory of the libc they need.
const (
	hostLoader  = "/lib64/ld-linux-x86-64.so.2"
	hostLibcDir = "/lib/x86_64-linux-gnu"
)

// Sources of the "prebuilt package" of TestRuntimeWhichLibcuda.
const (
	srcDep    = "int dep(void) { return 41; }\n"
	srcFoo    = "int dep(void);\nint foo(void) { return dep() + 1; }\n"
	srcCuda   = "const char *which(void) { return \"%s\"; }\n"
	srcCudart = `#include <dlfcn.h>
/* Like libcudart: dlopen the driver by soname, no DT_NEEDED on it. */
const char *loader_which(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h)
		return dlerror();
	const char *(*w)(void) = (const char *(*)(void))dlsym(h, "which");
	return w ? w() : "no which()";
}
`
	srcDirect = `#include <stdio.h>
const char *which(void);
int foo(void);
int main(void) { printf("direct=%s foo=%d\n", which(), foo()); return 0; }
`
	srcDlopen = `#include <stdio.h>
const char *loader_which(void);
int foo(void);
int main(void) { printf("dlopen=%s foo=%d\n", loader_which(), foo()); return 0; }
`
)

// prebuilt lays out the package: pkg/ is the output to patch,
// deps/lib a dependency, driver/ the driver link, toolkit/lib/stubs the
// toolkit's stubs (also a search dir) and compat/ a cuda_compat.
func prebuilt(t *testing.T) *tree {
	t.Helper()
	if _, err := os.Stat(filepath.Join(hostLibcDir, "libc.so.6")); err != nil {
		t.Fatalf("this test runs x86_64 glibc programs: %v", err)
	}
	tr := newTree(t)
	cuda := func(which string) cfix.Spec {
		return cfix.Spec{Soname: "libcuda.so.1", Source: strings.Replace(srcCuda, "%s", which, 1)}
	}
	dep := cfix.Build(t, cfix.Spec{Soname: "libdep.so", Source: srcDep})
	foo := cfix.Build(t, cfix.Spec{Soname: "libfoo.so", Source: srcFoo, Link: []string{dep}})
	cudart := cfix.Build(t, cfix.Spec{Soname: "libcudaloader.so", Source: srcCudart, Libc: true})
	driver := cfix.Build(t, cuda("driver"))
	cfix.Copy(t, dep, tr.p("deps/lib/libdep.so"))
	cfix.Copy(t, foo, tr.p("pkg/lib/libfoo.so"))
	cfix.Copy(t, cudart, tr.p("pkg/lib/libcudaloader.so"))
	cfix.Copy(t, driver, tr.p("driver/libcuda.so.1"))
	tr.place("toolkit/lib/stubs/libcuda.so.1", cuda("stub"))
	tr.symlink("toolkit/lib/stubs/libcuda.so", "libcuda.so.1")
	// cuda_compat as NVIDIA ships it: the versioned file and its soname
	// link.
	tr.place("compat/libcuda.so.580.95.05", cuda("compat"))
	tr.symlink("compat/libcuda.so.1", "libcuda.so.580.95.05")
	// Linked against the stubs, as such binaries are: the RUNPATH names
	// the stubs directory.
	tr.place("pkg/bin/app-direct", cfix.Spec{Exe: true, Libc: true, Source: srcDirect,
		Link: []string{foo, driver}, RunPath: "{root}/toolkit/lib/stubs"})
	tr.place("pkg/bin/app-dlopen", cfix.Spec{Exe: true, Libc: true, Source: srcDlopen,
		Link: []string{foo, cudart}})
	return tr
}

// runApp runs a program the way the run-time checks must: through the
// loader with --inhibit-cache, with LD_LIBRARY_PATH and LD_PRELOAD removed
// (NVIDIA images set LD_LIBRARY_PATH, which outranks RUNPATH).
func runApp(t *testing.T, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostLoader, "--inhibit-cache", path)
	cmd.Dir = t.TempDir()
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

func patchPrebuilt(t *testing.T, tr *tree, edit func(*patch.Config)) {
	t.Helper()
	opts := patch.Config{
		Search: tr.ps("deps/lib", "toolkit/lib/stubs"),
		Policy: policy.Config{DriverLink: tr.p("driver"), Interpreter: hostLoader},
		Libc:   hostLibcDir,
	}
	edit(&opts)
	tr.mustPatch([]string{"pkg"}, opts)
}

// TestRuntimeWhichLibcuda runs the patched programs and asserts which of
// three libcuda.so.1 the loader took: the driver's without cuda_compat,
// compat's with it, the stub never; directly (DT_NEEDED) and through dlopen
// from a library, as libcudart does.
func TestRuntimeWhichLibcuda(t *testing.T) {
	t.Run("unpatched does not run", func(t *testing.T) {
		tr := prebuilt(t)
		if out, err := runApp(t, tr.p("pkg/bin/app-direct")); err == nil || !strings.Contains(out, "libfoo.so") {
			t.Errorf("unpatched app-direct: %v %q; want libfoo.so not found", err, out)
		}
	})
	t.Run("the harness sees a stub", func(t *testing.T) {
		// Control: with the stubs first, which() says so. DT_RPATH, which
		// libfoo.so inherits for its libdep.so.
		tr := prebuilt(t)
		rp := tr.x("{root}/toolkit/lib/stubs:{root}/pkg/lib:{root}/deps/lib")
		if _, err := elfedit.EditFile(tr.p("pkg/bin/app-direct"), elfedit.Edit{SetPath: &rp, Tag: elfedit.TagRPath}, elfedit.Options{}); err != nil {
			t.Fatal(err)
		}
		if out, err := runApp(t, tr.p("pkg/bin/app-direct")); err != nil || out != "direct=stub foo=42" {
			t.Errorf("control: %v %q", err, out)
		}
	})
	for _, c := range []struct {
		name    string
		edit    func(tr *tree, cfg *patch.Config)
		direct  string
		dlopen  string
		runpath string // of app-direct
	}{
		{"driver without compat", func(*tree, *patch.Config) {},
			"direct=driver foo=42", "dlopen=driver foo=42", "{root}/driver:{root}/pkg/lib"},
		// With cuda_compat, the selector decides when each process starts:
		// compat on a module older than it, the driver on a newer one.
		{"compat on an older driver", func(tr *tree, cfg *patch.Config) { compatOn(tr, cfg, "535.261.03") },
			"direct=compat foo=42", "dlopen=compat foo=42", "{root}/selector:{root}/driver:{root}/pkg/lib"},
		{"compat on a newer driver", func(tr *tree, cfg *patch.Config) { compatOn(tr, cfg, "590.10.01") },
			"direct=driver foo=42", "dlopen=driver foo=42", "{root}/selector:{root}/driver:{root}/pkg/lib"},
		{"compat on the same branch, newer driver", func(tr *tree, cfg *patch.Config) { compatOn(tr, cfg, "580.159.04") },
			"direct=driver foo=42", "dlopen=driver foo=42", "{root}/selector:{root}/driver:{root}/pkg/lib"},
		// Why the default is "all": libcudart-like libraries have no
		// DT_NEEDED on libcuda, so "needed" without dlopen discovery leaves
		// their dlopen nowhere to look. It still never finds the stub.
		{"driver link for needed only, no dlopen discovery", func(_ *tree, cfg *patch.Config) {
			cfg.Policy.DriverLinkFor, cfg.Policy.Dlopen = policy.DriverLinkNeeded, policy.DlopenOff
		}, "direct=driver foo=42", "dlopen=libcuda.so.1: cannot open shared object file: No such file or directory foo=42", "{root}/driver:{root}/pkg/lib"},
		// Discovery (the default) reads "libcuda.so.1" in the loader
		// library's read-only data: it needs the driver link too.
		{"driver link for needed, dlopen discovered", func(_ *tree, cfg *patch.Config) {
			cfg.Policy.DriverLinkFor = policy.DriverLinkNeeded
		},
			"direct=driver foo=42", "dlopen=driver foo=42", "{root}/driver:{root}/pkg/lib"},
		// Report finds it and changes nothing.
		{"driver link for needed, dlopen report", func(_ *tree, cfg *patch.Config) {
			cfg.Policy.DriverLinkFor, cfg.Policy.Dlopen = policy.DriverLinkNeeded, policy.DlopenReport
		}, "direct=driver foo=42", "dlopen=libcuda.so.1: cannot open shared object file: No such file or directory foo=42", "{root}/driver:{root}/pkg/lib"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := prebuilt(t)
			patchPrebuilt(t, tr, func(cfg *patch.Config) { c.edit(tr, cfg) })
			if got := tr.runpathOf("pkg/bin/app-direct"); got != tr.x(c.runpath) {
				t.Errorf("app-direct RUNPATH %q, want %q", got, tr.x(c.runpath))
			}
			if out, err := runApp(t, tr.p("pkg/bin/app-direct")); err != nil || out != c.direct {
				t.Errorf("app-direct: %v %q, want %q", err, out, c.direct)
			}
			if out, err := runApp(t, tr.p("pkg/bin/app-dlopen")); err != nil || out != c.dlopen {
				t.Errorf("app-dlopen: %v %q, want %q", err, out, c.dlopen)
			}
		})
	}
}

// compatOn gives cfg cuda_compat with its selector, on a fake machine
// whose kernel module is module.
func compatOn(tr *tree, cfg *patch.Config, module string) {
	tr.t.Helper()
	proc := tr.p("machine/proc")
	if err := os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	line := "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + module + "  Release Build\n"
	if err := os.WriteFile(filepath.Join(proc, "driver/nvidia/version"), []byte(line), 0o644); err != nil {
		tr.t.Fatal(err)
	}
	cfg.Policy.CudaCompat = tr.p("compat")
	cfg.Selector = patch.CompatSelector{Dir: tr.p("selector"), CC: []string{"gcc"}}
	patch.SetSelectorMachine(cfg, proc, tr.p("machine/sys"))
}

// TestCompatNeedsSelector: cuda_compat's own libcuda is never put first
// on every machine; without a selector directory the job refuses, with
// one line that says why and what to give.
func TestCompatNeedsSelector(t *testing.T) {
	tr := prebuilt(t)
	_, err := patch.Run(context.Background(), &patch.Config{Policy: policy.Config{CudaCompat: tr.p("compat"), DriverLink: tr.p("driver")}}, []string{tr.p("pkg")})
	require.ErrorContains(t, err, "is cuda_compat's own libcuda, which fails with CUDA error 803 on a driver not older than it")
	require.ErrorContains(t, err, "--cuda-compat-selector")
	require.NotContains(t, err.Error(), "\n")
	_, err = patch.Run(context.Background(), &patch.Config{Selector: patch.CompatSelector{Dir: tr.p("selector")}}, []string{tr.p("pkg")})
	require.ErrorContains(t, err, "needs a cuda_compat directory")
}
