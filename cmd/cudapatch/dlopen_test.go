package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// srcPluginApp dlopens libplugin.so.1 and, optionally, libmissing.so.3 by
// string constants; a soname in a message and a format are decoys.
const srcPluginApp = `#include <dlfcn.h>
#include <stdio.h>
static const char msg[] = "cannot load libother.so: install it";
int main(int argc, char **argv) {
	char fmt[64];
	snprintf(fmt, sizeof fmt, "libfmt.so.%d", argc);
	dlopen("libmissing.so.3", RTLD_LAZY);
	void *h = dlopen("libplugin.so.1", RTLD_NOW);
	if (!h) {
		printf("%s (%s %s)\n", dlerror(), msg, fmt);
		return 1;
	}
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	printf("plugin=%d\n", plugin());
	return 0;
}
`

// TestDlopenSurfaces patches a program that dlopens a library of another
// store path with the default --dlopen, runs it with the loader cache
// inhibited, and checks every surface: -v, --json, print (text and JSON,
// with the note entry), lint (the note's dlopen entry is no leftover) and
// explain (the dlopen found through the note).
func TestDlopenSurfaces(t *testing.T) {
	c := newCLITree(t)
	c.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	c.place("store/bbb-decoys/lib/libother.so", cfix.Spec{Soname: "libother.so", Source: "int plugin(void) { return 666; }\n"})
	c.place("store/bbb-decoys/lib/libfmt.so.1", cfix.Spec{Soname: "libfmt.so.1", Source: "int plugin(void) { return 666; }\n"})
	c.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp})
	flags := []string{"--interpreter", sysLoader, "--libc", "/lib/x86_64-linux-gnu", "--driver-link-for", "none",
		"--search", "{root}/store/bbb-decoys/lib", "--search", "{root}/store/aaa-plugin/lib"}

	code, stdout, stderr := c.runCLI(nil, append(slices.Clone(flags), "--json", "--dry-run", "{root}/pkg")...)
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Files []struct {
			RunPath string `json:"runpath"`
			Deps    []struct{ Name, Source, How string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Files, 1)
	assert.Equal(t, c.p("store/aaa-plugin/lib"), rep.Files[0].RunPath)
	var deps []string
	for _, d := range rep.Files[0].Deps {
		deps = append(deps, d.Name+" "+d.Source+" "+d.How)
	}
	slices.Sort(deps)
	assert.Equal(t, []string{"libc.so.6 needed libc", "libmissing.so.3 dlopen-string unresolved", "libplugin.so.1 dlopen-string resolved"}, deps)

	code, _, stderr = c.runCLI(nil, append(slices.Clone(flags), "-v", "{root}/pkg")...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "needed=libmissing.so.3 source=dlopen-string how=unresolved")
	assert.Contains(t, stderr, "cudapatch: patched 1 file, 0 unchanged, 0 skipped, 0 failed, 0 missing dependencies")
	assert.Equal(t, "plugin=7", runInhibited(t, c.p("pkg/bin/app")))

	code, stdout, stderr = c.runCLI(nil, "print", "{root}/pkg/bin/app")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "  dlopen-str:  libmissing.so.3\n")
	assert.Contains(t, stdout, "  dlopen-str:  libplugin.so.1\n")
	assert.NotContains(t, stdout, "libother")
	assert.Contains(t, stdout, "libplugin.so.1 ="+c.p("store/aaa-plugin/lib/libplugin.so.1")+"\n")
	code, stdout, stderr = c.runCLI(nil, "print", "--json", "{root}/pkg/bin/app")
	require.Equal(t, 0, code, stderr)
	var pr []struct {
		DlopenStrings []string `json:"dlopen_strings"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &pr))
	require.Len(t, pr, 1)
	got := slices.Sorted(slices.Values(pr[0].DlopenStrings))
	assert.Equal(t, []string{"libmissing.so.3", "libplugin.so.1"}, got)

	code, stdout, stderr = c.runCLI(nil, "lint", "--interpreter", sysLoader, "--enable", "all", "{root}/pkg")
	require.Contains(t, stdout, "1 ELF file checked", "code %d, stderr %s", code, stderr)
	assert.NotContains(t, stdout, "CP014", "the note's entry for a dlopen name agrees with the RUNPATH")
	assert.NotContains(t, stdout, "CP015", "the note's entry for a dlopen name is no leftover")

	code, stdout, stderr = c.runCLI(nil, "explain", "{root}/pkg/bin/app")
	require.Equal(t, 0, code, "a dlopen name found nowhere is no failure: %s %s", stdout, stderr)
	assert.Contains(t, stdout, "    dlopen libplugin.so.1 => "+c.p("store/aaa-plugin/lib/libplugin.so.1")+" (ldcache of "+c.p("pkg/bin/app")+")\n")
	assert.Contains(t, stdout, "    dlopen libmissing.so.3 => not found\n")
	code, stdout, _ = c.runCLI(nil, "explain", "--loader", "stock", "{root}/pkg/bin/app")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "    dlopen libplugin.so.1 => "+c.p("store/aaa-plugin/lib/libplugin.so.1")+" (runpath of "+c.p("pkg/bin/app")+")\n")
}

// runInhibited runs a program through the host's loader with its cache
// inhibited and without LD_LIBRARY_PATH: only RUNPATHs decide.
func runInhibited(t *testing.T, exe string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sysLoader, "--inhibit-cache", exe)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "LD_LIBRARY_PATH=") || strings.HasPrefix(kv, "LD_PRELOAD=")
	})
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// TestDlopenNoteEntriesLintClean: a .note.dlopen name found gets a
// resolution-note entry as a DT_NEEDED name does, and lint takes it for
// what it is, not for a leftover.
func TestDlopenNoteEntriesLintClean(t *testing.T) {
	c := newCLITree(t)
	c.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	c.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp, Dlopen: `[{"soname":["libplugin.so.1"]}]`})
	code, _, stderr := c.runCLI(nil, "--interpreter", sysLoader, "--libc", "/lib/x86_64-linux-gnu", "--driver-link-for", "none",
		"--search", "{root}/store/aaa-plugin/lib", "{root}/pkg")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "plugin=7", runInhibited(t, c.p("pkg/bin/app")))
	code, stdout, stderr := c.runCLI(nil, "print", "{root}/pkg/bin/app")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "libplugin.so.1 ="+c.p("store/aaa-plugin/lib/libplugin.so.1")+"\n")
	assert.NotContains(t, stdout, "dlopen-str:", "a file with .note.dlopen gets no discovery")
	code, stdout, stderr = c.runCLI(nil, "lint", "--interpreter", sysLoader, "--enable", "all", "{root}/pkg")
	require.Contains(t, stdout, "1 ELF file checked", "code %d, stderr %s", code, stderr)
	assert.NotContains(t, stdout, "CP014")
	assert.NotContains(t, stdout, "CP015")
}

// TestAutoPatchelfNoDiscovery: the auto-patchelf drop-in does what
// auto-patchelf does, which reads no strings: the program's dlopen target
// gets no RUNPATH entry there, and one with the main job.
func TestAutoPatchelfNoDiscovery(t *testing.T) {
	c := newCLITree(t)
	env := c.bintools()
	c.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	c.place("ap/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp})
	c.place("main/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp})
	code, _, stderr := c.runCLI(env, "auto-patchelf", "--paths", "{root}/ap", "--libs", "{root}/store/aaa-plugin/lib", "{root}/glibc/lib",
		"--driver-link-for", "none")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "", c.runpath("ap/bin/app"))
	code, _, stderr = c.runCLI(env, "--search", "{root}/store/aaa-plugin/lib", "--search", "{root}/glibc/lib",
		"--driver-link-for", "none", "{root}/main")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, c.p("store/aaa-plugin/lib"), c.runpath("main/bin/app"))
}

// TestDlopenCallerCLI: a name held by libuser, dlopened by libloader
// (in libuser's DT_NEEDED closure), reaches libloader's RUNPATH (and
// nothing else) through the CLI's default --dlopen; --json says from
// which file, and which string of which file is the evidence; the program
// runs with the loader cache inhibited; lint finds nothing to say about
// the caller's RUNPATH or note.
func TestDlopenCallerCLI(t *testing.T) {
	c := newCLITree(t)
	loader := cfix.Build(t, cfix.Spec{Soname: "libloader.so", Libc: true, Source: "#include <dlfcn.h>\nvoid *load(const char *name) { return dlopen(name, RTLD_NOW); }\n"})
	user := cfix.Build(t, cfix.Spec{Soname: "libuser.so", Libc: true, Link: []string{loader}, Source: `#include <dlfcn.h>
void *load(const char *name);
int use(void) {
	void *h = load("libplugin.so.1");
	return h ? ((int (*)(void))dlsym(h, "plugin"))() : -1;
}
`})
	cfix.Copy(t, loader, c.p("pkg/lib/libloader.so"))
	cfix.Copy(t, user, c.p("pkg/lib/libuser.so"))
	c.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Link: []string{user, loader}, Source: `#include <dlfcn.h>
#include <stdio.h>
int use(void);
int main(void) { int r = use(); if (r < 0) { printf("%s\n", dlerror()); return 1; } printf("plugin=%d\n", r); return 0; }
`})
	c.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	flags := []string{"--interpreter", sysLoader, "--libc", "/lib/x86_64-linux-gnu", "--driver-link-for", "none",
		"--search", "{root}/store/aaa-plugin/lib"}
	code, stdout, stderr := c.runCLI(nil, append(slices.Clone(flags), "--json", "--dry-run", "{root}/pkg")...)
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Files []struct {
			Path    string `json:"path"`
			RunPath string `json:"runpath"`
			Deps    []struct {
				Name, Source, How, From string
				Evidence                *struct{ File, String, Kind string }
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	got := map[string]string{}
	for _, f := range rep.Files {
		for _, d := range f.Deps {
			if d.Name == "libplugin.so.1" {
				require.NotNil(t, d.Evidence, f.Path)
				got[f.Path] = d.Source + " " + d.How + " " + d.From + " | " + f.RunPath + " | " + d.Evidence.Kind + " " + d.Evidence.String + " in " + d.Evidence.File
			}
		}
	}
	assert.Equal(t, map[string]string{
		c.p("pkg/lib/libloader.so"): "dlopen-string resolved " + c.p("pkg/lib/libuser.so") + " | " + c.p("store/aaa-plugin/lib") + " | whole libplugin.so.1 in " + c.p("pkg/lib/libuser.so"),
		c.p("pkg/lib/libuser.so"):   "dlopen-string found  | " + c.p("pkg/lib") + " | whole libplugin.so.1 in " + c.p("pkg/lib/libuser.so"),
	}, got)

	code, _, stderr = c.runCLI(nil, append(slices.Clone(flags), "{root}/pkg")...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "plugin=7", runInhibited(t, c.p("pkg/bin/app")))
	code, stdout, stderr = c.runCLI(nil, "lint", "--interpreter", sysLoader, "--enable", "all", "{root}/pkg")
	require.Contains(t, stdout, "3 ELF files checked", "code %d, stderr %s", code, stderr)
	// The tree lies under /tmp, which lint calls a build directory
	// (CP005, CP017): nothing else.
	for _, l := range strings.Split(stdout, "\n") {
		if strings.Contains(l, " CP0") {
			assert.Regexp(t, ` (CP005|CP017) `, l)
		}
	}
	assert.Contains(t, stdout, "libloader.so\n  error   CP005", "lint reads the caller's RUNPATH")
}

// TestDlopenEvidenceCLI: a library holding only NVRTC's soname prefixes
// gets cuda_nvrtc's directory; print shows the prefixes, --json the
// evidence, and explain --evidence, on the patched file, which string
// each RUNPATH entry serves (and only with the flag).
func TestDlopenEvidenceCLI(t *testing.T) {
	c := newCLITree(t)
	c.place("store/ccc-cuda_nvrtc/lib/libnvrtc.so.13", cfix.Spec{Soname: "libnvrtc.so.13", Source: "int nvrtcVersion(void) { return 13; }\n"})
	c.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	c.place("pkg/lib/libtorch_cpu.so", cfix.Spec{Soname: "libtorch_cpu.so", Libc: true, Source: `#include <dlfcn.h>
#include <stdio.h>
static const char prefix[] = "libnvrtc.so.";
void *lazy(int major) {
	char name[32];
	snprintf(name, sizeof name, "%s%d", prefix, major);
	return dlopen(name, RTLD_NOW) ? dlopen("libplugin.so.1", RTLD_NOW) : 0;
}
`})
	code, stdout, stderr := c.runCLI(nil, "print", "{root}/pkg/lib/libtorch_cpu.so")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "  dlopen-str:  libplugin.so.1\n  dlopen-pfx:  libnvrtc.so.\n")

	flags := []string{"--interpreter", sysLoader, "--libc", "/lib/x86_64-linux-gnu", "--driver-link-for", "none",
		"--search", "{root}/store/ccc-cuda_nvrtc/lib", "--search", "{root}/store/aaa-plugin/lib"}
	code, stdout, stderr = c.runCLI(nil, append(slices.Clone(flags), "--json", "{root}/pkg")...)
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Files []struct {
			RunPath string `json:"runpath"`
			Deps    []struct {
				Name, Source, How, Dir string
				Evidence               struct{ File, String, Kind string }
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Len(t, rep.Files, 1)
	assert.Equal(t, c.p("store/aaa-plugin/lib")+":"+c.p("store/ccc-cuda_nvrtc/lib"), rep.Files[0].RunPath)
	var got []string
	for _, d := range rep.Files[0].Deps {
		if d.Evidence.Kind != "" {
			got = append(got, d.Name+" "+d.Source+" "+d.How+" "+d.Evidence.Kind+" "+d.Evidence.String+" "+d.Evidence.File)
		}
	}
	lib := c.p("pkg/lib/libtorch_cpu.so")
	assert.Equal(t, []string{
		"libplugin.so.1 dlopen-string resolved whole libplugin.so.1 " + lib,
		"libnvrtc.so.13 dlopen-prefix resolved prefix libnvrtc.so. " + lib,
	}, got)

	code, stdout, stderr = c.runCLI(nil, "explain", "--evidence", "{root}/pkg/lib/libtorch_cpu.so")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "RUNPATH entries, and what of this file's own names each serves:\n"+
		"  "+c.p("store/aaa-plugin/lib")+": libplugin.so.1 (dlopen whole \"libplugin.so.1\")\n"+
		"  "+c.p("store/ccc-cuda_nvrtc/lib")+": libnvrtc.so.13 (dlopen prefix \"libnvrtc.so.\")\n")
	code, stdout, _ = c.runCLI(nil, "explain", "{root}/pkg/lib/libtorch_cpu.so")
	require.Equal(t, 0, code)
	assert.NotContains(t, stdout, "RUNPATH entries")
	code, stdout, _ = c.runCLI(nil, "explain", "--evidence", "--json", "{root}/pkg/lib/libtorch_cpu.so")
	require.Equal(t, 0, code)
	var ex struct {
		Evidence []struct {
			Entry  string
			Serves []struct{ File, String, Kind, Library string }
		} `json:"runpath_evidence"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &ex), stdout)
	require.Len(t, ex.Evidence, 2)
	assert.Equal(t, c.p("store/ccc-cuda_nvrtc/lib"), ex.Evidence[1].Entry)
	assert.Equal(t, []struct{ File, String, Kind, Library string }{{c.p("pkg/lib/libtorch_cpu.so"), "libnvrtc.so.", "prefix", "libnvrtc.so.13"}}, ex.Evidence[1].Serves)
}

// TestDlopenOutsideCallerCLI: a plugin that hands libxsoup.so.1 to
// g_module_open of a libgmodule outside the outputs gets one line on
// stderr saying the name will not load and how to fix it (exit 0, the
// plugin's RUNPATH without the name's directory, the host fails); with
// --dlopen-needed the plugin gets a DT_NEEDED on it, no such line, and
// the host, outside the outputs too, runs the plugin.
func TestDlopenOutsideCallerCLI(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "dlopen-needed"}[on], func(t *testing.T) {
			c := newCLITree(t)
			c.place("store/sss-soup/lib/libxsoup.so.1", cfix.Spec{Soname: "libxsoup.so.1", Source: "int soup(void) { return 3; }\n"})
			gmodule := cfix.Build(t, cfix.Spec{Soname: "libgmodule-2.0.so.0", Libc: true,
				Source: "#include <dlfcn.h>\nvoid *g_module_open(const char *n, int f) { return dlopen(n, RTLD_NOW | f); }\n"})
			cfix.Copy(t, gmodule, c.p("store/ggg-glib/lib/libgmodule-2.0.so.0"))
			c.place("pkg/lib/libgstsoup.so", cfix.Spec{Soname: "libgstsoup.so", Libc: true, Link: []string{gmodule}, Source: `#include <dlfcn.h>
void *g_module_open(const char *name, int flags);
int plugin_init(void) {
	void *h = g_module_open("libxsoup.so.1", 0);
	return h ? ((int (*)(void))dlsym(h, "soup"))() : -1;
}
`})
			c.place("store/hhh-host/bin/host", cfix.Spec{Exe: true, Libc: true, Link: []string{gmodule}, RunPath: "{root}/store/ggg-glib/lib", Source: `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	void *p = dlopen(argv[1], RTLD_NOW);
	int r = p ? ((int (*)(void))dlsym(p, "plugin_init"))() : -1;
	printf("soup=%d\n", r);
	return r < 0;
}
`})
			// A libc directory of the C library alone: the host's holds a
			// real libgmodule.
			require.NoError(t, os.MkdirAll(c.p("libc"), 0o755))
			for _, n := range []string{"libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"} {
				if _, err := os.Stat("/lib/x86_64-linux-gnu/" + n); err == nil {
					require.NoError(t, os.Symlink("/lib/x86_64-linux-gnu/"+n, c.p("libc/"+n)))
				}
			}
			args := []string{"--interpreter", sysLoader, "--libc", "{root}/libc", "--driver-link-for", "none",
				"--search", "{root}/store/ggg-glib/lib", "--search", "{root}/store/sss-soup/lib"}
			if on {
				args = append(args, "--dlopen-needed")
			}
			code, _, stderr := c.runCLI(nil, append(args, "{root}/pkg")...)
			require.Equal(t, 0, code, stderr)
			line := "warning: " + c.p("pkg/lib/libgstsoup.so") + ": libxsoup.so.1 will not load: dlopened by g_module_open in " +
				c.p("store/ggg-glib/lib/libgmodule-2.0.so.0") + ", outside the outputs, whose RUNPATH this run does not write: " +
				"give this file a DT_NEEDED on libxsoup.so.1 (--dlopen-needed, or patchelf --add-needed) or wrap the program to put " +
				c.p("store/sss-soup/lib") + " on LD_LIBRARY_PATH\n"
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, _ := exec.CommandContext(ctx, sysLoader, "--inhibit-cache", c.p("store/hhh-host/bin/host"), c.p("pkg/lib/libgstsoup.so")).CombinedOutput()
			if !on {
				assert.Contains(t, stderr, line)
				assert.Equal(t, c.p("store/ggg-glib/lib"), c.runpath("pkg/lib/libgstsoup.so"))
				assert.Equal(t, "soup=-1", strings.TrimSpace(string(out)))
				return
			}
			assert.NotContains(t, stderr, "will not load")
			assert.Equal(t, c.p("store/ggg-glib/lib:")+c.p("store/sss-soup/lib"), c.runpath("pkg/lib/libgstsoup.so"))
			assert.Equal(t, "soup=3", strings.TrimSpace(string(out)))
			// The added DT_NEEDED has its resolution-note entry (lint's
			// other findings here are the test's /tmp build directory).
			_, stdout, stderr := c.runCLI(nil, "lint", "{root}/pkg")
			assert.NotContains(t, stdout+stderr, "ldcache-needed", "%s%s", stdout, stderr)
			code, stdout, stderr = c.runCLI(nil, "verify", "{root}/pkg/lib/libgstsoup.so")
			assert.Equal(t, 0, code, "%s%s", stdout, stderr)
		})
	}
}
