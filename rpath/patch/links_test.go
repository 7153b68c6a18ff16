package patch_test

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
)

// TestLinkRoots: a symbolic link named as a path to patch is followed when
// it leads into its own directory or below a directory being patched; its
// target is decided and written once, counted once, even when the target
// is named too or walked. A link that leads elsewhere, or nowhere, is an
// error naming it, and nothing is written.
func TestLinkRoots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		roots []string
		files []string // the report's files, in order; nil: an error
		err   []string // what the error names
	}{
		{"link to its directory", []string{"out/lib/libe.so"}, []string{"out/lib/libe.so.1"}, nil},
		{"link and its target", []string{"out/lib/libe.so", "out/lib/libe.so.1"}, []string{"out/lib/libe.so.1"}, nil},
		{"target and its link", []string{"out/lib/libe.so.1", "out/lib/libe.so"}, []string{"out/lib/libe.so.1"}, nil},
		{"link to a directory", []string{"out/lib64"}, []string{"out/lib/libe.so.1"}, nil},
		{"tree and a link below it", []string{"out", "out/bin/app", "out/lib/libe.so"}, []string{"out/lib/libe.so.1", "out/libexec/app"}, nil},
		{"link into a directory root", []string{"out/libexec", "out/bin/app"}, []string{"out/libexec/app"}, nil},
		{"link out of its directory", []string{"out/bin/app"}, nil, []string{"{root}/out/bin/app", "{root}/out/libexec/app", "not followed"}},
		{"link out of the tree", []string{"out", "out/lib/libout.so"}, nil, []string{"{root}/out/lib/libout.so", "{root}/deps/libdep.so", "not followed"}},
		{"link to nothing", []string{"out/lib/libgone.so"}, nil, []string{"{root}/out/lib/libgone.so", "leads nowhere"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t)
			tr.place("out/lib/libe.so.1", lib("libe.so.1", "libdep.so"))
			tr.symlink("out/lib/libe.so", "libe.so.1")
			tr.symlink("out/lib/libout.so", "../../deps/libdep.so")
			tr.symlink("out/lib/libgone.so", "libgone.so.1")
			tr.symlink("out/lib64", "lib")
			tr.place("out/libexec/app", exe("libe.so.1"))
			tr.symlink("out/bin/app", "../libexec/app")
			tr.place("deps/libdep.so", lib("libdep.so"))
			opts := patch.Config{Search: []string{tr.p("deps"), tr.p("out/lib")}}
			if tc.files == nil {
				snap := tr.snapshot()
				_, err := patch.Run(t.Context(), &opts, tr.ps(tc.roots...))
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), tr.x(w)) {
						t.Errorf("error %q does not name %q", err, tr.x(w))
					}
				}
				if strings.Contains(tc.name, "out of") && !errors.Is(err, patch.ErrLinkOut) {
					t.Errorf("error %v is not ErrLinkOut", err)
				}
				tr.unchangedSince(snap)
				return
			}
			rep := tr.mustPatch(tc.roots, opts)
			var got []string
			for _, f := range rep.Files {
				got = append(got, f.Path)
			}
			if want := tr.ps(tc.files...); !slices.Equal(got, want) {
				t.Errorf("files %q, want %q", got, want)
			}
			if rep.Changed != len(tc.files) || rep.Unchanged+rep.Skipped+rep.Failed != 0 {
				t.Errorf("counted %d changed, %d unchanged, %d skipped, %d failed; want %d changed",
					rep.Changed, rep.Unchanged, rep.Skipped, rep.Failed, len(tc.files))
			}
			if got, want := tr.runpathOf("out/lib/libe.so.1"), tr.x("/run/opengl-driver/lib:{root}/deps"); slices.Contains(tc.files, "out/lib/libe.so.1") && got != want {
				t.Errorf("libe.so.1: RUNPATH %q, want %q", got, want)
			}
			for _, l := range []string{"out/lib/libe.so", "out/lib64", "out/bin/app"} {
				if mode(t, tr.p(l)).Type() != fs.ModeSymlink {
					t.Errorf("%s is no longer a link", l)
				}
			}
		})
	}
}
