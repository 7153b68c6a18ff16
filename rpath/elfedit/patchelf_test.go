package elfedit_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// patchelfArgs is the patchelf command line that makes the same change as
// e (patchelf --set-rpath converts DT_RPATH to DT_RUNPATH like TagRunPath;
// --force-rpath is TagRPath).
func patchelfArgs(e elfedit.Edit, path string) []string {
	var args []string
	if e.SetPath != nil {
		if e.Tag == elfedit.TagRPath {
			args = append(args, "--force-rpath")
		}
		args = append(args, "--set-rpath", *e.SetPath)
	}
	if e.RemovePath {
		args = append(args, "--remove-rpath")
	}
	if e.Interpreter != nil {
		args = append(args, "--set-interpreter", *e.Interpreter)
	}
	if e.Soname != nil {
		args = append(args, "--set-soname", *e.Soname)
	}
	for _, n := range e.AddNeeded {
		args = append(args, "--add-needed", n)
	}
	for _, n := range e.RemoveNeeded {
		args = append(args, "--remove-needed", n)
	}
	for _, r := range e.ReplaceNeeded {
		args = append(args, "--replace-needed", r.Old, r.New)
	}
	return append(args, path)
}

// TestPatchelfDifferential makes the same edits with Debian's patchelf and
// with EditFile on two copies of each native variant. Wherever patchelf's
// result runs and loads, ours must too, and both must read back with the
// same values.
func TestPatchelfDifferential(t *testing.T) {
	t.Parallel()
	pe, err := exec.LookPath("patchelf")
	require.NoError(t, err, "patchelf (Debian package patchelf) is needed")
	type fileEdit struct {
		file string
		edit func(t *testing.T, fx fixtures.Fixture) elfedit.Edit
	}
	path := func(n int, tag elfedit.PathTag) []fileEdit {
		mk := func(short string) func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
				if n == 0 {
					return elfedit.Edit{SetPath: str(short), Tag: tag}
				}
				return elfedit.Edit{SetPath: str(pad(n, fx.LibDir)), Tag: tag}
			}
		}
		return []fileEdit{{"libfoo", mk(originLib)}, {"main", mk(originMain)}}
	}
	base := path(0, elfedit.TagRunPath)
	cases := map[string][]fileEdit{
		"runpath-short": base,
		"runpath-long":  path(200, elfedit.TagRunPath),
		"runpath-4k":    path(4096, elfedit.TagRunPath),
		"force-rpath":   path(300, elfedit.TagRPath),
		"interp": append(slices.Clone(base), fileEdit{"main", func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{Interpreter: str(longInterp(t, fx, 200))}
		}}),
		"runpath+interp": {{"libfoo", path(0, 0)[0].edit}, {"main", func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetPath: str(pad(500, fx.LibDir)), Interpreter: str(longInterp(t, fx, 100))}
		}}},
		"soname": append(slices.Clone(base),
			fileEdit{"libbar", func(*testing.T, fixtures.Fixture) elfedit.Edit { return elfedit.Edit{Soname: str("libbar.so.1.2.3.4")} }},
			fileEdit{"libfoo", func(*testing.T, fixtures.Fixture) elfedit.Edit { return elfedit.Edit{Soname: str("libf.so")} }}),
		"needed": append(slices.Clone(base),
			fileEdit{"main", func(*testing.T, fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{AddNeeded: []string{"libbaz.so"}}
			}},
			fileEdit{"libfoo", func(*testing.T, fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libbar.so", New: "libbar-renamed-copy.so"}}}
			}},
			fileEdit{"main", func(*testing.T, fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{RemoveNeeded: []string{"libbaz.so"}}
			}}),
	}
	for _, orig := range fixtures.Native(t) {
		if orig.Static {
			continue
		}
		for name, edits := range cases {
			t.Run(orig.Name+"/"+name, func(t *testing.T) {
				t.Parallel()
				theirs, ours := orig.Copy(t), orig.Copy(t)
				for _, fx := range []fixtures.Fixture{theirs, ours} {
					for _, n := range []string{"libbaz.so", "libbar-renamed-copy.so"} {
						copyFile(t, filepath.Join(fx.LibDir, "libbar.so"), filepath.Join(fx.LibDir, n))
					}
				}
				file := func(fx fixtures.Fixture, f string) string {
					return map[string]string{"main": fx.Exe, "libfoo": fx.Libs[0], "libbar": fx.Libs[1]}[f]
				}
				for i, fe := range edits {
					e := fe.edit(t, ours)
					if out, err := exec.Command(pe, patchelfArgs(e, file(theirs, fe.file))...).CombinedOutput(); err != nil {
						t.Logf("step %d: patchelf %s failed: %v: %s", i, fe.file, err, strings.TrimSpace(string(out)))
					}
					_, err := elfedit.EditFile(file(ours, fe.file), e, elfedit.Options{})
					require.NoError(t, err, "step %d: %s", i, fe.file)
				}
				for _, f := range []string{"main", "libfoo", "libbar"} {
					assert.Equal(t, wantOf(info(t, file(theirs, f))), wantOf(info(t, file(ours, f))), "%s: patchelf and elfedit read back differently", f)
				}
				theirErr := runs(t, theirs)(theirs.Exe)
				if theirErr == nil {
					assert.NoError(t, runs(t, ours)(ours.Exe), "patchelf's main runs, ours does not")
				} else {
					t.Logf("patchelf's main does not run: %v", theirErr)
				}
				for _, lib := range []string{"libfoo.so", "libbar.so"} {
					if err := theirs.Load(t, filepath.Join(theirs.LibDir, lib)); err == nil {
						assert.NoError(t, ours.Load(t, filepath.Join(ours.LibDir, lib)), "patchelf's %s loads, ours does not", lib)
					} else {
						t.Logf("patchelf's %s does not load: %v", lib, err)
					}
				}
				// Where patchelf's result draws readelf warnings, say so;
				// ours must draw none (TestMatrix checks that too).
				for _, f := range []string{"main", "libfoo", "libbar"} {
					if _, w := fixtures.Readelf(t, file(theirs, f)); w != "" {
						t.Logf("readelf on patchelf's %s: %s", f, strings.TrimSpace(w))
					}
					_, w := fixtures.Readelf(t, file(ours, f))
					assert.Empty(t, w, "readelf on our %s", f)
				}
			})
		}
	}
}
