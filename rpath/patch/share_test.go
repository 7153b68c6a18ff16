package patch_test

import (
	"context"
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestLibraryReadOnceForIndexAndDecide: a library of the tree that the
// index probes (a file needs it) and that is decided is opened once for
// both, whichever comes first: a probe of a library not yet decided parks
// its read for the decide, and a library decided first tells the index
// what a probe would read. With one job the order is the tree's.
func TestLibraryReadOnceForIndexAndDecide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]cfix.Spec
	}{
		{"probed before decided", map[string]cfix.Spec{
			"out/bin/prog":    exe("liba.so"),
			"out/lib/liba.so": lib("liba.so", "libb.so"),
			"out/lib/libb.so": lib("libb.so"),
		}},
		{"decided before probed", map[string]cfix.Spec{
			"out/a/liba.so": lib("liba.so", "libb.so"),
			"out/a/libb.so": lib("libb.so"),
			"out/z/prog":    exe("liba.so"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t)
			for rel, s := range tc.files {
				tr.place(rel, s)
			}
			opens := map[string]int{}
			cfg := patch.Config{Jobs: 1, Write: patch.WriteOptions{DryRun: true}}
			patch.CountOpens(&cfg, opens)
			_, err := patch.Run(context.Background(), &cfg, tr.ps("out"))
			require.NoError(t, err)
			want := map[string]int{}
			for rel := range maps.Keys(tc.files) {
				want[tr.p(rel)] = 1
			}
			assert.Equal(t, want, opens, "opens to read each file, to decide it and to probe it")
			// And the run decides as the eager index does (mustPatch).
			rep := tr.mustPatch([]string{"out"}, patch.Config{Jobs: 1})
			assert.Equal(t, len(tc.files), rep.Changed)
			for rel, s := range tc.files {
				for _, n := range s.Needed {
					assert.Equal(t, policy.HowStore, tr.dep(rep, rel, n).How, "%s needs %s", rel, n)
				}
			}
		})
	}
}
