package patch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// libloader calls dlopen for whoever asks; libuser holds the name
// and asks it (it imports dlsym, not dlopen); the program only calls
// libuser.
const (
	srcLoader = `#include <dlfcn.h>
void *load(const char *name) { return dlopen(name, RTLD_NOW); }
`
	srcUser = `#include <dlfcn.h>
void *load(const char *name);
int use(void) {
	void *h = load("libplugin.so.1");
	if (!h)
		return -1;
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	return plugin();
}
`
	srcUserApp = `#include <dlfcn.h>
#include <stdio.h>
int use(void);
int main(void) {
	int r = use();
	if (r < 0) {
		printf("%s\n", dlerror());
		return 1;
	}
	printf("plugin=%d\n", r);
	return 0;
}
`
)

// loaderTree lays out pkg/lib/libloader.so and the plugin in a store
// path of its own, and returns the two libraries built, to link against.
func loaderTree(t *testing.T) (tr *tree, loader, plugin string) {
	t.Helper()
	tr = newTree(t)
	loader = cfix.Build(t, cfix.Spec{Soname: "libloader.so", Libc: true, Source: srcLoader})
	plugin = cfix.Build(t, cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	cfix.Copy(t, loader, tr.p("pkg/lib/libloader.so"))
	cfix.Copy(t, plugin, tr.p("store/aaa-plugin/lib/libplugin.so.1"))
	return tr, loader, plugin
}

// callerTree is loaderTree with pkg/{bin/app, lib/libuser.so}.
func callerTree(t *testing.T) *tree {
	t.Helper()
	tr, loader, _ := loaderTree(t)
	user := cfix.Build(t, cfix.Spec{Soname: "libuser.so", Libc: true, Source: srcUser, Link: []string{loader}})
	cfix.Copy(t, user, tr.p("pkg/lib/libuser.so"))
	tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcUserApp, Link: []string{user, loader}})
	return tr
}

// TestDlopenCaller: the name libuser holds goes to the RUNPATH of
// libloader, the library in libuser's DT_NEEDED closure that calls
// dlopen (glibc searches the caller's RUNPATH), after its DT_NEEDED
// directories, with no note entry; libuser, which cannot make the call,
// reports the name and keeps its RUNPATH. libloader gets nothing else
// (pkg/lib, where libuser lies, is no name it or libuser can form). The
// program, run with the loader cache inhibited and no LD_LIBRARY_PATH,
// loads the plugin only then.
func TestDlopenCaller(t *testing.T) {
	const fail = "libplugin.so.1: cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		mode          policy.DlopenMode
		loaderRunpath string
		run           string
		loaderDep     string // HOW FROM of libplugin.so.1 in libloader's decisions
		userDep       string // HOW of libplugin.so.1 in libuser's decisions
	}{
		{policy.DlopenResolve, "{root}/store/aaa-plugin/lib", "plugin=7", "resolved {root}/pkg/lib/libuser.so", "found"},
		{policy.DlopenReport, "", fail, "", "found"},
		{policy.DlopenOff, "", fail, "", ""},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			tr := callerTree(t)
			rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, c.mode))
			require.Empty(t, rep.Missing)
			require.Equal(t, tr.x(c.loaderRunpath), tr.runpathOf("pkg/lib/libloader.so"))
			require.Equal(t, tr.p("pkg/lib"), tr.runpathOf("pkg/lib/libuser.so"), "libuser cannot call dlopen: its RUNPATH is its DT_NEEDED's")
			require.Equal(t, tr.p("pkg/lib"), tr.runpathOf("pkg/bin/app"))
			got := func(rel string, from bool) string {
				for _, d := range tr.file(rep, rel).Deps {
					if d.Name == "libplugin.so.1" {
						require.Equal(t, policy.SourceStrings, d.Source)
						require.Equal(t, tr.p("store/aaa-plugin/lib/libplugin.so.1"), d.Path)
						if from {
							return d.How + " " + d.From
						}
						require.Empty(t, d.From)
						return d.How
					}
				}
				return ""
			}
			require.Equal(t, tr.x(c.loaderDep), got("pkg/lib/libloader.so", true))
			require.Equal(t, c.userDep, got("pkg/lib/libuser.so", false))
			require.Empty(t, got("pkg/bin/app", false), "the program neither holds the name nor calls dlopen")

			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "plugin=7", err == nil, "exit status: %v", err)

			// No note entry for a name the caller does not hold (lint
			// reads a note against the file's own names).
			ef, err := elfedit.Open(tr.p("pkg/lib/libloader.so"))
			require.NoError(t, err)
			nt := ldso.ReadNote(ef)
			ef.Close()
			if nt != nil {
				_, ok := nt.Cache.Lookup("libplugin.so.1")
				require.False(t, ok, "%v", nt.Cache)
			}
		})
	}
}

// TestDlopenCallerReadsOnce: a caller decided again with the names its
// holders hand it takes its own dlopen discovery from its first
// decision: each file's read-only data is read once. On 481997f the
// caller's was read twice (on the CUDA corpus, 31 MB of 138 MB read).
func TestDlopenCallerReadsOnce(t *testing.T) {
	tr := callerTree(t)
	reads := map[string]int{}
	cfg := dlopenConfig(tr, policy.DlopenResolve)
	patch.CountDiscovers(&cfg, reads)
	rep, err := patch.Run(context.Background(), &cfg, tr.ps("pkg"))
	require.NoError(t, err)
	require.Equal(t, tr.x("{root}/store/aaa-plugin/lib"), tr.runpathOf("pkg/lib/libloader.so"), "the premise: the caller was decided again with its holder's name")
	require.Equal(t, "resolved "+tr.p("pkg/lib/libuser.so"), func() string {
		for _, d := range tr.file(rep, "pkg/lib/libloader.so").Deps {
			if d.Name == "libplugin.so.1" {
				return d.How + " " + d.From
			}
		}
		return ""
	}())
	require.Equal(t, 1, reads[tr.p("pkg/lib/libloader.so")], "%v", reads)
	for p, n := range reads {
		require.Equal(t, 1, n, "%s read %d times", p, n)
	}
}

// TestDlopenCallerHolderRunpathIsNotEnough: the fixture fails as the
// issue's PyTorch run did with the plugin's directory
// in the holder's RUNPATH only (the rule discovery had): the caller's
// RUNPATH is what glibc searches.
func TestDlopenCallerHolderRunpathIsNotEnough(t *testing.T) {
	const fail = "libplugin.so.1: cannot open shared object file: No such file or directory"
	tr := callerTree(t)
	out, err := runApp(t, tr.p("pkg/bin/app"))
	require.Error(t, err)
	require.Contains(t, out, "cannot open shared object file") // libuser.so itself: no RUNPATH yet
	tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, policy.DlopenOff))
	for _, rel := range []string{"pkg/lib/libuser.so", "pkg/bin/app"} {
		rp := tr.runpathOf(rel) + ":" + tr.p("store/aaa-plugin/lib")
		_, err = elfedit.EditFile(tr.p(rel), elfedit.Edit{SetPath: &rp}, elfedit.Options{})
		require.NoError(t, err)
	}
	out, err = runApp(t, tr.p("pkg/bin/app"))
	require.Error(t, err)
	require.Equal(t, fail, out)
}

// srcVersionedApp spells the plugin's name without its version and
// appends it at run time, as cuDNN does with its sub-libraries.
const srcVersionedApp = `#include <dlfcn.h>
#include <stdio.h>
static const char base[] = "libvplug.so";
int main(int argc, char **argv) {
	char name[64];
	snprintf(name, sizeof name, "%s.%d", base, argc);
	void *h = dlopen(name, RTLD_NOW);
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	printf("plugin=%d\n", plugin());
	return 0;
}
`

// TestDlopenVersioned: "libvplug.so" resolves to the directory of the
// first libvplug.so.N of the index (the search directories in order:
// bbb-decoys has only look-alikes), reported as "versioned"; with resolve
// the directory is in the RUNPATH, no note entry names either spelling,
// and the program loads libvplug.so.1.
func TestDlopenVersioned(t *testing.T) {
	const fail = "libvplug.so.1: cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		mode    policy.DlopenMode
		ignore  bool // --ignore-missing '*': a versioned file found is not missing
		runpath string
		how     string
		run     string
	}{
		{policy.DlopenResolve, false, "{root}/store/aaa-plugin/lib", policy.HowVersioned, "plugin=9"},
		{policy.DlopenResolve, true, "{root}/store/aaa-plugin/lib", policy.HowVersioned, "plugin=9"},
		{policy.DlopenReport, false, "", policy.HowFound, fail},
		{policy.DlopenOff, false, "", "", fail},
	} {
		t.Run(fmt.Sprintf("%s/ignore=%v", c.mode, c.ignore), func(t *testing.T) {
			tr := newTree(t)
			tr.place("store/aaa-plugin/lib/libvplug.so.1", cfix.Spec{Soname: "libvplug.so.1", Source: "int plugin(void) { return 9; }\n"})
			tr.place("store/aaa-plugin/lib/libvplug.so.2", cfix.Spec{Soname: "libvplug.so.2", Source: "int plugin(void) { return 2; }\n"})
			for _, decoy := range []string{"libvplug.so1", "libvplug.so.1.bak", "libvplug_x.so.1", "libvplug.so.x"} {
				tr.place("store/bbb-decoys/lib/"+decoy, cfix.Spec{Soname: decoy, Source: "int plugin(void) { return 666; }\n"})
			}
			tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcVersionedApp})
			opts := dlopenConfig(tr, c.mode)
			if c.ignore {
				opts.Policy.IgnoreMissing = append(opts.Policy.IgnoreMissing, "*")
			}
			rep := tr.mustPatch([]string{"pkg"}, opts)
			require.Empty(t, rep.Missing)
			var deps []string
			for _, d := range tr.file(rep, "pkg/bin/app").Deps {
				if d.Source == policy.SourceStrings {
					deps = append(deps, d.Name+"="+d.How+" "+d.Path)
				}
			}
			var want []string
			if c.how != "" {
				want = []string{"libvplug.so=" + c.how + " " + tr.p("store/aaa-plugin/lib/libvplug.so.1")}
			}
			require.Equal(t, want, deps)
			require.Equal(t, tr.x(c.runpath), tr.runpathOf("pkg/bin/app"))
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "plugin=9", err == nil, "exit status: %v", err)
			ef, err := elfedit.Open(tr.p("pkg/bin/app"))
			require.NoError(t, err)
			nt := ldso.ReadNote(ef)
			ef.Close()
			if nt != nil {
				for _, n := range []string{"libvplug.so", "libvplug.so.1", "libvplug.so.2"} {
					_, ok := nt.Cache.Lookup(n)
					require.False(t, ok, "%s: %v", n, nt.Cache)
				}
			}
		})
	}
}

// TestDlopenCallerDriver: a driver library name held by libuser makes
// libloader, its possible caller, need the driver link under
// --driver-link-for needed; the driver's library is loaded through it.
func TestDlopenCallerDriver(t *testing.T) {
	for _, c := range []struct {
		mode    policy.DlopenMode
		runpath string
		run     string
	}{
		{policy.DlopenResolve, "{root}/driver", "plugin=5"},
		{policy.DlopenOff, "", "libcuda.so.1: cannot open shared object file: No such file or directory"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			tr := newTree(t)
			loader := cfix.Build(t, cfix.Spec{Soname: "libloader.so", Libc: true, Source: srcLoader})
			user := cfix.Build(t, cfix.Spec{Soname: "libuser.so", Libc: true, Source: strings.Replace(srcUser, "libplugin.so.1", "libcuda.so.1", 1), Link: []string{loader}})
			cfix.Copy(t, loader, tr.p("pkg/lib/libloader.so"))
			cfix.Copy(t, user, tr.p("pkg/lib/libuser.so"))
			tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcUserApp, Link: []string{user, loader}})
			tr.place("driver/libcuda.so.1", cfix.Spec{Soname: "libcuda.so.1", Source: "int plugin(void) { return 5; }\n"})
			tr.mustPatch([]string{"pkg"},
				patch.Config{
					Policy: policy.Config{
						DriverLink:    tr.p("driver"),
						DriverLinkFor: policy.DriverLinkNeeded,
						Interpreter:   hostLoader,
						Dlopen:        c.mode,
					},
					Libc: hostLibcDir,
				})
			require.Equal(t, tr.x(c.runpath), tr.runpathOf("pkg/lib/libloader.so"))
			require.Equal(t, tr.p("pkg/lib"), tr.runpathOf("pkg/lib/libuser.so"), "libuser cannot call dlopen")
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "plugin=5", err == nil, "exit status: %v", err)
		})
	}
}

// A holder that no DT_NEEDED links to its caller, as PyTorch's
// libcaffe2_nvrtc holds "libnvrtc.so.13" and libtorch_cpu calls dlopen:
// the program has libloader dlopen libholder, and libholder's use()
// calls load() (bound through the global scope, not a DT_NEEDED) with the
// plugin's name.
const (
	srcHolder = `#include <dlfcn.h>
void *load(const char *name);
int use(void) {
	void *h = load("libplugin.so.1");
	if (!h)
		return -1;
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	return plugin();
}
`
	srcHolderApp = `#include <dlfcn.h>
#include <stdio.h>
void *load(const char *name);
int main(void) {
	void *h = load("libholder.so");
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	int (*use)(void) = (int (*)(void))dlsym(h, "use");
	int r = use();
	if (r < 0) {
		printf("%s\n", dlerror());
		return 1;
	}
	printf("plugin=%d\n", r);
	return 0;
}
`
)

// TestDlopenCallerSameOutput: libholder's name does not reach
// libloader, the dlopen caller of the same output: neither needs the
// other, and libloader holds no string that forms the name (the rule that
// gave every caller its siblings' names added directories nothing loads).
// The program's own name, "libholder.so", does reach libloader under
// resolve (the program links to it and cannot call dlopen), so the
// program gets as far as libholder's load and fails there.
func TestDlopenCallerSameOutput(t *testing.T) {
	for _, c := range []struct {
		mode          policy.DlopenMode
		loaderRunpath string
		run           string
	}{
		{policy.DlopenResolve, "{root}/pkg/lib", "libplugin.so.1: cannot open shared object file: No such file or directory"},
		{policy.DlopenReport, "", "libholder.so: cannot open shared object file: No such file or directory"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			tr, loader, _ := loaderTree(t)
			tr.place("pkg/lib/libholder.so", cfix.Spec{Soname: "libholder.so", Libc: true, Source: srcHolder})
			tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcHolderApp, Link: []string{loader}})
			rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, c.mode))
			require.Equal(t, tr.x(c.loaderRunpath), tr.runpathOf("pkg/lib/libloader.so"))
			require.Empty(t, tr.runpathOf("pkg/lib/libholder.so"), "libholder cannot call dlopen and needs nothing but libc")
			for _, rel := range []string{"pkg/lib/libloader.so", "pkg/lib/libholder.so"} {
				for _, d := range tr.file(rep, rel).Deps {
					require.NotEqual(t, "libplugin.so.1", d.Name, rel)
				}
			}
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Error(t, err)
		})
	}
}

// srcBuiltApp dlopens, through libloader, a name it builds at run time
// and spells nowhere, as PyTorch's jiterator does for NVRTC: "libplugi"
// is the 64-bit immediate of a mov (PyTorch 2.11's libtorch_cuda holds
// "libnvrtc" so), the rest a format.
const srcBuiltApp = `#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
void *load(const char *name);
int main(int argc, char **argv) {
	char name[32];
	uint64_t word = 0x6967756c7062696cULL; /* "libplugi" */
	memcpy(name, &word, 8);
	snprintf(name + 8, sizeof name - 8, "%s.so.%d", argc > 5 ? argv[1] : "n", argc);
	void *h = load(name);
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	printf("plugin=%d\n", plugin());
	return 0;
}
`

// srcFormattedApp is srcBuiltApp with the whole name from a format and
// an argument: no code and no string of it forms the library's name.
const srcFormattedApp = `#include <dlfcn.h>
#include <stdio.h>
void *load(const char *name);
int main(int argc, char **argv) {
	char name[32];
	snprintf(name, sizeof name, "lib%s.so.%d", argc > 5 ? argv[1] : "plugin", argc);
	void *h = load(name);
	if (!h) {
		printf("%s\n", dlerror());
		return 1;
	}
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	printf("plugin=%d\n", plugin());
	return 0;
}
`

// TestDlopenCallerOutputNeeded: a name built at run time in code, held
// by no string (PyTorch 2.11's libtorch_cuda builds "libnvrtc.so.13"
// from a mov's immediate, and libtorch_cpu's at::DynamicLibrary opens
// it), reaches the caller's RUNPATH when another file of its output,
// libwrap, needs that library and the code of the caller or of a file of
// its output that links to it (the app) holds the name's first eight
// bytes: the directory comes with that word in the app as its evidence
// (kind code), libwrap in From, no note entry. Without it jiterator
// failed on the H200 (docs/gpu-proof.md). A name no code forms (the
// formatted app) gets nothing, though libwrap needs it: the sibling's
// needs are no evidence alone. Under DlopenReport nothing is added.
func TestDlopenCallerOutputNeeded(t *testing.T) {
	const fail = "libplugin.so.1: cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		name          string
		mode          policy.DlopenMode
		app           string
		loaderRunpath string
		run           string
	}{
		{"code", policy.DlopenResolve, srcBuiltApp, "{root}/store/aaa-plugin/lib", "plugin=7"},
		{"format", policy.DlopenResolve, srcFormattedApp, "", fail},
		{"report", policy.DlopenReport, srcBuiltApp, "", fail},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, loader, plugin := loaderTree(t)
			tr.place("pkg/lib/libwrap.so", cfix.Spec{Soname: "libwrap.so", Source: "int wrap(void) { return 0; }\n", Link: []string{plugin}})
			tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: c.app, Link: []string{loader}})
			// First dry runs with the code read in parts at once (as a
			// big library's is): the two readers (libloader and the app)
			// in 1 to 5 parts each, the app opened for each part;
			// each decides as the whole does.
			var dry []*patch.File
			var opened []int
			for _, jobs := range []int{2, 4, 6, 8, 10} {
				cfg := dlopenConfig(tr, c.mode)
				cfg.Jobs, cfg.Write.DryRun = jobs, true
				patch.SetCodeShare(&cfg, 1)
				opens := map[string]int{}
				patch.CountOpens(&cfg, opens)
				r, err := tr.patch([]string{"pkg"}, cfg)
				require.NoError(t, err)
				dry = append(dry, tr.file(r, "pkg/lib/libloader.so"))
				opened = append(opened, opens[tr.p("pkg/bin/app")])
			}
			rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, c.mode))
			for k, d := range dry {
				require.Equal(t, tr.file(rep, "pkg/lib/libloader.so").Deps, d.Deps, "%d parts", k+1)
				if c.mode == policy.DlopenResolve {
					// Each scan of the app's code opens it once a part.
					require.Greater(t, opened[1], opened[0])
					require.Equal(t, opened[0]+k*(opened[1]-opened[0]), opened[k], "the app opened for each of %d parts", k+1)
				}
			}
			require.Equal(t, tr.x(c.loaderRunpath), tr.runpathOf("pkg/lib/libloader.so"))
			var got []string
			for _, d := range tr.file(rep, "pkg/lib/libloader.so").Deps {
				if d.Source == policy.SourceSibling {
					got = append(got, d.Name+" "+d.How+" "+d.From)
					require.Equal(t, policy.Evidence{File: tr.p("pkg/bin/app"), String: "libplugi", Kind: policy.EvidenceCode}, d.Evidence)
				}
			}
			if c.name == "code" {
				require.Equal(t, []string{tr.x("libplugin.so.1 resolved {root}/pkg/lib/libwrap.so")}, got)
			} else {
				require.Empty(t, got)
			}
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "plugin=7", err == nil, "exit status: %v", err)
		})
	}
}
