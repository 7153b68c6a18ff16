package patch_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

func TestIsSonameShaped(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"libplugin.so.1", true},
		{"libnvrtc-builtins.so.11.8", true},
		{"libnvrtc-builtins.so.13.0", true},
		{"libcudnn_engines_precompiled.so.9", true},
		{"libstdc++.so.6", true},
		{"libcuda.so", true},
		{"libnvJitLink.so.13", true},
		{"libfoo.so.1.2.3", true},
		{"libx.so", true},
		{"libfoo.so.%d", false},                           // a format
		{"libfoo.so.%s", false},                           // a format
		{"lib%s.so", false},                               // a format
		{"cannot load libother.so", false},                // a sentence
		{"libother.so: not found", false},                 // a sentence
		{"/usr/lib/libfoo.so.1", false},                   // a path: opened as is
		{"plugins/libfoo.so", false},                      // a relative path, as is too
		{"libfoo.so.1a", false},                           // not a version
		{"libfoo.so.", false},                             // an empty version
		{"libfoo.so..1", false},                           // an empty version
		{"libfoo.dylib", false},                           // another platform
		{"foo.dll", false},                                // another platform
		{"lib.so", false},                                 // no name
		{"libfoo.sox", false},                             //
		{"libfoo.so.1 ", false},                           // a space
		{"foo.so.1", false},                               // no lib prefix
		{"ld-linux-x86-64.so.2", false},                   // no lib prefix: the loader
		{"libfoo.so.1\n", false},                          //
		{"libfoo.so.1.so", true},                          // odd, but the shape
		{"lib" + strings.Repeat("x", 250) + ".so", false}, // longer than NAME_MAX
		{"", false},
	} {
		require.Equal(t, c.want, policy.IsSonameShaped([]byte(c.s)), "%q", c.s)
	}
}

// srcPluginApp dlopens libplugin.so.1 by a string constant; the decoys, a
// soname inside a message, a format, an absolute path, must not be taken
// for names it dlopens. libmissing.so.3 is a name nothing provides.
const srcPluginApp = `#include <dlfcn.h>
#include <stdio.h>
static const char msg[] = "cannot load libother.so: install it";
static const char abs_path[] = "/opt/vendor/libabs.so.1";
int main(int argc, char **argv) {
	char fmt[64];
	snprintf(fmt, sizeof fmt, "libfmt.so.%d", argc);
	dlopen("libmissing.so.3", RTLD_LAZY);
	void *h = dlopen("libplugin.so.1", RTLD_NOW);
	if (!h) {
		printf("%s (%s %s %s)\n", dlerror(), msg, fmt, abs_path);
		return 1;
	}
	int (*plugin)(void) = (int (*)(void))dlsym(h, "plugin");
	printf("plugin=%d\n", plugin());
	return 0;
}
`

// dlopenTree lays out a package whose program dlopens a library of another
// store path, and decoys in a third that only a false discovery would
// reach.
func dlopenTree(t *testing.T, spec cfix.Spec) *tree {
	t.Helper()
	tr := newTree(t)
	tr.place("store/aaa-plugin/lib/libplugin.so.1", cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"})
	for _, decoy := range []string{"libother.so", "libfmt.so.1", "libfmt.so.2", "libabs.so.1", "libfmt.so.%d"} {
		tr.place("store/bbb-decoys/lib/"+decoy, cfix.Spec{Soname: decoy, Source: "int plugin(void) { return 666; }\n"})
	}
	spec.Exe, spec.Libc, spec.Source = true, true, srcPluginApp
	tr.place("pkg/bin/app", spec)
	return tr
}

func dlopenConfig(tr *tree, mode policy.DlopenMode) patch.Config {
	return patch.Config{
		Search: tr.ps("store/bbb-decoys/lib", "store/aaa-plugin/lib"),
		Policy: policy.Config{
			DriverLinkFor: policy.DriverLinkNone,
			Interpreter:   hostLoader,
			Dlopen:        mode,
		},
		Libc: hostLibcDir,
	}
}

// TestDlopenDiscovery patches the program with each mode and runs it with
// the loader cache inhibited and no LD_LIBRARY_PATH: only resolve makes
// its dlopen work, through a RUNPATH entry and a note entry for the name,
// and neither the decoys nor the missing name change anything or fail the
// job.
func TestDlopenDiscovery(t *testing.T) {
	const fail = "libplugin.so.1: cannot open shared object file: No such file or directory (cannot load libother.so: install it libfmt.so.1 /opt/vendor/libabs.so.1)"
	for _, c := range []struct {
		mode    policy.DlopenMode
		runpath string
		run     string
		deps    []string // the dlopen-string dependencies, NAME=HOW
		note    bool     // libplugin.so.1 has a note entry
	}{
		{policy.DlopenResolve, "{root}/store/aaa-plugin/lib", "plugin=7", []string{"libmissing.so.3=unresolved", "libplugin.so.1=resolved"}, true},
		{policy.DlopenReport, "", fail, []string{"libmissing.so.3=unresolved", "libplugin.so.1=found"}, false},
		{policy.DlopenOff, "", fail, nil, false},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			tr := dlopenTree(t, cfix.Spec{})
			if out, err := runApp(t, tr.p("pkg/bin/app")); err == nil || out != fail {
				t.Fatalf("unpatched: %v %q, want %q", err, out, fail)
			}
			rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, c.mode))
			require.Empty(t, rep.Missing, "a dlopen name found nowhere is no missing dependency")
			f := tr.file(rep, "pkg/bin/app")
			var deps []string
			for _, d := range f.Deps {
				if d.Source == policy.SourceStrings {
					deps = append(deps, d.Name+"="+d.How)
				}
			}
			slices.Sort(deps)
			require.Equal(t, c.deps, deps)
			require.Equal(t, tr.x(c.runpath), tr.runpathOf("pkg/bin/app"))
			out, err := runApp(t, tr.p("pkg/bin/app"))
			require.Equal(t, c.run, out)
			require.Equal(t, c.run == "plugin=7", err == nil, "exit status: %v", err)

			ef, err := elfedit.Open(tr.p("pkg/bin/app"))
			require.NoError(t, err)
			nt := ldso.ReadNote(ef)
			ef.Close()
			var e []string
			if nt != nil {
				if en, ok := nt.Cache.Lookup("libplugin.so.1"); ok {
					e = append(e, en.PathList())
				}
				_, ok := nt.Cache.Lookup("libmissing.so.3")
				require.False(t, ok, "no note entry for a name found nowhere")
			}
			if c.note {
				require.Equal(t, []string{"=" + tr.p("store/aaa-plugin/lib/libplugin.so.1")}, e)
			} else {
				require.Empty(t, e)
			}
		})
	}
}

// TestDlopenNoteIsAuthoritative: a file with a .note.dlopen gets no
// discovery; what its note names is resolved instead.
func TestDlopenNoteIsAuthoritative(t *testing.T) {
	tr := dlopenTree(t, cfix.Spec{Dlopen: `[{"soname":["libother.so"]}]`})
	rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, policy.DlopenResolve))
	f := tr.file(rep, "pkg/bin/app")
	for _, d := range f.Deps {
		require.NotEqual(t, policy.SourceStrings, d.Source, "%+v", d)
	}
	require.Equal(t, policy.HowStore, tr.dep(rep, "pkg/bin/app", "libother.so").How)
	require.Equal(t, tr.p("store/bbb-decoys/lib"), tr.runpathOf("pkg/bin/app"))
	// The name found gets its note entry, as a DT_NEEDED name does.
	ef, err := elfedit.Open(tr.p("pkg/bin/app"))
	require.NoError(t, err)
	nt := ldso.ReadNote(ef)
	ef.Close()
	require.NotNil(t, nt)
	e, ok := nt.Cache.Lookup("libother.so")
	require.True(t, ok, "%v", nt.Cache)
	require.Equal(t, "="+tr.p("store/bbb-decoys/lib/libother.so"), e.PathList())
}

// TestDiscoverDlopen: the names, in file order, without the file's own
// DT_NEEDED and SONAME; none from a file that does not call dlopen or
// has a .note.dlopen.
func TestDiscoverDlopen(t *testing.T) {
	tr := newTree(t)
	tr.place("a/app", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp})
	tr.place("a/libself.so.1", cfix.Spec{Soname: "libself.so.1", Libc: true, Source: `#include <dlfcn.h>
const char *names[] = {"libself.so.1", "libc.so.6", "libz.so.1", "libz.so.1"};
void *f(int i) { return dlopen(names[i], RTLD_NOW); }
`})
	tr.place("a/libnodl.so", cfix.Spec{Soname: "libnodl.so", Libc: true, Source: `const char *name = "libplugin.so.1";`})
	tr.place("a/app-note", cfix.Spec{Exe: true, Libc: true, Source: srcPluginApp, Dlopen: `[{"soname":["libz.so.1"]}]`})
	for _, c := range []struct {
		file string
		want []string
	}{
		{"a/app", []string{"libmissing.so.3", "libplugin.so.1"}},
		{"a/libself.so.1", []string{"libz.so.1"}},
		{"a/libnodl.so", nil},
		{"a/app-note", nil}, // .note.dlopen is authoritative
	} {
		f, err := elfedit.Open(tr.p(c.file))
		require.NoError(t, err)
		got, err := policy.DiscoverDlopen(f)
		f.Close()
		require.NoError(t, err)
		slices.Sort(got)
		require.Equal(t, c.want, got, c.file)
	}
}

// TestDlopenUnreadableRodata: a .rodata section header that points past
// the end of the file (the loader never reads section headers) costs the
// file its discovered names, not its patch.
func TestDlopenUnreadableRodata(t *testing.T) {
	tr := dlopenTree(t, cfix.Spec{})
	app := tr.p("pkg/bin/app")
	b, err := os.ReadFile(app)
	require.NoError(t, err)
	ef, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	i := slices.IndexFunc(ef.Sections, func(s *elf.Section) bool { return s.Name == ".rodata" })
	require.GreaterOrEqual(t, i, 0, "the fixture has .rodata")
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	binary.LittleEndian.PutUint64(b[shoff+uint64(i)*64+24:], uint64(len(b))+4096) // sh_offset
	require.NoError(t, os.WriteFile(app, b, 0o755))

	rep := tr.mustPatch([]string{"pkg"}, dlopenConfig(tr, policy.DlopenResolve))
	f := tr.file(rep, "pkg/bin/app")
	require.Empty(t, f.Errors)
	require.Contains(t, f.DlopenError, "read-only data")
	for _, d := range f.Deps {
		require.NotEqual(t, policy.SourceStrings, d.Source, "%+v", d)
	}
}

// TestDlopenDiscoveryWithoutSectionHeaders: a program shipped without
// section headers (sstrip'd, as some vendor binaries are) and with
// .gnu.hash alone states no size of its dynamic symbol table. Patching it
// moves its string table; a second run must still find that it imports
// dlopen, and so change nothing: the plugin's directory stays, and the
// program runs.
func TestDlopenDiscoveryWithoutSectionHeaders(t *testing.T) {
	tr := dlopenTree(t, cfix.Spec{})
	app := tr.p("pkg/bin/app")
	b, err := os.ReadFile(app)
	require.NoError(t, err)
	require.Equal(t, byte(elf.ELFCLASS64), b[elf.EI_CLASS])
	binary.LittleEndian.PutUint64(b[0x28:], 0) // e_shoff
	binary.LittleEndian.PutUint16(b[0x3c:], 0) // e_shnum
	binary.LittleEndian.PutUint16(b[0x3e:], 0) // e_shstrndx
	require.NoError(t, os.WriteFile(app, b, 0o755))

	// debug/elf finds the dynamic section through the section headers.
	runpath := func() string {
		f, err := elfedit.Open(app)
		require.NoError(t, err)
		defer f.Close()
		rp := f.Info().RunPath
		require.NotNil(t, rp)
		return *rp
	}
	cfg := dlopenConfig(tr, policy.DlopenResolve)
	rep := tr.mustPatch([]string{"pkg"}, cfg)
	require.Empty(t, tr.file(rep, "pkg/bin/app").DlopenError)
	want := tr.p("store/aaa-plugin/lib")
	require.Equal(t, want, runpath())
	for run := range 2 {
		rep, err := tr.patch([]string{"pkg"}, cfg)
		require.NoError(t, err)
		f := tr.file(rep, "pkg/bin/app")
		require.Empty(t, f.DlopenError, "run %d", run+2)
		require.False(t, f.Changed, "run %d changed the program: runpath %q", run+2, f.RunPath)
		require.Equal(t, want, runpath())
	}
	out, err := runApp(t, app)
	require.NoError(t, err, out)
	require.Equal(t, "plugin=7", out)
}
