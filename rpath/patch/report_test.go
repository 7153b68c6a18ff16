package patch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// busyTree fills tr with a package that exercises every rule at once:
// duplicates across search dirs and outputs, stubs, driver libraries,
// dlopen notes, links, and files to skip.
func busyTree(tr *tree) {
	for i := range 16 {
		needed := []string{fmt.Sprintf("libdep%d.so", i%5), "libdup.so", "libcuda.so.1"}
		if i > 0 {
			needed = append(needed, fmt.Sprintf("libo%d.so", i-1))
		}
		tr.place(fmt.Sprintf("out/lib/libo%d.so", i), withRunpath(lib(fmt.Sprintf("libo%d.so", i), needed...), "$ORIGIN:/old/lib"))
	}
	for i := range 5 {
		tr.place(fmt.Sprintf("s%d/libdep%d.so", i%2, i), lib(fmt.Sprintf("libdep%d.so", i)))
		tr.place(fmt.Sprintf("s%d/libdep%d.so", (i+1)%2, i), lib(fmt.Sprintf("libdep%d.so", i)))
	}
	tr.place("s0/libdup.so", lib("libdup.so"))
	tr.place("s1/libdup.so", lib("libdup.so"))
	tr.place("cuda/lib/stubs/libcuda.so.1", lib("libcuda.so.1"))
	tr.place("out/lib/libplug.so", cfix.Spec{Soname: "libplug.so", Dlopen: `[{"soname":["libdep3.so"]}]`})
	for i := range 4 {
		tr.place(fmt.Sprintf("out/bin/app%d", i), exe("libo15.so", "libdep0.so"))
	}
	tr.symlink("out/lib/libo0.so.1", "libo0.so")
	tr.write("out/share/doc", "text")
}

func busyConfig(tr *tree, jobs int) patch.Config {
	return patch.Config{
		Search: tr.ps("cuda/lib/stubs", "s1", "s0"),
		Policy: policy.Config{
			CudaCompat:     "/nix/store/fff-cuda_compat/compat",
			RuntimeDeps:    []string{"/nix/store/ggg-libGL/lib"},
			PreserveOrigin: true,
			AppendRunpaths: []string{"$ORIGIN/../extra"},
			Interpreter:    "/nix/store/hhh-glibc/lib/ld-linux-x86-64.so.2",
		},
		Jobs: jobs,
	}
}

// TestDeterministic: the same inputs give byte-identical outputs on every
// run, whatever the number of jobs.
func TestDeterministic(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "w") // the same path each time: RUNPATHs name it
	var first map[string][32]byte
	for i, jobs := range []int{1, 8, 8, 1, 3} {
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		tr := &tree{t: t, root: root}
		busyTree(tr)
		before := tr.snapshot()
		rep := tr.mustPatch([]string{"out"}, busyConfig(tr, jobs))
		got := tr.snapshot()
		if i == 0 {
			first = got
			if rep.Changed != 21 {
				t.Fatalf("changed %d files, want 21", rep.Changed)
			}
			if maps.Equal(before, got) {
				t.Fatal("nothing was written")
			}
			continue
		}
		for rel, h := range first {
			if got[rel] != h {
				t.Errorf("run %d (jobs %d): %s differs from the first run", i, jobs, rel)
			}
		}
	}
}

// TestDryRunWritesNothing: a dry run decides what a real run then writes.
func TestDryRunWritesNothing(t *testing.T) {
	tr := newTree(t)
	busyTree(tr)
	snap := tr.snapshot()
	cfg := busyConfig(tr, 4)
	cfg.Write.DryRun = true
	dry, err := tr.patch([]string{"out"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.unchangedSince(snap)
	if dry.Written || dry.Changed != 21 {
		t.Errorf("dry run: written %v, changed %d", dry.Written, dry.Changed)
	}
	real := tr.mustPatch([]string{"out"}, busyConfig(tr, 4))
	for i, f := range dry.Files {
		if f.Path != real.Files[i].Path || f.RunPath != real.Files[i].RunPath || f.Changed != real.Files[i].Changed {
			t.Errorf("%s: dry run decided %q (%v), the run %q (%v)", f.Path, f.RunPath, f.Changed, real.Files[i].RunPath, real.Files[i].Changed)
		}
		if f.Changed {
			if got := readDyn(t, f.Path).runpath; !slices.Equal(got, []string{f.RunPath}) {
				t.Errorf("%s: RUNPATH %q, dry run decided %q", f.Path, got, f.RunPath)
			}
		}
	}
}

// TestJSONReport: the report marshals to JSON that holds every decision:
// every file, its old and new RUNPATH and interpreter, every dependency
// and how it was satisfied, and the missing ones.
func TestJSONReport(t *testing.T) {
	tr := newTree(t)
	busyTree(tr)
	tr.place("out/bin/broken", exe("libnowhere.so"))
	tr.place("out/bin/ignoring", exe("libignored.so.1"))
	cfg := busyConfig(tr, 2)
	cfg.Policy.IgnoreMissing = append(cfg.Policy.IgnoreMissing, "libignored*")
	rep, err := tr.patch([]string{"out"}, cfg)
	if !isErr(err, patch.ErrUnsatisfied) {
		t.Fatalf("err %v", err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back patch.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(back.Files) != len(rep.Files) || len(back.Files) != 24 {
		t.Fatalf("%d files in JSON, %d in the report", len(back.Files), len(rep.Files))
	}
	hows := map[string]int{}
	for i, f := range rep.Files {
		g := back.Files[i]
		if g.Path != f.Path || g.RunPath != f.RunPath || g.Changed != f.Changed || g.Skipped != f.Skipped ||
			g.Kind != f.Kind || g.Interpreter != f.Interpreter || g.OldInterpreter != f.OldInterpreter ||
			!slices.Equal(g.Deps, f.Deps) || !eqPtr(g.OldRunPath, f.OldRunPath) {
			t.Errorf("file %d does not round-trip:\n json %+v\n want %+v", i, g, f)
		}
		for _, d := range g.Deps {
			hows[d.How]++
			if d.Name == "" || d.Source == "" {
				t.Errorf("%s: dependency without name or source: %+v", f.Path, d)
			}
		}
	}
	for _, how := range []string{policy.HowStore, policy.HowDriver, policy.HowIgnored, policy.HowMissing} {
		if hows[how] == 0 {
			t.Errorf("no dependency decided %q in %v", how, hows)
		}
	}
	if !slices.Equal(back.Missing, rep.Missing) || len(back.Missing) != 1 || back.Missing[0].Name != "libnowhere.so" {
		t.Errorf("missing %+v", back.Missing)
	}
	// The raw keys a consumer reads.
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"files", "missing", "changed", "unchanged", "skipped", "written"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q key", k)
		}
	}
}

func eqPtr(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestCanceledWritesNothing: a job canceled while it decides stops taking
// files, returns the context's error, and writes nothing, at any number of
// jobs.
func TestCanceledWritesNothing(t *testing.T) {
	for _, jobs := range []int{1, 3} {
		tr := newTree(t)
		busyTree(tr)
		snap := tr.snapshot()
		ctx, cancel := context.WithCancel(context.Background())
		decided := 0
		cfg := busyConfig(tr, jobs)
		cfg.Progress = func(done, total int) {
			decided = done
			if done == 2 {
				cancel()
			}
		}
		rep, err := patch.Run(ctx, &cfg, tr.ps("out"))
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("jobs %d: err %v, want context.Canceled", jobs, err)
		}
		if rep != nil && rep.Written {
			t.Errorf("jobs %d: report says written", jobs)
		}
		if rep == nil || len(rep.Files) == 0 || len(rep.Files) >= 25 || decided >= 25 {
			t.Errorf("jobs %d: decided %d files before stopping; want fewer than the tree's", jobs, decided)
		}
		for _, f := range rep.Files {
			if f == nil {
				t.Errorf("jobs %d: the report holds an undecided file", jobs)
			}
		}
		tr.unchangedSince(snap)
	}
}
