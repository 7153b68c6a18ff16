package patch_test

import (
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// patchelfOptsTree is a small package: an executable and a library that
// need libdep.so from deps/.
func patchelfOptsTree(t *testing.T) *tree {
	tr := newTree(t)
	tr.place("pkg/bin/app", exe("libdep.so"))
	tr.place("pkg/lib/libl.so", lib("libl.so", "libdep.so"))
	tr.place("deps/libdep.so", lib("libdep.so"))
	return tr
}

// TestForceRPath: Policy.ForceRPath writes DT_RPATH only, with no resolution
// note (an old one is removed); the next run with it changes nothing, and
// one without it goes back to DT_RUNPATH with a note.
func TestForceRPath(t *testing.T) {
	tr := patchelfOptsTree(t)
	opts := patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone}}
	want := map[string]string{"pkg/bin/app": tr.p("deps"), "pkg/lib/libl.so": tr.p("deps")}

	tr.mustPatch([]string{"pkg"}, opts) // DT_RUNPATH and a note first
	cfg := opts
	cfg.Policy.ForceRPath = true
	rep := tr.mustPatch([]string{"pkg"}, cfg)
	for rel, rp := range want {
		d := readDyn(t, tr.p(rel))
		if len(d.runpath) != 0 || len(d.rpath) != 1 || d.rpath[0] != rp {
			t.Errorf("%s: DT_RUNPATH %q, DT_RPATH %q; want only DT_RPATH %q", rel, d.runpath, d.rpath, rp)
		}
		f := tr.file(rep, rel)
		if !f.Changed || !f.AsRPath || f.Note != patch.NoteRemoved || f.ResolutionCache != nil {
			t.Errorf("%s: changed %v, as_rpath %v, note %q, cache %v; want changed, as DT_RPATH, the old note removed", rel, f.Changed, f.AsRPath, f.Note, f.ResolutionCache)
		}
	}
	snap := tr.snapshot()
	cfg = opts
	cfg.Policy.ForceRPath = true
	rep = tr.mustPatch([]string{"pkg"}, cfg)
	if rep.Changed != 0 {
		t.Errorf("second --force-rpath run changed %d files", rep.Changed)
	}
	tr.unchangedSince(snap)

	rep = tr.mustPatch([]string{"pkg"}, opts)
	for rel, rp := range want {
		if got := tr.runpathOf(rel); got != rp {
			t.Errorf("%s: RUNPATH %q after a run without --force-rpath, want %q", rel, got, rp)
		}
		if f := tr.file(rep, rel); f.AsRPath || f.Note != patch.NoteWritten {
			t.Errorf("%s: as_rpath %v, note %q", rel, f.AsRPath, f.Note)
		}
	}
}

// TestPageSize: a page size the machine's alignment meets is accepted; a
// larger one is refused for the run when the interpreter says the
// machine, else for each file that would be written; one that is no power
// of two is refused before anything is read. Nothing is written when
// refused.
func TestPageSize(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        uint64
		interpreter bool
		runErr      string // the error of Patch without a report
		fileErr     string // every file's error
	}{
		{name: "4096 on x86_64", size: 4096, interpreter: true},
		{name: "1 on x86_64", size: 1},
		{name: "65536 on x86_64, the interpreter's machine", size: 65536, interpreter: true,
			runErr: "page size 65536 is larger than the 4096 that segments added to EM_X86_64 files are aligned to (the largest page size of that machine's kernels)"},
		{name: "65536 on x86_64 files, no interpreter", size: 65536,
			fileErr: "page size 65536 is larger than the 4096 that segments added to EM_X86_64 files are aligned to (the largest page size of that machine's kernels)"},
		{name: "no power of two", size: 12288, runErr: "page size 12288 is not a power of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := patchelfOptsTree(t)
			opts := patch.Config{Search: []string{tr.p("deps")}, Write: patch.WriteOptions{PageSize: tc.size}}
			if tc.interpreter {
				opts.Policy.Interpreter = hostLoader
			}
			snap := tr.snapshot()
			if tc.runErr == "" && tc.fileErr == "" {
				tr.mustPatch([]string{"pkg"}, opts)
				return
			}
			rep, err := tr.patch([]string{"pkg"}, opts)
			tr.unchangedSince(snap)
			if tc.runErr != "" {
				if rep != nil || err == nil || err.Error() != tc.runErr {
					t.Fatalf("report %v, error %v; want no report and %q", rep != nil, err, tc.runErr)
				}
				return
			}
			if err == nil || rep.Failed != 2 || rep.Written {
				t.Fatalf("error %v, %d failed, written %v; want 2 failed, nothing written", err, rep.Failed, rep.Written)
			}
			for _, f := range rep.Files {
				if len(f.Errors) != 1 || f.Errors[0].Error() != tc.fileErr || f.Errors[0].Kind != patch.ErrorPageSize {
					t.Errorf("%s: errors %q, want %q", f.Path, f.Errors, tc.fileErr)
				}
				if !strings.Contains(err.Error(), f.Path+": "+tc.fileErr) {
					t.Errorf("Patch's error %q does not name %s", err, f.Path)
				}
			}
		})
	}
}
