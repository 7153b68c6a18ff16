package patch_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// GStreamer's soup plugin: it names libxsoup.so.1 and has GLib's
// g_module_open (in libgmodule, which calls dlopen) load it; it also
// needs libgstcore, a library of the outputs that imports dlopen for
// other reasons.
const (
	srcGmodule = `#include <dlfcn.h>
void *g_module_open(const char *name, int flags) { return dlopen(name, RTLD_NOW | flags); }
`
	srcGstCore = `#include <dlfcn.h>
void *gst_load(const char *name) { return dlopen(name, RTLD_NOW); }
int gst_core(void) { return 0; }
`
	srcSoupPlugin = `#include <dlfcn.h>
void *g_module_open(const char *name, int flags);
int gst_core(void);
int plugin_init(void) {
	void *h = g_module_open("libxsoup.so.1", 0);
	if (!h)
		return -1;
	return ((int (*)(void))dlsym(h, "soup"))() + gst_core();
}
`
	srcSoupApp = `#include <dlfcn.h>
#include <stdio.h>
int plugin_init(void);
int main(void) {
	int r = plugin_init();
	if (r < 0) {
		printf("%s\n", dlerror());
		return 1;
	}
	printf("soup=%d\n", r);
	return 0;
}
`
)

// TestDlopenOutsideCaller: the plugin's name is loaded by g_module_open
// of a libgmodule in another store path, outside the outputs: no RUNPATH
// this run writes is searched for it, so the plugin reports it
// "outside-caller" with a one-line fix, never "resolved", and libgstcore,
// a dlopen importer of its closure that is not the loader, gets nothing;
// the program indeed fails. With glib's path among the outputs,
// libgmodule is the caller and gets the directory, and the program loads
// the library.
func TestDlopenOutsideCaller(t *testing.T) {
	const fail = "libxsoup.so.1: cannot open shared object file: No such file or directory"
	for _, c := range []struct {
		name     string
		roots    []string
		how      string // of libxsoup.so.1 in the plugin's decisions
		gmodule  string // libgmodule's RUNPATH
		gstcore  string
		run      string
		evidence bool // libgmodule's dependency carries the plugin's string
	}{
		// libgstcore, a dlopen caller in the plugin's output, gets
		// neither the plugin's names nor the directory of what the
		// plugin needs (libgmodule's): no code of its own or of a file
		// that links to it forms "libgmodule-2.0.so.0".
		{"outside", []string{"pkg"}, policy.HowOutsideCaller, "", "", fail, false},
		{"inside", []string{"pkg", "store/ggg-glib"}, policy.HowFound, "{root}/store/sss-soup/lib", "", "soup=3", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree(t)
			// A libc directory of the C library alone: the host's holds
			// a real libgmodule.
			for _, n := range []string{"libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"} {
				if _, err := os.Stat(filepath.Join(hostLibcDir, n)); err == nil {
					tr.symlink("libc/"+n, filepath.Join(hostLibcDir, n))
				}
			}
			tr.place("store/sss-soup/lib/libxsoup.so.1", cfix.Spec{Soname: "libxsoup.so.1", Source: "int soup(void) { return 3; }\n"})
			gmodule := cfix.Build(t, cfix.Spec{Soname: "libgmodule-2.0.so.0", Libc: true, Source: srcGmodule})
			cfix.Copy(t, gmodule, tr.p("store/ggg-glib/lib/libgmodule-2.0.so.0"))
			core := cfix.Build(t, cfix.Spec{Soname: "libgstcore.so", Libc: true, Source: srcGstCore})
			cfix.Copy(t, core, tr.p("pkg/lib/libgstcore.so"))
			plugin := cfix.Build(t, cfix.Spec{Soname: "libgstsoup.so", Libc: true, Source: srcSoupPlugin, Link: []string{gmodule, core}})
			cfix.Copy(t, plugin, tr.p("pkg/lib/libgstsoup.so"))
			tr.place("pkg/bin/app", cfix.Spec{Exe: true, Libc: true, Source: srcSoupApp, Link: []string{plugin}})
			rep := tr.mustPatch(c.roots, patch.Config{
				Search: tr.ps("store/ggg-glib/lib", "store/sss-soup/lib"),
				Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone, Interpreter: hostLoader},
				Libc:   tr.p("libc"),
			})
			d := tr.dep(rep, "pkg/lib/libgstsoup.so", "libxsoup.so.1")
			require.Equal(t, c.how, d.How)
			require.Equal(t, tr.p("store/sss-soup/lib/libxsoup.so.1"), d.Path)
			require.Equal(t, policy.Evidence{File: tr.p("pkg/lib/libgstsoup.so"), String: "libxsoup.so.1", Kind: policy.EvidenceWhole}, d.Evidence)
			if c.how == policy.HowOutsideCaller {
				require.Equal(t, "dlopened by g_module_open in "+tr.p("store/ggg-glib/lib/libgmodule-2.0.so.0")+", outside the outputs, whose RUNPATH this run does not write: "+
					"give this file a DT_NEEDED on libxsoup.so.1 (--dlopen-needed, or patchelf --add-needed) or wrap the program to put "+tr.p("store/sss-soup/lib")+" on LD_LIBRARY_PATH", d.Hint)
				require.NotContains(t, d.Hint, "\n")
				require.Empty(t, rep.Missing, "reported, not an error")
			} else {
				g := tr.dep(rep, "store/ggg-glib/lib/libgmodule-2.0.so.0", "libxsoup.so.1")
				require.Equal(t, policy.HowStore+" "+tr.p("pkg/lib/libgstsoup.so"), g.How+" "+g.From)
				require.Equal(t, d.Evidence, g.Evidence, "the caller's evidence is the plugin's string")
			}
			require.Equal(t, tr.p("store/ggg-glib/lib:")+tr.p("pkg/lib"), tr.runpathOf("pkg/lib/libgstsoup.so"), "the plugin keeps its DT_NEEDED directories")
			require.Equal(t, tr.x(c.gmodule), tr.runpathOf("store/ggg-glib/lib/libgmodule-2.0.so.0"))
			require.Equal(t, tr.x(c.gstcore), tr.runpathOf("pkg/lib/libgstcore.so"), "libgstcore is not the plugin's loader")
			for _, dep := range tr.file(rep, "pkg/lib/libgstcore.so").Deps {
				require.False(t, strings.Contains(dep.Name, "xsoup"), "%+v", dep)
			}
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "soup=3", err == nil, "exit status: %v", err)
		})
	}
}

// A plugin host outside the outputs (gst-inspect in GStreamer's store
// path): it dlopens the plugin by path and runs its init, which has the
// loader function of a library outside the outputs load the name it
// holds.
const (
	srcLtdl = `#include <dlfcn.h>
void *lt_dlopen(const char *name) { return dlopen(name, RTLD_NOW); }
`
	srcLtdlPlugin = `#include <dlfcn.h>
void *lt_dlopen(const char *name);
int plugin_init(void) {
	void *h = lt_dlopen("libxsoup.so.1");
	if (!h)
		return -1;
	return ((int (*)(void))dlsym(h, "soup"))();
}
`
	srcPluginHost = `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	void *p = dlopen(argv[1], RTLD_NOW);
	if (!p) {
		printf("%s\n", dlerror());
		return 1;
	}
	int r = ((int (*)(void))dlsym(p, "plugin_init"))();
	if (r < 0) {
		printf("%s\n", dlerror());
		return 1;
	}
	printf("soup=%d\n", r);
	return 0;
}
`
)

// TestDlopenNeeded: with Config.DlopenNeeded, a name a plugin hands to
// g_module_open or lt_dlopen of a library outside the outputs becomes a
// DT_NEEDED of the plugin, its directory in the plugin's RUNPATH, so the
// loader maps it when a host outside the outputs opens the plugin, and
// the loader function finds it loaded; without it the plugin is left as
// it was and reports the name outside-caller, and the host's run fails.
func TestDlopenNeeded(t *testing.T) {
	const fail = "libxsoup.so.1: cannot open shared object file: No such file or directory"
	for _, l := range []struct{ name, soname, src, plugin string }{
		{"gmodule", "libgmodule-2.0.so.0", srcGmodule, `#include <dlfcn.h>
void *g_module_open(const char *name, int flags);
int plugin_init(void) {
	void *h = g_module_open("libxsoup.so.1", 0);
	if (!h)
		return -1;
	return ((int (*)(void))dlsym(h, "soup"))();
}
`},
		{"ltdl", "libltdl.so.7", srcLtdl, srcLtdlPlugin},
	} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%v", l.name, on), func(t *testing.T) {
				tr := newTree(t)
				for _, n := range []string{"libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"} {
					if _, err := os.Stat(filepath.Join(hostLibcDir, n)); err == nil {
						tr.symlink("libc/"+n, filepath.Join(hostLibcDir, n))
					}
				}
				tr.place("store/sss-soup/lib/libxsoup.so.1", cfix.Spec{Soname: "libxsoup.so.1", Source: "int soup(void) { return 3; }\n"})
				loader := cfix.Build(t, cfix.Spec{Soname: l.soname, Libc: true, Source: l.src})
				cfix.Copy(t, loader, tr.p("store/ggg-glib/lib/"+l.soname))
				plugin := cfix.Build(t, cfix.Spec{Soname: "libgstsoup.so", Libc: true, Source: l.plugin, Link: []string{loader}})
				cfix.Copy(t, plugin, tr.p("pkg/lib/gstreamer-1.0/libgstsoup.so"))
				tr.place("store/hhh-host/bin/host", cfix.Spec{Exe: true, Libc: true, Source: srcPluginHost, Link: []string{loader}, RunPath: "{root}/store/ggg-glib/lib"})
				rep := tr.mustPatch([]string{"pkg"}, patch.Config{
					Search:       tr.ps("store/ggg-glib/lib", "store/sss-soup/lib"),
					Policy:       policy.Config{DriverLinkFor: policy.DriverLinkNone, Interpreter: hostLoader},
					Libc:         tr.p("libc"),
					DlopenNeeded: on,
				})
				d := tr.dep(rep, "pkg/lib/gstreamer-1.0/libgstsoup.so", "libxsoup.so.1")
				require.Equal(t, tr.p("store/sss-soup/lib/libxsoup.so.1"), d.Path)
				require.Equal(t, policy.Evidence{File: tr.p("pkg/lib/gstreamer-1.0/libgstsoup.so"), String: "libxsoup.so.1", Kind: policy.EvidenceWhole}, d.Evidence)
				f, err := elf.Open(tr.p("pkg/lib/gstreamer-1.0/libgstsoup.so"))
				require.NoError(t, err)
				needed, err := f.ImportedLibraries()
				f.Close()
				require.NoError(t, err)
				list, _ := exec.Command(hostLoader, "--inhibit-cache", "--list", tr.p("pkg/lib/gstreamer-1.0/libgstsoup.so")).CombinedOutput()
				out, err := exec.Command(hostLoader, "--inhibit-cache", tr.p("store/hhh-host/bin/host"), tr.p("pkg/lib/gstreamer-1.0/libgstsoup.so")).CombinedOutput()
				if !on {
					require.Equal(t, policy.SourceStrings+" "+policy.HowOutsideCaller, d.Source+" "+d.How)
					require.Contains(t, d.Hint, "(--dlopen-needed, or patchelf --add-needed)")
					require.NotContains(t, needed, "libxsoup.so.1")
					require.Equal(t, tr.p("store/ggg-glib/lib"), tr.runpathOf("pkg/lib/gstreamer-1.0/libgstsoup.so"))
					require.NotContains(t, string(list), "libxsoup")
					require.Equal(t, fail, strings.TrimSpace(string(out)))
					require.Error(t, err)
					return
				}
				require.Equal(t, policy.SourceAddNeeded+" "+policy.HowStore, d.Source+" "+d.How)
				require.Empty(t, d.Hint)
				require.Equal(t, "libxsoup.so.1", needed[0], "the name is a DT_NEEDED, first")
				require.Contains(t, needed, l.soname)
				require.Equal(t, tr.p("store/ggg-glib/lib:")+tr.p("store/sss-soup/lib"), tr.runpathOf("pkg/lib/gstreamer-1.0/libgstsoup.so"))
				require.Contains(t, string(list), "libxsoup.so.1 => "+tr.p("store/sss-soup/lib/libxsoup.so.1"))
				require.NoError(t, err, "%s", out)
				require.Equal(t, "soup=3", strings.TrimSpace(string(out)))
				require.Empty(t, rep.Missing)
			})
		}
	}
}
