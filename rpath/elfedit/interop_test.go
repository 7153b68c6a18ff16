package elfedit_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestPatchelfAfterUs: a file cudapatch laid out must survive a later run
// of an older patchelf, as nixpkgs' builds make one (a hook that runs after
// cudaPatchelfHook, a postFixup script). Debian's patchelf 0.14.3, like
// nixpkgs' 0.15–0.18, makes room for a program header by moving the
// sections below the grown table that it finds by walking the section
// headers in index order; with headers out of offset order it overwrote
// .gnu.hash and the program died in ld.so's _dl_setup_hash. For every
// dynamic variant: our edit with a note and a longer RUNPATH (a region,
// its program header table grown by two), section headers in offset order
// afterwards, then patchelf --set-rpath with a longer path still, and the
// result must run and load wherever patchelf's own edit of the pristine
// file does.
func TestPatchelfAfterUs(t *testing.T) {
	t.Parallel()
	pe, err := exec.LookPath("patchelf")
	require.NoError(t, err, "patchelf (Debian package patchelf) is needed")
	for _, orig := range dynamic(t) {
		t.Run(orig.Name, func(t *testing.T) {
			t.Parallel()
			fx := orig.Copy(t)
			control := orig.Copy(t)
			use := map[string]func(string) error{"main": runs(t, fx), "libfoo": loads(t, fx)}
			compared := 0
			// libfoo first: main loads it, and it loads libbar through its
			// RUNPATH.
			for _, file := range []string{"libfoo", "main"} {
				path := map[string]string{"main": fx.Exe, "libfoo": fx.Libs[0]}[file]
				rel, err := filepath.Rel(fx.Dir, path)
				require.NoError(t, err)
				_, err = elfedit.EditFile(path, elfedit.Edit{
					SetPath: str(pad(120, fx.LibDir)),
					SetNote: cacheNote("interop", 300),
					Derived: []elfedit.NoteID{cacheID},
				}, elfedit.Options{})
				require.NoError(t, err, file)
				sortedSections(t, path)
				require.NoError(t, use[file](path), "%s after our edit", file)

				longer := pad(400, fx.LibDir)
				ctl := filepath.Join(control.Dir, rel)
				out, err := exec.Command(pe, "--set-rpath", longer, ctl).CombinedOutput()
				require.NoError(t, err, "patchelf on the pristine %s: %s", file, out)
				if err := map[string]func(string) error{"main": runs(t, control), "libfoo": loads(t, control)}[file](ctl); err != nil {
					t.Logf("%s: patchelf's own edit of the pristine file fails (%v); nothing to compare", file, err)
					continue
				}
				compared++
				out, err = exec.Command(pe, "--set-rpath", longer, path).CombinedOutput()
				require.NoError(t, err, "patchelf after us on %s: %s", file, out)
				assert.NoError(t, use[file](path), "%s: patchelf's edit after ours", file)
			}
			if t.Failed() {
				keepOnFailure(t, fx)
			}
			t.Logf("%d of 2 files compared", compared)
		})
	}
}

// sortedSections fails unless the section headers are in file offset order
// (section 0 first).
func sortedSections(t testing.TB, path string) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	for i := 2; i < len(f.Sections); i++ {
		if f.Sections[i].Offset < f.Sections[i-1].Offset {
			t.Errorf("%s: section [%d] %s at 0x%x comes after [%d] %s at 0x%x", filepath.Base(path),
				i, f.Sections[i].Name, f.Sections[i].Offset, i-1, f.Sections[i-1].Name, f.Sections[i-1].Offset)
		}
	}
}
