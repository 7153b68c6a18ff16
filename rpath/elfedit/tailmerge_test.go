package elfedit_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestEditTailMergedStrings: GNU ld merges a string that ends another
// into it (.dynstr suffix merging), so a library whose DT_NEEDED "bar.so"
// ends its DT_SONAME "libbar.so", which ends its RUNPATH ".../libbar.so",
// keeps the three in one string. An edit that replaces all three (as
// `patchelf --set-soname --replace-needed --set-rpath` does in one call)
// with values no longer than the old ones wrote each in place, each write
// over the bytes of the others: the soname's write cut the RUNPATH short,
// the DT_NEEDED's cut the soname. Overlapping old strings of changed
// entries are now given new places. The result is loaded by the host's
// ld.so, whose --list must find the new DT_NEEDED through the new RUNPATH.
func TestEditTailMergedStrings(t *testing.T) {
	dir := t.TempDir()
	old := "/nonexistent/" + strings.Repeat("p", 120) + "/libbar.so"
	require.Greater(t, len(old), len(dir))
	lib := filepath.Join(dir, "libbar.so")
	cfix.Place(t, cfix.Spec{Soname: "libbar.so", Needed: []string{"bar.so"}, RunPath: old}, lib)
	cfix.Place(t, cfix.Spec{Soname: "baz.so"}, filepath.Join(dir, "baz.so"))

	// The premise: ld put the three values in one string.
	ef, err := elf.Open(lib)
	require.NoError(t, err)
	offs := map[elf.DynTag]uint64{}
	for _, tag := range []elf.DynTag{elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RUNPATH} {
		v, err := ef.DynValue(tag)
		require.NoError(t, err)
		require.Len(t, v, 1, "%v", tag)
		offs[tag] = v[0]
	}
	require.NoError(t, ef.Close())
	require.Equal(t, offs[elf.DT_RUNPATH]+uint64(len(old)-len("libbar.so")), offs[elf.DT_SONAME], "ld did not merge the soname into the RUNPATH")
	require.Equal(t, offs[elf.DT_SONAME]+3, offs[elf.DT_NEEDED], "ld did not merge the DT_NEEDED into the soname")

	_, err = elfedit.EditFile(lib, elfedit.Edit{
		SetPath:       &dir,
		Soname:        str("libzap.so"),
		ReplaceNeeded: []elfedit.Replace{{Old: "bar.so", New: "baz.so"}},
	}, elfedit.Options{})
	require.NoError(t, err)

	f, err := elfedit.Open(lib)
	require.NoError(t, err)
	in := f.Info()
	require.NoError(t, f.Close())
	assert.Equal(t, []string{"baz.so"}, in.Needed)
	assert.Equal(t, "libzap.so", in.Soname)
	if assert.NotNil(t, in.RunPath) {
		assert.Equal(t, dir, *in.RunPath)
	}
	assert.Empty(t, problems(t, lib))

	assert.Contains(t, ldList(t, lib), "baz.so => "+filepath.Join(dir, "baz.so"))
}

// ldList returns what the host's ld.so --list prints for path, whose
// libraries only its RUNPATH may find (LD_LIBRARY_PATH unset), and fails
// the test when the loader refuses it.
func ldList(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command("/lib64/ld-linux-x86-64.so.2", "--list", path)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LD_LIBRARY_PATH=") })
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// TestSlackKeepsOffTheNextSegmentsPage: a library without code (a data
// library, or one linked -nostdlib) has its read-only segment end on a
// page boundary and its writable one start inside the next page. The
// slack layout grew the first segment over the zeros between them, into
// the writable segment's first page: glibc since 2.35 refuses that object
// ("ELF load command address/offset not page-aligned"), and the main job
// did it to every such library it gave a longer RUNPATH. The grown
// segment now keeps off the next segment's pages (the region takes the
// strings instead), Verify names segments that share a page
// (load-page-share), and the host's ld.so loads the result.
func TestSlackKeepsOffTheNextSegmentsPage(t *testing.T) {
	for _, arch := range []string{"", "i686", "aarch64"} {
		t.Run("arch="+arch, func(t *testing.T) {
			dir := t.TempDir()
			lib := filepath.Join(dir, "libdata.so")
			cfix.Place(t, cfix.Spec{Arch: arch, Soname: "libdata.so", Needed: []string{"libdep.so"}, RunPath: "/old"}, lib)
			if arch == "" {
				cfix.Place(t, cfix.Spec{Soname: "libdep.so"}, filepath.Join(dir, "libdep.so"))
			}
			// The premise: a segment starts inside a page, after zeros
			// the first segment could grow over.
			ef, err := elf.Open(lib)
			require.NoError(t, err)
			var loads []*elf.Prog
			for _, p := range ef.Progs {
				if p.Type == elf.PT_LOAD {
					loads = append(loads, p)
				}
			}
			require.NoError(t, ef.Close())
			require.GreaterOrEqual(t, len(loads), 2)
			require.NotZero(t, loads[1].Vaddr%0x1000, "the second segment starts on a page boundary: nothing to test")
			require.Greater(t, loads[1].Off, loads[0].Off+loads[0].Filesz+uint64(len(dir)), "no padding after the first segment to grow over")

			_, err = elfedit.EditFile(lib, elfedit.Edit{SetPath: &dir}, elfedit.Options{})
			require.NoError(t, err)
			assert.NotContains(t, problems(t, lib), "load-page-share")
			if arch != "" {
				return
			}
			assert.Contains(t, ldList(t, lib), "libdep.so => "+filepath.Join(dir, "libdep.so"))
		})
	}
}
