package patch_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// The main job on a small tree: every native fixture variant (executables
// and libraries written by GNU ld, gold, lld and mold) under one root. The
// ratios against patchelf, on real trees, are bench/run.sh's business; these
// numbers are for spotting regressions and for profiles:
//
//	go test ./rpath/patch -run=- -bench=Patch -benchmem -cpuprofile=cpu.out
//
// With CUDAPATCH_BENCH_TREE=DIR, BenchmarkPatchTree does the same on a copy
// of DIR (for example a tree bench/mktree.py built).

// benchCopy copies src into a fresh directory and returns its path.
func benchCopy(b *testing.B, src string) string {
	b.Helper()
	dst := filepath.Join(b.TempDir(), "out")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		b.Fatal(err)
	}
	return dst
}

// benchFixtureTree copies the native dynamic variants into one directory.
func benchFixtureTree(b *testing.B) string {
	b.Helper()
	root := filepath.Join(b.TempDir(), "out")
	for _, f := range fixtures.Native(b) {
		if f.LibDir == "" {
			continue // static variants: nothing to patch
		}
		if err := os.CopyFS(filepath.Join(root, f.Name), os.DirFS(f.Dir)); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// benchPatch runs the main job on root once per iteration. With write set,
// iterations alternate between two driver links, so every dynamic file is
// really rewritten each time (the second and later edits of a file reuse
// the layout the first one made, as a re-run of the hook would).
func benchPatch(b *testing.B, root string, write bool, jobs int) {
	ctx := context.Background()
	links := []string{policy.DefaultDriverLink, "/run/opengl-driver-bench/lib"}
	opts := func(i int) *patch.Config {
		return &patch.Config{
			Policy: policy.Config{IgnoreMissing: []string{"*"}, DriverLink: links[i%2]},
			Jobs:   jobs,
			Write:  patch.WriteOptions{DryRun: !write},
		}
	}
	// One untimed run: the first rewrite of a file lays it out anew, later
	// ones edit that layout; count the files once.
	rep, err := patch.Run(ctx, opts(1), []string{root})
	if err != nil {
		b.Fatal(err)
	}
	files := len(rep.Files)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rep, err := patch.Run(ctx, opts(i), []string{root})
		if err != nil {
			b.Fatal(err)
		}
		if write && rep.Changed == 0 {
			b.Fatal("nothing was rewritten")
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i*files), "ns/file")
	b.ReportMetric(float64(files), "files")
}

func BenchmarkPatch(b *testing.B) {
	root := benchFixtureTree(b)
	b.Run("decide", func(b *testing.B) { benchPatch(b, root, false, 1) })
	b.Run("write", func(b *testing.B) { benchPatch(b, root, true, 1) })
	b.Run("write/jobs="+strconv.Itoa(runtime.NumCPU()), func(b *testing.B) {
		benchPatch(b, root, true, runtime.NumCPU())
	})
	b.Run("noop", func(b *testing.B) {
		ctx := context.Background()
		opts := patch.Config{Policy: policy.Config{IgnoreMissing: []string{"*"}}, Jobs: 1}
		if _, err := patch.Run(ctx, &opts, []string{root}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			rep, err := patch.Run(ctx, &opts, []string{root})
			if err != nil {
				b.Fatal(err)
			}
			if rep.Changed != 0 {
				b.Fatalf("%d files changed on a second run", rep.Changed)
			}
		}
	})
}

func BenchmarkPatchTree(b *testing.B) {
	src := os.Getenv("CUDAPATCH_BENCH_TREE")
	if src == "" {
		b.Skip("set CUDAPATCH_BENCH_TREE to a directory to patch a copy of it")
	}
	root := benchCopy(b, src)
	b.Run("decide", func(b *testing.B) { benchPatch(b, root, false, runtime.NumCPU()) })
	b.Run("write", func(b *testing.B) { benchPatch(b, root, true, runtime.NumCPU()) })
}
