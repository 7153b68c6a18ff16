package patch_test

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// noteOf reads the resolution note of a file with the standard library, not
// with the code under test: the descriptor of the .note.nixos.ldcache
// section, which must lie inside a PT_NOTE (the loader reads notes through
// the program headers). ok is false when there is no such section.
func noteOf(t *testing.T, path string) (desc string, ok bool) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s := f.Section(ldcache.Section)
	if s == nil {
		return "", false
	}
	inNote := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE && s.Offset >= p.Off && s.Offset+s.Size <= p.Off+p.Filesz && s.Addr == p.Vaddr+(s.Offset-p.Off) {
			inNote = true
		}
	}
	require.True(t, inNote, "%s: %s is not inside a PT_NOTE", path, ldcache.Section)
	b, err := s.Data()
	require.NoError(t, err)
	o := f.ByteOrder
	namesz, descsz, typ := o.Uint32(b), o.Uint32(b[4:]), o.Uint32(b[8:])
	require.Equal(t, ldcache.Type, typ)
	require.Equal(t, ldcache.Owner+"\x00", string(b[12:12+namesz]))
	off := 12 + (namesz+3)&^3
	return string(b[off : off+descsz]), true
}

// render writes a descriptor as "NAME LIST" lines, {root} for the tree.
func (tr *tree) render(desc string) string {
	c, err := ldcache.Decode([]byte(desc))
	require.NoError(tr.t, err)
	return strings.ReplaceAll(c.String(), tr.root, "{root}")
}

// cudaPackage lays out a prebuilt CUDA-like package: pkg/bin/app needs
// libfoo.so (pkg/lib), libdep.so (deps/lib) and libcuda.so.1; the driver
// link exists and holds a libcuda.so.1, as on a build machine outside the
// sandbox; cuda_compat and the toolkit's stubs hold one too.
func cudaPackage(t *testing.T) *tree {
	tr := newTree(t)
	tr.place("pkg/bin/app", withRunpath(exe("libfoo.so", "libdep.so", "libcuda.so.1"), "{root}/toolkit/lib/stubs"))
	tr.place("pkg/lib/libfoo.so", lib("libfoo.so", "libdep.so"))
	tr.place("deps/lib/libdep.so", lib("libdep.so"))
	tr.place("driver/libcuda.so.1", lib("libcuda.so.1"))
	tr.place("compat/libcuda.so.580.95.05", cfix.Spec{Soname: "libcuda.so.1", Source: "int cuInit(unsigned f) { return 0; }\n"})
	tr.symlink("compat/libcuda.so.1", "libcuda.so.580.95.05")
	tr.place("toolkit/lib/stubs/libcuda.so.1", lib("libcuda.so.1"))
	return tr
}

func cudaConfig(tr *tree) patch.Config {
	return patch.Config{
		Search: tr.ps("deps/lib", "toolkit/lib/stubs"),
		Policy: policy.Config{DriverLink: tr.p("driver")},
	}
}

// TestResolutionNoteWritten: every patched file gets the note of its new
// RUNPATH, in the same pass, with the CUDA rules: the driver link is a
// run-time hint, never probed (its libcuda.so.1 exists here and must not
// be baked in), cuda_compat's selector comes first, nothing points into the
// stubs.
func TestResolutionNoteWritten(t *testing.T) {
	for _, compat := range []bool{false, true} {
		t.Run(map[bool]string{false: "driver link", true: "cuda_compat"}[compat], func(t *testing.T) {
			tr := cudaPackage(t)
			cfg := cudaConfig(tr)
			if compat {
				cfg.Policy.CudaCompat = tr.p("compat")
				cfg.Selector = patch.CompatSelector{Dir: tr.p("selector"), CC: []string{"gcc"}}
			}
			rep := tr.mustPatch([]string{"pkg"}, cfg)

			cudaList := "?{root}/driver"
			runpath := "{root}/driver:{root}/pkg/lib:{root}/deps/lib"
			if compat {
				cudaList = "={root}/selector/libcuda.so.1:?{root}/driver"
				runpath = "{root}/selector:" + runpath
			}
			require.Equal(t, tr.x(runpath), tr.runpathOf("pkg/bin/app"))
			desc, ok := noteOf(t, tr.p("pkg/bin/app"))
			require.True(t, ok, "no note")
			require.Equal(t, "libcuda.so.1 "+cudaList+"\n"+
				"libdep.so ?{root}/driver:={root}/deps/lib/libdep.so\n"+
				"libfoo.so ?{root}/driver:={root}/pkg/lib/libfoo.so\n", tr.render(desc))
			f := tr.file(rep, "pkg/bin/app")
			require.Equal(t, patch.NoteWritten, f.Note)
			require.Equal(t, desc, string(f.ResolutionCache.Encode()))

			desc, ok = noteOf(t, tr.p("pkg/lib/libfoo.so"))
			require.True(t, ok, "no note in the library")
			require.Equal(t, "libdep.so ?{root}/driver:={root}/deps/lib/libdep.so\n", tr.render(desc))

			// A second run finds everything right and writes nothing.
			snap := tr.snapshot()
			rep = tr.mustPatch([]string{"pkg"}, cfg)
			tr.unchangedSince(snap)
			require.Equal(t, 0, rep.Changed)
			require.Equal(t, patch.NoteKept, tr.file(rep, "pkg/bin/app").Note)
		})
	}
}

// TestStaleNoteReplaced is issue 11's failure: a note written from the
// link-time RUNPATH (the toolkit's stubs, as patchelf master writes it
// before cudapatch runs) sends nixpkgs' loader to the stub libcuda even
// though the RUNPATH is right. cudapatch replaces it in the same edit, and
// no byte of the file names the stubs afterwards: Nix would otherwise keep
// the stub package in the closure.
func TestStaleNoteReplaced(t *testing.T) {
	tr := cudaPackage(t)
	app := tr.p("pkg/bin/app")
	// patchelf master's rule on the link-time RUNPATH: no rules.
	old, outcome := ldcache.Build([]string{"libfoo.so", "libdep.so", "libcuda.so.1"}, tr.p("toolkit/lib/stubs"), ldcache.OS{}, ldcache.Rules{})
	require.Equal(t, ldcache.Built, outcome)
	require.Equal(t, "libcuda.so.1 ={root}/toolkit/lib/stubs/libcuda.so.1\n", tr.render(string(old.Encode())))
	_, err := elfedit.EditFile(app, elfedit.Edit{SetNote: &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: old.Encode()}}, elfedit.Options{})
	require.NoError(t, err)
	data, err := os.ReadFile(app)
	require.NoError(t, err)
	require.True(t, bytes.Contains(data, []byte(tr.p("toolkit/lib/stubs"))), "setup: the stale note names the stubs")

	require.Equal(t, "ldcache {root}/toolkit/lib/stubs/libcuda.so.1", tr.nixosLoads(app, "libcuda.so.1"),
		"setup: nixpkgs' loader follows the stale note to the stub")

	tr.mustPatch([]string{"pkg"}, cudaConfig(tr))
	require.Equal(t, "ldcache {root}/driver/libcuda.so.1", tr.nixosLoads(app, "libcuda.so.1"),
		"after cudapatch nixpkgs' loader finds the driver's libcuda through the note's driver-link hint")
	desc, ok := noteOf(t, app)
	require.True(t, ok)
	require.NotContains(t, tr.render(desc), "stubs")
	require.Contains(t, tr.render(desc), "libcuda.so.1 ?{root}/driver\n")
	data, err = os.ReadFile(app)
	require.NoError(t, err)
	require.False(t, bytes.Contains(data, []byte(tr.p("toolkit/lib/stubs"))), "the stub directory is still named in the file")
}

// TestNoResolutionCache: without notes, a file keeps a note that is right
// for its final RUNPATH, and loses one that is not; none is written.
func TestNoResolutionCache(t *testing.T) {
	tr := newTree(t)
	tr.place("pkg/bin/stale", withRunpath(exe("libdep.so"), "{root}/old"))
	tr.place("pkg/bin/right", exe("libdep.so"))
	tr.place("pkg/bin/none", exe("libdep.so"))
	tr.place("deps/lib/libdep.so", lib("libdep.so"))
	tr.place("old/libdep.so", lib("libdep.so"))
	note := func(rel, path string) {
		c, _ := ldcache.Build([]string{"libdep.so"}, tr.x(path), ldcache.OS{}, policy.ResolutionRules(tr.p("driver")))
		_, err := elfedit.EditFile(tr.p(rel), elfedit.Edit{SetNote: &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: c.Encode()}}, elfedit.Options{})
		require.NoError(t, err)
	}
	note("pkg/bin/stale", "{root}/old")
	note("pkg/bin/right", "{root}/driver:{root}/deps/lib")
	rep := tr.mustPatch([]string{"pkg"}, patch.Config{Search: []string{tr.p("deps/lib")}, Policy: policy.Config{DriverLink: tr.p("driver")}, NoResolutionCache: true})
	for _, rel := range []string{"pkg/bin/stale", "pkg/bin/right", "pkg/bin/none"} {
		require.Equal(t, tr.p("driver")+":"+tr.p("deps/lib"), tr.runpathOf(rel), rel)
	}
	_, ok := noteOf(t, tr.p("pkg/bin/stale"))
	require.False(t, ok, "stale note kept")
	require.Equal(t, patch.NoteRemoved, tr.file(rep, "pkg/bin/stale").Note)
	desc, ok := noteOf(t, tr.p("pkg/bin/right"))
	require.True(t, ok, "right note removed")
	require.Equal(t, "libdep.so ?{root}/driver:={root}/deps/lib/libdep.so\n", tr.render(desc))
	require.Equal(t, patch.NoteKept, tr.file(rep, "pkg/bin/right").Note)
	_, ok = noteOf(t, tr.p("pkg/bin/none"))
	require.False(t, ok, "a note was written")
	require.Empty(t, tr.file(rep, "pkg/bin/none").Note)
}

// TestNoteNotWrittenForAFaultyKeptPath: a file whose RUNPATH cudapatch keeps
// (nothing to resolve: it is left as it is) gets no note when that RUNPATH
// fails the audit, and an old note is removed.
func TestNoteNotWrittenForAFaultyKeptPath(t *testing.T) {
	tr := newTree(t)
	tr.place("pkg/lib/libplain.so", withRunpath(lib("libplain.so", "libc.so.6"), "relative/dir:{root}/deps/lib"))
	tr.place("pkg/lib/libnoted.so", withRunpath(lib("libnoted.so", "libc.so.6"), "relative/dir:{root}/deps/lib"))
	c, _ := ldcache.Build([]string{"libc.so.6"}, tr.x("relative/dir:{root}/deps/lib"), ldcache.OS{}, ldcache.Rules{})
	_, err := elfedit.EditFile(tr.p("pkg/lib/libnoted.so"), elfedit.Edit{SetNote: &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: c.Encode()}}, elfedit.Options{})
	require.NoError(t, err)
	rep := tr.mustPatch([]string{"pkg"}, patch.Config{Libc: hostLibcDir, Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone}})
	for _, rel := range []string{"pkg/lib/libplain.so", "pkg/lib/libnoted.so"} {
		require.Equal(t, tr.x("relative/dir:{root}/deps/lib"), tr.runpathOf(rel), "the RUNPATH is kept")
		_, ok := noteOf(t, tr.p(rel))
		require.False(t, ok, "%s has a note", rel)
	}
	require.Empty(t, tr.file(rep, "pkg/lib/libplain.so").Note)
	require.Equal(t, patch.NoteRemoved, tr.file(rep, "pkg/lib/libnoted.so").Note)
}

// TestNoteRelocatable: with relative RUNPATHs the note holds no absolute
// "=" file of the store: every element of a relativized entry is a "?"
// hint in its RUNPATH position, so the note moves with the store. Checked
// with rpath/ldso's model of nixpkgs' loader (which reads the note) after
// the store moved: libfoo and libbar come from the note's $ORIGIN hints.
func TestNoteRelocatable(t *testing.T) {
	tr := relocatableStore(t)
	tr.mustPatch([]string{"store/jjj-app"},
		patch.Config{
			Search: tr.ps("store/hhh-foo/lib", "store/iii-bar/lib"),
			Policy: policy.Config{Interpreter: hostLoader, RelativeStore: tr.p("store")},
			Libc:   hostLibcDir,
		})
	desc, ok := noteOf(t, tr.p("store/jjj-app/libexec/lib-check"))
	require.True(t, ok)
	require.Equal(t, ""+
		"libbar.so ?/run/opengl-driver/lib:?$ORIGIN/../../hhh-foo/lib:?$ORIGIN/../../iii-bar/lib\n"+
		"libc.so.6 ?/run/opengl-driver/lib:?$ORIGIN/../../hhh-foo/lib:?$ORIGIN/../../iii-bar/lib\n"+
		"libfoo.so ?/run/opengl-driver/lib:?$ORIGIN/../../hhh-foo/lib:?$ORIGIN/../../iii-bar/lib\n", tr.render(desc))

	tr.mkdir("moved/x")
	require.NoError(t, os.Rename(tr.p("store"), tr.p("moved/x/store")))
	exe := tr.p("moved/x/store/jjj-app/libexec/lib-check")
	require.Equal(t, "ldcache {root}/moved/x/store/jjj-app/libexec/../../hhh-foo/lib/libfoo.so", tr.nixosLoads(exe, "libfoo.so"))
	require.Equal(t, "ldcache {root}/moved/x/store/jjj-app/libexec/../../iii-bar/lib/libbar.so", tr.nixosLoads(exe, "libbar.so"))
}

// nixosLoads says where rpath/ldso's model of nixpkgs' loader (which reads
// the note) finds a direct dependency of exe: "STEP PATH", {root} for the
// tree.
func (tr *tree) nixosLoads(exe, name string) string {
	tr.t.Helper()
	cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
	require.NoError(tr.t, err)
	cfg.Loader = ldso.LoaderNixOS
	got, err := ldso.Resolve(cfg, ldso.ElfReader(), exe)
	require.NoError(tr.t, err)
	for _, n := range got.Needs {
		if n.Depth == 1 && n.Name == name {
			return string(n.Step) + " " + strings.ReplaceAll(n.Path, tr.root, "{root}")
		}
	}
	return "not needed"
}
