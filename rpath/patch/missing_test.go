package patch_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// TestAllMissingReportedNothingWritten: every unsatisfied dependency of
// every file is reported with the file that wants it, in file order, and
// not one file is written, not even the ones that resolved.
func TestAllMissingReportedNothingWritten(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libmiss1.so", "libdep.so", "libmiss2.so"))
	tr.place("out/lib/libl.so", lib("libl.so", "libmiss1.so"))
	tr.place("out/lib/libok.so", lib("libok.so", "libdep.so"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	snap := tr.snapshot()

	rep, err := tr.patch([]string{"out"}, patch.Config{Search: []string{tr.p("deps")}})
	if !isErr(err, patch.ErrUnsatisfied) {
		t.Fatalf("err = %v, want ErrUnsatisfied", err)
	}
	want := []string{
		"libmiss1.so wanted by out/bin/app",
		"libmiss2.so wanted by out/bin/app",
		"libmiss1.so wanted by out/lib/libl.so",
	}
	if got := tr.missing(rep); !slices.Equal(got, want) {
		t.Errorf("missing:\n got %q\nwant %q", got, want)
	}
	if rep.Written {
		t.Error("report says written")
	}
	tr.unchangedSince(snap)
	// The decisions are still reported.
	if got := tr.file(rep, "out/lib/libok.so").RunPath; got != drv+":"+tr.p("deps") {
		t.Errorf("libok.so decided %q", got)
	}
}

// TestMissingSonameHint: a file whose DT_SONAME matches but whose name does
// not is not taken (the loader opens files by name), and the report says
// why.
func TestMissingSonameHint(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libver.so.1"))
	tr.place("s1/libver.so.1.2.3", lib("libver.so.1"))
	rep, err := tr.patch([]string{"out"}, patch.Config{Search: []string{tr.p("s1")}})
	if !isErr(err, patch.ErrUnsatisfied) {
		t.Fatalf("err = %v", err)
	}
	if len(rep.Missing) != 1 || !strings.Contains(rep.Missing[0].Hint, tr.p("s1/libver.so.1.2.3")) ||
		!strings.Contains(rep.Missing[0].Hint, "libver.so.1") {
		t.Errorf("missing = %+v, want a hint naming s1/libver.so.1.2.3", rep.Missing)
	}
}

// TestStubDirsNeverIndexed: a library found only in a stubs directory is
// missing, whether the stubs directory is a search dir, below a recursive
// search dir, or a RUNPATH entry of a found library.
func TestStubDirsNeverIndexed(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libhop.so", "libcublas.so.12", "libcufft.so.11", "libnvrtc.so.12"))
	tr.place("s1/libhop.so", withRunpath(lib("libhop.so"), "{root}/cuda/lib64/stubs"))
	tr.place("cuda/lib64/stubs/libcublas.so.12", lib("libcublas.so.12"))
	tr.place("tree/cuda/lib/stubs/libcufft.so.11", lib("libcufft.so.11"))
	tr.place("x-cuda_nvrtc-12.4-stubs/lib/libnvrtc.so.12", lib("libnvrtc.so.12"))
	rep, err := tr.patch([]string{"out"},
		patch.Config{
			Search:          tr.ps("s1", "x-cuda_nvrtc-12.4-stubs/lib"),
			SearchRecursive: []string{tr.p("tree")},
		})
	if !isErr(err, patch.ErrUnsatisfied) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"libcublas.so.12 wanted by out/bin/app",
		"libcufft.so.11 wanted by out/bin/app",
		"libnvrtc.so.12 wanted by out/bin/app",
	}
	if got := tr.missing(rep); !slices.Equal(got, want) {
		t.Errorf("missing:\n got %q\nwant %q", got, want)
	}
}

// TestIgnoreExisting: --ignore-existing stops the search through the
// RUNPATH directories of found libraries.
// TestIgnoreExisting: auto-patchelf's --ignore-existing (add_existing=False)
// does not index the libraries of the paths being patched; the search
// directories and their libraries' RUNPATH directories still are.
func TestIgnoreExisting(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		tr := newTree(t)
		tr.place("out/bin/app", exe("libhop.so", "libh.so", "libown.so"))
		tr.place("out/lib/libown.so", lib("libown.so"))
		tr.place("s1/libhop.so", withRunpath(lib("libhop.so"), "{root}/hidden"))
		tr.place("hidden/libh.so", lib("libh.so"))
		rep, err := tr.patch([]string{"out"}, patch.Config{Search: []string{tr.p("s1")}, IgnoreExisting: ignore})
		if !ignore {
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tr.runpathOf("out/bin/app"), tr.x(drv+":{root}/s1:{root}/hidden:{root}/out/lib"); got != want {
				t.Errorf("RUNPATH %q, want %q", got, want)
			}
			continue
		}
		if !isErr(err, patch.ErrUnsatisfied) || !slices.Equal(tr.missing(rep), []string{"libown.so wanted by out/bin/app"}) {
			t.Errorf("ignore-existing: err %v, missing %q", err, tr.missing(rep))
		}
	}
}

// TestIgnoreMissingPatterns: Python fnmatch semantics on the basename,
// case-sensitive.
func TestIgnoreMissingPatterns(t *testing.T) {
	names := []string{"libfoo.so.1", "libbar.so", "libcublas.so.12", "libX11.so.6"}
	tr := newTree(t)
	tr.place("out/bin/app", exe(names...))
	snap := tr.snapshot()
	for _, c := range []struct {
		patterns []string
		missing  []string // still missing
	}{
		{nil, names},
		{[]string{"*"}, nil},
		{[]string{"libfoo.so.1"}, []string{"libbar.so", "libcublas.so.12", "libX11.so.6"}},
		{[]string{"libfoo*"}, []string{"libbar.so", "libcublas.so.12", "libX11.so.6"}},
		{[]string{"lib?ar.so"}, []string{"libfoo.so.1", "libcublas.so.12", "libX11.so.6"}},
		{[]string{"*.so"}, []string{"libfoo.so.1", "libcublas.so.12", "libX11.so.6"}},
		{[]string{"libcublas.so.[0-9]*", "libX11*"}, []string{"libfoo.so.1", "libbar.so"}},
		{[]string{"[!l]*"}, names},
		{[]string{"libx11.so.6"}, names},   // case-sensitive
		{[]string{"*/libfoo.so.1"}, names}, // the basename is matched, no directory
		{[]string{"lib[a-f]*"}, []string{"libX11.so.6"}},
	} {
		rep, err := tr.patch([]string{"out"}, patch.Config{Policy: policy.Config{IgnoreMissing: c.patterns}, Write: patch.WriteOptions{DryRun: true}})
		var got []string
		for _, m := range rep.Missing {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, c.missing) {
			t.Errorf("patterns %q: missing %q, want %q", c.patterns, got, c.missing)
		}
		if (err != nil) != (len(c.missing) > 0) {
			t.Errorf("patterns %q: err %v", c.patterns, err)
		}
		for _, d := range tr.file(rep, "out/bin/app").Deps {
			if want := !slices.Contains(c.missing, d.Name); want != (d.How == policy.HowIgnored) {
				t.Errorf("patterns %q: %s satisfied as %q", c.patterns, d.Name, d.How)
			}
		}
	}
	tr.unchangedSince(snap)
}

// TestAuditErrors: a planned RUNPATH entry under the build directory, a
// relative one, or a stubs directory is an error naming the file and the
// entry, and nothing at all is written.
func TestAuditErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  func(tr *tree) patch.Config
		entry string // the bad entry
		file  string // the file it is reported against
	}{
		{"runtime dependency under /build",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{RuntimeDeps: []string{"/build/source/lib"}}}
			},
			"/build/source/lib", "out/bin/app"},
		{"relative entry appended",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{AppendRunpaths: []string{"lib"}}}
			},
			"lib", "out/bin/app"},
		{"relative runtime dependency",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{RuntimeDeps: []string{"./rt/lib"}}}
			},
			"./rt/lib", "out/bin/app"},
		{"stubs directory appended",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{AppendRunpaths: []string{"/nix/store/x-cuda_cudart-12.4/lib/stubs"}}}
			},
			"/nix/store/x-cuda_cudart-12.4/lib/stubs", "out/bin/app"},
		{"-stubs output appended",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{AppendRunpaths: []string{"/nix/store/x-cuda_cudart-12.4-stubs/lib"}}}
			},
			"/nix/store/x-cuda_cudart-12.4-stubs/lib", "out/lib/libl.so"},
		{"resolved into a build directory",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{BuildDirs: []string{tr.p("build")}}, Search: []string{tr.p("build/deps")}}
			},
			"{root}/build/deps", "out/lib/libl.so"},
		{"cuda_compat under the build directory",
			func(tr *tree) patch.Config {
				return patch.Config{Policy: policy.Config{BuildDirs: []string{tr.p("build")}, CudaCompat: tr.p("build/compat")}}
			},
			"{root}/build/compat", "out/lib/libl.so"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree(t)
			tr.place("out/bin/app", exe())
			tr.place("out/lib/libl.so", lib("libl.so", "libdep.so"))
			tr.place("build/deps/libdep.so", lib("libdep.so"))
			tr.place("deps/libdep.so", lib("libdep.so"))
			snap := tr.snapshot()
			opts := c.opts(tr)
			opts.Search = append(opts.Search, tr.p("deps"))
			rep, err := tr.patch([]string{"out"}, opts)
			if !isErr(err, policy.ErrAudit) {
				t.Fatalf("err = %v, want ErrAudit", err)
			}
			if !strings.Contains(err.Error(), tr.p(c.file)) || !strings.Contains(err.Error(), `"`+tr.x(c.entry)+`"`) {
				t.Errorf("error %q does not name %s and %q", err, c.file, tr.x(c.entry))
			}
			if errs := tr.file(rep, c.file).Errors; len(errs) == 0 || !strings.Contains(errs[0].Error(), tr.x(c.entry)) || errs[0].Kind != patch.ErrorAudit {
				t.Errorf("%s: errors %q", c.file, errs)
			}
			if rep.Written {
				t.Error("report says written")
			}
			tr.unchangedSince(snap)
		})
	}
	// $ORIGIN entries are relative but fine.
	tr := newTree(t)
	tr.place("out/bin/app", exe())
	tr.mustPatch([]string{"out"}, patch.Config{Policy: policy.Config{AppendRunpaths: []string{"$ORIGIN/../lib", "${ORIGIN}"}, RuntimeDeps: []string{"$ORIGIN/rt"}}})
	if got, want := tr.runpathOf("out/bin/app"), drv+":$ORIGIN/rt:$ORIGIN/../lib:${ORIGIN}"; got != want {
		t.Errorf("RUNPATH %q, want %q", got, want)
	}
}
