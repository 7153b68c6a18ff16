package patch

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWalkTreeIsWalkDir: the parallel walk lists the same regular files
// and directories, in the same order, as filepath.WalkDir one directory at
// a time, whatever the jobs: nested and empty directories, names that sort
// between a directory and its contents, symbolic links (to files and to
// directories, never followed), a FIFO, and without recursion only the
// root's own files.
func TestWalkTreeIsWalkDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		if filepath.Base(p) != "." {
			require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(p), 0o644))
		}
	}
	for i := range 12 {
		for j := range 3 {
			mk(fmt.Sprintf("s%02d-pkg/lib/sub%d/libx%d.so", i, j, j))
		}
		mk(fmt.Sprintf("s%02d-pkg/lib/libz.so.1", i))
		mk(fmt.Sprintf("s%02d-pkg/lib-a", i)) // sorts after lib/, before lib.b
		mk(fmt.Sprintf("s%02d-pkg/lib.b/x", i))
		mk(fmt.Sprintf("s%02d-pkg/bin/prog", i))
	}
	mk("top-file")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "empty/deeper"), 0o755))
	require.NoError(t, os.Symlink("s00-pkg/lib", filepath.Join(root, "dir-link")))
	require.NoError(t, os.Symlink("top-file", filepath.Join(root, "file-link")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "s03-pkg/fifo"), 0o644))

	walkDir := func(recurse bool) (files, dirs []string) {
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			if d.IsDir() && p != root && !recurse {
				return filepath.SkipDir
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			// Special files are listed too, for the main job to count
			// as skipped; symbolic links are not.
			if d.Type().IsRegular() || d.Type()&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice) != 0 {
				files = append(files, p)
			}
			return nil
		}))
		return files, dirs
	}
	for _, recurse := range []bool{true, false} {
		wantFiles, wantDirs := walkDir(recurse)
		for _, jobs := range []int{1, 2, 16} {
			t.Run(fmt.Sprintf("recurse=%v/jobs=%d", recurse, jobs), func(t *testing.T) {
				files, dirs, err := walkTree(context.Background(), openDir(t, root), jobs, recurse)
				require.NoError(t, err)
				assert.Equal(t, wantFiles, files)
				if recurse {
					assert.Equal(t, wantDirs, dirs)
				}
			})
		}
	}
	all, _ := walkDir(true)
	assert.Len(t, all, 12*7+1+1, "the tree the walks are compared on (the FIFO included)")
	some, _ := walkDir(false)
	assert.Equal(t, []string{filepath.Join(root, "top-file")}, some)
}

// TestWalkTreeStops: a walk whose context is done reports it, and a
// directory that cannot be listed stops the walk with its error.
func TestWalkTreeStops(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a/b"), 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := walkTree(ctx, openDir(t, root), 4, true)
	assert.ErrorIs(t, err, context.Canceled)

	// A directory listed as one and gone (here: replaced by a link)
	// when its turn comes: its error, and the link is not followed.
	d := openDir(t, root)
	require.NoError(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "moved")))
	require.NoError(t, os.Symlink("moved", filepath.Join(root, "a")))
	n := &dirNode{path: filepath.Join(root, "a")}
	tw := &treeWalk{ctx: context.Background(), root: d, recurse: true, slots: make(chan struct{}, 1)}
	tw.wg.Add(1)
	tw.list(n, false)
	assert.ErrorIs(t, n.err, confine.ErrEscape)

	_, err = confine.Open(filepath.Join(root, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// openDir opens dir for walkTree, closed with the test.
func openDir(t *testing.T, dir string) *confine.Dir {
	t.Helper()
	d, err := confine.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// TestWriteOrder: the write phase takes the changed files largest first,
// files of one size in the tree's order, and leaves the others out.
func TestWriteOrder(t *testing.T) {
	t.Parallel()
	files := []*fileWork{
		{File: &File{Changed: true}, size: 10},
		{File: &File{Changed: false}, size: 1000},
		{File: &File{Changed: true}, size: 500},
		{File: &File{Changed: true}, size: 10},
		{File: &File{Changed: true}, size: 70},
	}
	assert.Equal(t, []int{2, 4, 0, 3}, writeOrder(files))
	assert.Empty(t, writeOrder([]*fileWork{{File: &File{}, size: 5}}))
}
