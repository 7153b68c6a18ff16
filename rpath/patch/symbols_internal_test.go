package patch

import (
	"debug/elf"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// TestKeptTreeChecksTheSame: the closure kept between resolving and
// binding (resolvedTree) gives the symbol check the result the whole
// tree gives, every binding and version need included, on programs and
// libraries of this machine spread evenly over /usr/bin and /usr/lib;
// and a name found nowhere stays found nowhere.
func TestKeptTreeChecksTheSame(t *testing.T) {
	var files []string
	for _, root := range []string{"/usr/bin", "/usr/lib/x86_64-linux-gnu"} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && (root == "/usr/bin" || strings.Contains(d.Name(), ".so")) {
				files = append(files, p)
			}
			return nil
		})
	}
	slices.Sort(files)
	cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
	require.NoError(t, err)
	cfg.Loader = ldso.LoaderStock
	read := ldso.ElfReader()
	// Every binding, and as the job checks: problems only, each
	// library's own references bound once in its own closure (which
	// the requesters give).
	chks := []*symcheck.Checker{
		symcheck.New(symcheck.Options{CacheBytes: 8 << 20}),
		symcheck.New(symcheck.Options{CacheBytes: 8 << 20, OnlyProblems: true, Binding: true}),
	}
	const want = 60
	compared := 0
	for i := 0; i < len(files) && compared < want; i += max(1, len(files)/(2*want)) {
		whole, err := ldso.Resolve(cfg, read, files[i])
		if err != nil || len(whole.Needs) == 0 {
			continue // not ELF, or nothing to bind
		}
		var r resolvedTree
		r.keep(whole)
		for _, chk := range chks {
			a, errA := chk.Check(cfg, whole)
			b, errB := chk.Check(cfg, r.tree())
			require.Equal(t, errA, errB, files[i])
			require.Equal(t, a, b, files[i])
		}
		compared++
	}
	require.GreaterOrEqual(t, compared, want/2, "too few ELF files compared on this machine")

	var r resolvedTree
	r.keep(&ldso.Tree{Path: "/x/app", Needs: []*ldso.Need{
		{Name: "libz.so.1", Requester: "/x/app", Path: "/x/lib/libz.so.1", Step: ldso.StepRunPath, Depth: 1},
		{Name: "libnone.so.1", Requester: "/x/app", Depth: 1},
	}})
	kept := r.tree()
	require.Equal(t, "/x/app", kept.Path)
	require.Len(t, kept.Needs, 2)
	require.True(t, kept.Needs[0].Found())
	require.Equal(t, "/x/lib/libz.so.1", kept.Needs[0].Path)
	require.False(t, kept.Needs[1].Found())
	require.Equal(t, []*ldso.Need{kept.Needs[1]}, kept.Missing())
}

// TestNoDir: the loader simulation's reader refuses a path at once when
// its directory is absent or a file, and only then; ".." after a link is
// resolved by the kernel, not cleaned; an answer is remembered.
func TestNoDir(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"lib", "deep/er", "deep/lib"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	require.NoError(t, os.Symlink(filepath.Join(root, "deep/er"), filepath.Join(root, "link")))
	var seen sync.Map
	for _, c := range []struct {
		path string
		want error
	}{
		{"lib/libx.so", nil},
		{"lib/absent.so", nil}, // the file is the reader's to miss
		{"nodir/libx.so", syscall.ENOENT},
		{"nodir/glibc-hwcaps/x86-64-v3/libx.so", syscall.ENOENT},
		{"file/libx.so", syscall.ENOTDIR},
		{"link/../lib/libx.so", nil}, // deep/lib; root/lib too, but:
		{"link/../er/libx.so", nil},  // deep/er, while root/er is absent
		{"lib/../nodir/libx.so", syscall.ENOENT},
	} {
		require.Equal(t, c.want, noDir(&seen, root+"/"+c.path), c.path) // not Join: it cleans
	}
	require.NoError(t, noDir(&seen, "/libx.so"), "the root directory")
	t.Chdir(root)
	require.NoError(t, noDir(&seen, "libx.so"), "the working directory")
	require.Equal(t, syscall.ENOENT, noDir(&seen, "nodir/libx.so"), "relative")
	require.NoError(t, os.Remove(filepath.Join(root, "deep/lib")))
	require.NoError(t, noDir(&seen, root+"/link/../lib/x.so"), "remembered")
	require.Equal(t, syscall.ENOENT, noDir(&seen, root+"/link/../lib/./x.so"), "another spelling is asked again")
}
