package patch_test

// One test per behaviour of nixpkgs' autoPatchelfHook and driver hooks that
// cudapatch keeps (docs/auto-patchelf.md: parity with auto-patchelf), named
// after it.

import (
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// none keeps the driver link out of the way of cfg where a test is
// about auto-patchelf alone.
func none(cfg patch.Config) patch.Config {
	cfg.Policy.DriverLinkFor = policy.DriverLinkNone
	return cfg
}

func TestNixpkgsRuntimeDependenciesOnlyForExecutables(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/pie", exe("libdep.so"))
	tr.place("out/bin/nopie", cfix.Spec{Exe: true, NoPIE: true, Needed: []string{"libdep.so"}})
	tr.place("out/lib/libl.so", lib("libl.so", "libdep.so"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	rep := tr.mustPatch([]string{"out"}, none(patch.Config{
		Search: []string{tr.p("deps")},
		Policy: policy.Config{RuntimeDeps: []string{"/nix/store/aaa-libGL/lib", "/nix/store/bbb-libX11/lib"}},
	}))
	for rel, want := range map[string]string{
		"out/bin/pie":     "/nix/store/aaa-libGL/lib:/nix/store/bbb-libX11/lib:{root}/deps",
		"out/bin/nopie":   "/nix/store/aaa-libGL/lib:/nix/store/bbb-libX11/lib:{root}/deps",
		"out/lib/libl.so": "{root}/deps",
	} {
		if got := tr.runpathOf(rel); got != tr.x(want) {
			t.Errorf("%s: %q, want %q", rel, got, tr.x(want))
		}
	}
	if k := tr.file(rep, "out/lib/libl.so").Kind; k != "shared-library" {
		t.Errorf("libl.so kind %q", k)
	}
}

func TestNixpkgsAppendRunpathsVerbatim(t *testing.T) {
	tr := newTree(t)
	tr.place("out/lib/libnvrtc.so.12", lib("libnvrtc.so.12", "libdep.so"))
	tr.place("out/bin/app", exe())
	tr.place("deps/libdep.so", lib("libdep.so"))
	tr.mustPatch([]string{"out"}, none(patch.Config{
		Search: []string{tr.p("deps")},
		Policy: policy.Config{AppendRunpaths: []string{"$ORIGIN", "${ORIGIN}/../lib64", "$ORIGIN/$LIB", "/nix/store/ccc-zlib/lib"}},
	}))
	for rel, want := range map[string]string{
		"out/lib/libnvrtc.so.12": "{root}/deps:$ORIGIN:${ORIGIN}/../lib64:$ORIGIN/$LIB:/nix/store/ccc-zlib/lib",
		"out/bin/app":            "$ORIGIN:${ORIGIN}/../lib64:$ORIGIN/$LIB:/nix/store/ccc-zlib/lib",
	} {
		if got := tr.runpathOf(rel); got != tr.x(want) {
			t.Errorf("%s: %q, want %q", rel, got, tr.x(want))
		}
	}
}

// TestNixpkgsCudaRedistRunpath is the RUNPATH the CUDA redistributable
// builder gets from autoPatchelf, then the driver hook, then the compat
// hook, with appendRunpaths = [ "$ORIGIN" ]:
// [compat] : /run/opengl-driver/lib : <resolved dirs> : $ORIGIN.
func TestNixpkgsCudaRedistRunpath(t *testing.T) {
	tr := newTree(t)
	tr.place("out/lib/libcublasLt.so.12", lib("libcublasLt.so.12", "libdep.so"))
	tr.place("out/lib/libcublas.so.12", lib("libcublas.so.12", "libcublasLt.so.12", "libdep.so"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	for _, compat := range []bool{false, true} {
		opts := patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{AppendRunpaths: []string{"$ORIGIN"}}, Write: patch.WriteOptions{DryRun: true}}
		want := drv + ":{root}/out/lib:{root}/deps:$ORIGIN"
		if compat {
			opts.Policy.CudaCompat = "/nix/store/ddd-cuda_compat/compat"
			want = "/nix/store/ddd-cuda_compat/compat:" + want
		}
		rep, err := tr.patch([]string{"out"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.file(rep, "out/lib/libcublas.so.12").RunPath; got != tr.x(want) {
			t.Errorf("compat %v: %q, want %q", compat, got, tr.x(want))
		}
	}
}

func TestNixpkgsPreserveOrigin(t *testing.T) {
	for _, on := range []bool{false, true} {
		tr := newTree(t)
		tr.place("out/lib/libo.so", withRunpath(lib("libo.so", "libdep.so"), "/build/src/lib:$ORIGIN:/usr/lib:${ORIGIN}/../plugins:$ORIGIN/x"))
		tr.place("deps/libdep.so", lib("libdep.so"))
		tr.mustPatch([]string{"out"}, none(patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{PreserveOrigin: on}}))
		want := "{root}/deps"
		if on {
			want += ":$ORIGIN:${ORIGIN}/../plugins:$ORIGIN/x"
		}
		if got := tr.runpathOf("out/lib/libo.so"); got != tr.x(want) {
			t.Errorf("preserve-origin %v: %q, want %q", on, got, tr.x(want))
		}
	}
}

// TestNixpkgsOldRunpathReplacedEntirely: the new RUNPATH replaces the old
// one; nothing of it survives but $ORIGIN entries under preserve-origin.
func TestNixpkgsOldRunpathReplacedEntirely(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", withRunpath(exe("libdep.so"), "/opt/vendor/lib:/usr/local/cuda/lib64:$ORIGIN"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	tr.mustPatch([]string{"out"}, none(patch.Config{Search: []string{tr.p("deps")}}))
	if got := tr.runpathOf("out/bin/app"); got != tr.p("deps") {
		t.Errorf("RUNPATH %q", got)
	}
}

func TestNixpkgsIgnoreMissingStar(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libmissing.so.1", "libdep.so", "libcuda.so.1"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	rep := tr.mustPatch([]string{"out"}, none(patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{IgnoreMissing: []string{"*"}}}))
	if len(rep.Missing) != 0 {
		t.Errorf("missing %+v", rep.Missing)
	}
	if d := tr.dep(rep, "out/bin/app", "libmissing.so.1"); d.How != policy.HowIgnored {
		t.Errorf("libmissing.so.1: %+v", d)
	}
	if got := tr.runpathOf("out/bin/app"); got != tr.p("deps") {
		t.Errorf("RUNPATH %q", got)
	}
}

// TestNixpkgsEmptyResultLeavesFileUntouched: with nothing to put in the
// RUNPATH, the RUNPATH is not written (the old one stays), as
// auto-patchelf.py runs patchelf --set-rpath only "if rpath". Without
// resolution notes the file is not written at all. With them (the
// default), the kept RUNPATH gets the note patchelf 0.19.1 writes for it,
// as generate-ld-cache would (cudapatch stops that hook): here a "?"
// element for a directory missing at build time (NixOS/patchelf #659).
func TestNixpkgsEmptyResultLeavesFileUntouched(t *testing.T) {
	for _, notes := range []bool{false, true} {
		tr := newTree(t)
		tr.place("out/lib/libold.so", withRunpath(lib("libold.so", "libc.so.6"), "/old/lib"))
		tr.place("out/lib/libnone.so", lib("libnone.so"))
		tr.place("glibc/lib/libc.so.6", lib("libc.so.6"))
		snap := tr.snapshot()
		rep := tr.mustPatch([]string{"out"}, none(patch.Config{Libc: tr.p("glibc/lib"), NoResolutionCache: !notes}))
		if notes {
			desc, ok := noteOf(t, tr.p("out/lib/libold.so"))
			if !ok || tr.render(desc) != "libc.so.6 ?/old/lib\n" {
				t.Errorf("libold.so's note: %v %q, want libc.so.6 ?/old/lib", ok, desc)
			}
			snap["out/lib/libold.so"] = tr.snapshot()["out/lib/libold.so"]
		}
		tr.unchangedSince(snap)
		if want := map[bool]int{false: 0, true: 1}[notes]; rep.Changed != want || rep.Unchanged != 2-want {
			t.Errorf("notes %v: changed %d, unchanged %d", notes, rep.Changed, rep.Unchanged)
		}
		if got := tr.runpathOf("out/lib/libold.so"); got != "/old/lib" {
			t.Errorf("RUNPATH %q", got)
		}
	}
}

// TestNixpkgsDriverLinkEveryDynamicELF: addDriverRunpath puts the driver
// link first in every dynamic ELF file of every output, libraries included,
// without the trailing empty entry it leaves on an empty RUNPATH.
func TestNixpkgsDriverLinkEveryDynamicELF(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe())
	tr.place("out/lib/libcudart.so.12", lib("libcudart.so.12"))
	tr.place("lib/lib/libx.so", lib("libx.so"))
	tr.mustPatch([]string{"out", "lib"}, patch.Config{})
	for _, rel := range []string{"out/bin/app", "out/lib/libcudart.so.12", "lib/lib/libx.so"} {
		if got := tr.runpathOf(rel); got != drv {
			t.Errorf("%s: %q, want %q", rel, got, drv)
		}
	}
	// Idempotent, unlike addDriverRunpath: a second run changes nothing.
	snap := tr.snapshot()
	rep := tr.mustPatch([]string{"out", "lib"}, patch.Config{})
	tr.unchangedSince(snap)
	if rep.Changed != 0 {
		t.Errorf("second run changed %d files", rep.Changed)
	}
}

// TestNixpkgsStubReplacedByDriverLink: where autoPatchelf would resolve
// libcuda.so.1 to the toolkit's stubs and removeStubsFromRunpathHook would
// swap that entry for the driver link, the result is the driver link in
// front and no stub entry.
func TestNixpkgsStubReplacedByDriverLink(t *testing.T) {
	tr := newTree(t)
	tr.place("out/lib/libtorch_cuda.so", lib("libtorch_cuda.so", "libcuda.so.1", "libcudart.so.12"))
	tr.place("cudart/lib/stubs/libcuda.so.1", lib("libcuda.so.1"))
	tr.place("cudart/lib/libcudart.so.12", lib("libcudart.so.12"))
	rep := tr.mustPatch([]string{"out"}, patch.Config{Search: tr.ps("cudart/lib/stubs", "cudart/lib")})
	if got, want := tr.runpathOf("out/lib/libtorch_cuda.so"), tr.x(drv+":{root}/cudart/lib"); got != want {
		t.Errorf("RUNPATH %q, want %q", got, want)
	}
	if d := tr.dep(rep, "out/lib/libtorch_cuda.so", "libcuda.so.1"); d.How != policy.HowDriver || d.Path != "" || d.Dir != "" {
		t.Errorf("libcuda.so.1: %+v", d)
	}
}

// TestNixpkgsSkippedFiles: symlinks, non-ELF files (linker scripts, text,
// empty files), static executables, separate debug objects and files of
// another architecture than the interpreter are not patched.
func TestNixpkgsSkippedFiles(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe())
	tr.place("out/bin/static", cfix.Spec{Static: true})
	tr.place("out/lib/debug/libx.so.debug", cfix.Spec{Soname: "libx.so", DebugOnly: true, Source: "int x(void) { return 1; }\n"})
	tr.place("out/lib32/libi.so", cfix.Spec{Arch: "i686", Soname: "libi.so"})
	tr.place("out/bin/arm", cfix.Spec{Arch: "aarch64", Exe: true})
	tr.write("out/lib/libc.so", "/* GNU ld script */\nGROUP ( libc.so.6 )\n")
	tr.write("out/share/readme", "hello\n")
	tr.write("out/lib/obj.o", "")
	tr.symlink("out/bin/link", "app")
	snap := tr.snapshot()
	rep := tr.mustPatch([]string{"out"}, patch.Config{Policy: policy.Config{Interpreter: "/lib64/ld-linux-x86-64.so.2"}})
	for rel, want := range map[string]string{
		"out/bin/static":              "static",
		"out/lib/debug/libx.so.debug": "debug-object",
		"out/lib32/libi.so":           "not the interpreter's architecture",
		"out/bin/arm":                 "not the interpreter's architecture",
		"out/lib/libc.so":             "not ELF",
		"out/share/readme":            "not ELF",
		"out/lib/obj.o":               "not ELF",
	} {
		if got := tr.file(rep, rel).Skipped; !strings.Contains(got, want) {
			t.Errorf("%s: skipped %q, want %q", rel, got, want)
		}
	}
	for _, f := range rep.Files {
		if strings.HasSuffix(f.Path, "/link") {
			t.Errorf("the symlink %s was considered", f.Path)
		}
	}
	if rep.Changed != 1 || rep.Skipped != 7 {
		t.Errorf("changed %d skipped %d", rep.Changed, rep.Skipped)
	}
	delete(snap, "out/bin/app")
	now := tr.snapshot()
	for rel, h := range snap {
		if now[rel] != h {
			t.Errorf("%s was written", rel)
		}
	}
}

// TestNixpkgsDebugObjectsNotIndexed: a separate debug object with the
// right name is not a library.
func TestNixpkgsDebugObjectsNotIndexed(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libd.so"))
	tr.place("s1/libd.so", cfix.Spec{Soname: "libd.so", DebugOnly: true, Source: "int x(void) { return 1; }\n"})
	tr.place("s2/libd.so", lib("libd.so"))
	tr.mustPatch([]string{"out"}, none(patch.Config{Search: tr.ps("s1", "s2")}))
	if got := tr.runpathOf("out/bin/app"); got != tr.p("s2") {
		t.Errorf("RUNPATH %q", got)
	}
}

// TestNixpkgsLibsAcceptsFiles: auto-patchelf.py's --libs and --paths take
// single files as well as directories ("Single files and directories are
// accepted"): a library named directly is indexed under its directory.
func TestNixpkgsLibsAcceptsFiles(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libdep.so", "liba.so"))
	tr.place("out/lib/liba.so", lib("liba.so"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	tr.place("deps/libother.so", lib("libother.so"))
	tr.mustPatch([]string{"out/bin/app", "out/lib/liba.so"}, none(patch.Config{Search: []string{tr.p("deps/libdep.so")}}))
	if got, want := tr.runpathOf("out/bin/app"), tr.x("{root}/deps:{root}/out/lib"); got != want {
		t.Errorf("RUNPATH %q, want %q", got, want)
	}
}

// TestNixpkgsInterpreter: the interpreter is set on every file with one
// (PIE or not), never added to a library.
func TestNixpkgsInterpreter(t *testing.T) {
	const ld = "/nix/store/eeee-glibc-2.40-66/lib/ld-linux-x86-64.so.2"
	tr := newTree(t)
	tr.place("out/bin/app", exe())
	tr.place("out/lib/libl.so", lib("libl.so"))
	rep := tr.mustPatch([]string{"out"}, patch.Config{Policy: policy.Config{Interpreter: ld}})
	if got := readDyn(t, tr.p("out/bin/app")).interp; got != ld {
		t.Errorf("app interpreter %q", got)
	}
	if got := readDyn(t, tr.p("out/lib/libl.so")).interp; got != "" {
		t.Errorf("library got interpreter %q", got)
	}
	if f := tr.file(rep, "out/bin/app"); f.Interpreter != ld || f.OldInterpreter != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("report: %q -> %q", f.OldInterpreter, f.Interpreter)
	}
	// Without an interpreter the old one stays.
	tr2 := newTree(t)
	tr2.place("out/bin/app", exe())
	tr2.mustPatch([]string{"out"}, patch.Config{})
	if got := readDyn(t, tr2.p("out/bin/app")).interp; got != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("interpreter changed to %q", got)
	}
}

// TestSymlinksNeverFollowedOutOfTheTree: neither a link to a file nor a
// link to a directory outside the paths leads to a write outside them.
func TestSymlinksNeverFollowedOutOfTheTree(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libext.so"))
	tr.place("outside/libext.so", lib("libext.so"))
	tr.place("outside/dir/bin/tool", exe())
	tr.symlink("out/lib/libext.so", "{root}/outside/libext.so")
	tr.symlink("out/sub", "{root}/outside/dir")
	tr.symlink("out/bin/tool", "../../outside/dir/bin/tool")
	outside := tr.snapshot()
	for rel := range outside {
		if !strings.HasPrefix(rel, "outside/") {
			delete(outside, rel)
		}
	}
	rep := tr.mustPatch([]string{"out"}, patch.Config{})
	now := tr.snapshot()
	for rel, h := range outside {
		if now[rel] != h {
			t.Errorf("%s, outside the tree, was written", rel)
		}
	}
	var paths []string
	for _, f := range rep.Files {
		paths = append(paths, f.Path)
	}
	if want := tr.ps("out/bin/app"); !slices.Equal(paths, want) {
		t.Errorf("files considered %q, want %q", paths, want)
	}
	// A link into the tree still counts for resolving (as auto-patchelf):
	// reached through its target's directory.
	if got, want := tr.runpathOf("out/bin/app"), tr.x(drv+":{root}/outside"); got != want {
		t.Errorf("RUNPATH %q, want %q", got, want)
	}
}

// TestDlopenMissingIsOptional documents a deliberate difference: a
// .note.dlopen entry that nothing satisfies is reported as ignored, not
// missing (auto-patchelf.py fails the build with "any(a, b)").
func TestDlopenMissingIsMissing(t *testing.T) {
	// auto-patchelf resolves .note.dlopen entries like DT_NEEDED: one that
	// no alternative satisfies is missing, named "any(a, b)".
	tr := newTree(t)
	tr.place("out/lib/libplug.so", cfix.Spec{Soname: "libplug.so", Dlopen: `[{"soname":["libnope.so.1","libnope.so.0"]}]`})
	rep, err := tr.patch([]string{"out"}, none(patch.Config{}))
	if !isErr(err, patch.ErrUnsatisfied) || !slices.Equal(tr.missing(rep), []string{"any(libnope.so.1, libnope.so.0) wanted by out/lib/libplug.so"}) {
		t.Errorf("err %v, missing %q", err, tr.missing(rep))
	}
	// An ignore pattern matching one alternative (or the any() name) ignores it.
	rep = tr.mustPatch([]string{"out"}, none(patch.Config{Policy: policy.Config{IgnoreMissing: []string{"libnope.so.0"}}}))
	d := tr.dep(rep, "out/lib/libplug.so", "any(libnope.so.1, libnope.so.0)")
	if d.How != policy.HowIgnored || d.Source != "dlopen" {
		t.Errorf("dep %+v", d)
	}
}
