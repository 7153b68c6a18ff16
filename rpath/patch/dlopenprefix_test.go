package patch_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// srcLazyNvrtc is torch's lazy NVRTC loader in libtorch_cpu: it holds
// only the prefixes "libnvrtc-" and "libnvrtc.so." and builds the names
// it dlopens at run time, pip's hashed name first, then the plain one
// with the CUDA major.
const srcLazyNvrtc = `#include <dlfcn.h>
#include <stdio.h>
static const char *const prefixes[] = {"libnvrtc-", "libnvrtc.so."};
int nvrtc_version(int major) {
	char name[64];
	snprintf(name, sizeof name, "%s%s.so.%d", prefixes[0], "0a1b2c3d", major);
	void *h = dlopen(name, RTLD_NOW);
	if (!h) {
		snprintf(name, sizeof name, "%s%d", prefixes[1], major);
		h = dlopen(name, RTLD_NOW);
	}
	if (!h) {
		printf("%s\n", dlerror());
		return -1;
	}
	return ((int (*)(void))dlsym(h, "nvrtcVersion"))();
}
`

// srcNvrtcApp calls the lazy loader with a major it computes.
const srcNvrtcApp = `#include <stdio.h>
int nvrtc_version(int major);
int main(int argc, char **argv) {
	int v = nvrtc_version(argc + 12);
	if (v < 0)
		return 1;
	printf("nvrtc=%d\n", v);
	return 0;
}
`

// nvrtcTree lays out a split CUDA layout: cuda_nvrtc in a store path of
// its own, decoys that look like NVRTC ahead of it in the search path, and
// pkg/lib with libtorch_cpu (the prefixes only), libcublasLt (dlopens the
// whole name "libnvrtc.so.13") and libcublas (imports dlopen, needs
// libcublasLt, holds no NVRTC string).
func nvrtcTree(t *testing.T) *tree {
	t.Helper()
	tr := newTree(t)
	tr.place("store/ccc-cuda_nvrtc/lib/libnvrtc.so.13", cfix.Spec{Soname: "libnvrtc.so.13", Source: "int nvrtcVersion(void) { return 13; }\n"})
	tr.place("store/ccc-cuda_nvrtc/lib/libnvrtc-builtins.so.13.0", cfix.Spec{Soname: "libnvrtc-builtins.so.13.0", Source: "int builtins(void) { return 0; }\n"})
	for _, decoy := range []string{"libnvrtc.so", "libnvrtc.so.13.bak", "libnvrtc_static.so.13", "libnvrtcx.so.13"} {
		tr.place("store/bbb-decoys/lib/"+decoy, cfix.Spec{Soname: decoy, Source: "int nvrtcVersion(void) { return 666; }\n"})
	}
	torch := cfix.Build(t, cfix.Spec{Soname: "libtorch_cpu.so", Libc: true, Source: srcLazyNvrtc})
	cfix.Copy(t, torch, tr.p("pkg/lib/libtorch_cpu.so"))
	lt := cfix.Build(t, cfix.Spec{Soname: "libcublasLt.so.13", Libc: true, Source: `#include <dlfcn.h>
void *lt_nvrtc(void) { return dlopen("libnvrtc.so.13", RTLD_NOW); }
`})
	cfix.Copy(t, lt, tr.p("pkg/lib/libcublasLt.so.13"))
	tr.place("pkg/lib/libcublas.so.13", cfix.Spec{Soname: "libcublas.so.13", Libc: true, Link: []string{lt}, Source: `#include <dlfcn.h>
void *lt_nvrtc(void);
void *cublas_load(const char *name) { return name ? dlopen(name, RTLD_NOW) : lt_nvrtc(); }
`})
	tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcNvrtcApp, Link: []string{torch}})
	return tr
}

// TestDlopenPrefix: libtorch_cpu holds only soname prefixes of NVRTC;
// they match the libraries cuda_nvrtc offers (not the decoys ahead of it),
// so its directory joins libtorch_cpu's RUNPATH with the evidence (the
// file, the prefix, kind "prefix"), no note entry, and the program loads
// NVRTC with the loader cache inhibited. libcublasLt gets the directory
// for the whole name it holds; libcublas, its sibling, which calls dlopen
// but holds no NVRTC string, does not.
func TestDlopenPrefix(t *testing.T) {
	const fail = "libnvrtc.so.13: cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		mode  policy.DlopenMode
		torch string // libtorch_cpu's RUNPATH
		how   string // of its prefix dependency, "" for none
		run   string
	}{
		{policy.DlopenResolve, "{root}/store/ccc-cuda_nvrtc/lib", policy.HowStore, "nvrtc=13"},
		{policy.DlopenReport, "", policy.HowFound, fail},
		{policy.DlopenOff, "", "", fail},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			tr := nvrtcTree(t)
			rep := tr.mustPatch([]string{"pkg"}, patch.Config{
				Search: tr.ps("store/bbb-decoys/lib", "store/ccc-cuda_nvrtc/lib"),
				Policy: policy.Config{
					DriverLinkFor: policy.DriverLinkNone,
					Interpreter:   hostLoader,
					Dlopen:        c.mode,
				},
				Libc: hostLibcDir,
			})
			require.Equal(t, tr.x(c.torch), tr.runpathOf("pkg/lib/libtorch_cpu.so"))
			var got []string
			for _, d := range tr.file(rep, "pkg/lib/libtorch_cpu.so").Deps {
				if d.Source == policy.SourcePrefix {
					require.Equal(t, policy.Evidence{File: tr.p("pkg/lib/libtorch_cpu.so"), String: d.Evidence.String, Kind: policy.EvidencePrefix}, d.Evidence)
					require.Contains(t, []string{"libnvrtc-", "libnvrtc.so."}, d.Evidence.String)
					require.True(t, policy.MatchesPrefix(d.Name, d.Evidence.String), d.Name)
					got = append(got, d.How+" "+d.Dir)
				}
			}
			var want []string
			if c.how != "" {
				want = []string{c.how + " " + tr.p("store/ccc-cuda_nvrtc/lib")}
			}
			require.Equal(t, want, got, "one dependency for the directory, whichever prefix came first")
			if c.mode == policy.DlopenResolve {
				require.Equal(t, tr.p("store/ccc-cuda_nvrtc/lib"), tr.runpathOf("pkg/lib/libcublasLt.so.13"))
				lt := tr.dep(rep, "pkg/lib/libcublasLt.so.13", "libnvrtc.so.13")
				require.Equal(t, policy.Evidence{File: tr.p("pkg/lib/libcublasLt.so.13"), String: "libnvrtc.so.13", Kind: policy.EvidenceWhole}, lt.Evidence)
				require.Equal(t, tr.p("pkg/lib"), tr.runpathOf("pkg/lib/libcublas.so.13"), "no NVRTC string in libcublas: its sibling's name is not its own")
			}
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "nvrtc=13", err == nil, "exit status: %v", err)
		})
	}
}

// TestDlopenPrefixFalsePositives: strings that begin like a soname but
// are no prefix a caller builds names from ("lib", "libc-", "libzz.",
// "libab_"), and a prefix no library offered matches ("libnothere_"),
// add nothing, though the search directories hold libraries that start
// with each of them; "libreal_", held beside them, adds the one directory
// whose library it matches.
func TestDlopenPrefixFalsePositives(t *testing.T) {
	tr := newTree(t)
	for _, l := range []string{"libanything.so.1", "libc-2.so.6", "libzz.so.1", "libzzz.so.1", "libab_x.so.1", "libnothere.so.1", "libnothereX_y.so.1"} {
		tr.place("store/bbb-decoys/lib/"+l, cfix.Spec{Soname: l, Source: "int x(void) { return 0; }\n"})
	}
	tr.place("store/ddd-real/lib/libreal_x.so.1", cfix.Spec{Soname: "libreal_x.so.1", Source: "int x(void) { return 0; }\n"})
	tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: `#include <dlfcn.h>
#include <stdio.h>
static const char *const s[] = {"lib", "libc-", "libzz.", "libab_", "libnothere_", "libreal_"};
int main(int argc, char **argv) {
	char name[64];
	snprintf(name, sizeof name, "%s%d", s[argc % 6], argc);
	return dlopen(name, RTLD_NOW) ? 0 : 1;
}
`})
	rep := tr.mustPatch([]string{"pkg"}, patch.Config{
		Search: tr.ps("store/bbb-decoys/lib", "store/ddd-real/lib"),
		Policy: policy.Config{
			DriverLinkFor: policy.DriverLinkNone,
			Interpreter:   hostLoader,
			Dlopen:        policy.DlopenResolve,
		},
		Libc: hostLibcDir,
	})
	require.Equal(t, tr.p("store/ddd-real/lib"), tr.runpathOf("pkg/bin/app"))
	var got []string
	for _, d := range tr.file(rep, "pkg/bin/app").Deps {
		if strings.HasPrefix(d.Dir, tr.p("store")) {
			got = append(got, d.Source+" "+d.Name+" "+d.Evidence.String)
		}
	}
	require.Equal(t, []string{"dlopen-prefix libreal_x.so.1 libreal_"}, got)
}

// TestDlopenPrefixThroughWrapper is PyTorch as it is: libtorch_cuda holds
// the NVRTC prefixes and builds the name, and libtorch_cpu, which it
// links to, makes the dlopen call (at::DynamicLibrary) and holds no NVRTC
// string. Both import dlopen. NVRTC's directory joins libtorch_cpu's
// RUNPATH, the evidence naming libtorch_cuda's string, and the program
// loads NVRTC.
func TestDlopenPrefixThroughWrapper(t *testing.T) {
	tr := nvrtcTree(t)
	cpu := cfix.Build(t, cfix.Spec{Soname: "libtorch_cpu.so", Libc: true, Source: `#include <dlfcn.h>
void *dynlib(const char *name) { return dlopen(name, RTLD_NOW); }
`})
	cfix.Copy(t, cpu, tr.p("pkg/lib/libtorch_cpu.so"))
	cuda := cfix.Build(t, cfix.Spec{Soname: "libtorch_cuda.so", Libc: true, Link: []string{cpu}, Source: `#include <dlfcn.h>
#include <stdio.h>
void *dynlib(const char *name);
static const char *const prefixes[] = {"libnvrtc-", "libnvrtc.so."};
int nvrtc_version(int major) {
	char name[64];
	snprintf(name, sizeof name, "%s%d", prefixes[1], major);
	void *h = dynlib(name);
	if (!h) {
		printf("%s\n", dlerror());
		return -1;
	}
	return ((int (*)(void))dlsym(h, "nvrtcVersion"))() + (dlopen("libnothing.so.1", RTLD_LAZY) != 0);
}
`})
	cfix.Copy(t, cuda, tr.p("pkg/lib/libtorch_cuda.so"))
	tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcNvrtcApp, Link: []string{cuda, cpu}})
	rep := tr.mustPatch([]string{"pkg"}, patch.Config{
		Search: tr.ps("store/bbb-decoys/lib", "store/ccc-cuda_nvrtc/lib"),
		Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone, Interpreter: hostLoader},
		Libc:   hostLibcDir,
	})
	require.Contains(t, tr.runpathOf("pkg/lib/libtorch_cpu.so"), tr.p("store/ccc-cuda_nvrtc/lib"))
	var from []string
	for _, d := range tr.file(rep, "pkg/lib/libtorch_cpu.so").Deps {
		if d.Dir == tr.p("store/ccc-cuda_nvrtc/lib") {
			from = append(from, d.Evidence.File+" "+d.Evidence.String)
		}
	}
	require.NotEmpty(t, from)
	for _, f := range from {
		require.True(t, strings.HasPrefix(f, tr.p("pkg/lib/libtorch_cuda.so")+" libnvrtc"), f)
	}
	out, err := runApp(t, tr.p("pkg/bin/app"))
	require.NoError(t, err, out)
	require.Equal(t, "nvrtc=13", out)
}
