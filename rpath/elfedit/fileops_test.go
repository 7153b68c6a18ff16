package elfedit_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// fileOpsFixture is a copy of bfd-pie whose libfoo already finds libbar, so
// that only main's RUNPATH decides whether main runs.
func fileOpsFixture(t *testing.T) fixtures.Fixture {
	t.Helper()
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(originLib)}, elfedit.Options{})
	require.NoError(t, err)
	return fx
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	return st.Sys().(*syscall.Stat_t)
}

// oneLine checks the error names path once, at the start, on one line.
func oneLine(t *testing.T, err error, path string) {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	assert.NotContains(t, msg, "\n", "error message is one line")
	assert.True(t, strings.HasPrefix(msg, path+": "), "error %q does not start with the path", msg)
	assert.Equal(t, 1, strings.Count(msg, path), "error %q names the path more than once", msg)
}

// TestHardLinks: by default a file with several links is refused (editing
// it in place would change every link); with BreakHardLinks the path gets
// an edited copy and the other link keeps the old bytes. Mode bits
// (setuid, setgid included) and ownership stay.
func TestHardLinks(t *testing.T) {
	t.Parallel()
	long := func(fx fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: str(pad(300, fx.LibDir))} }
	short := func(fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: str(originMain)} }
	for name, mk := range map[string]func(fixtures.Fixture) elfedit.Edit{"in-place": short, "region": long} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := fileOpsFixture(t)
			other := filepath.Join(fx.Dir, "bin", "main-link")
			require.NoError(t, os.Link(fx.Exe, other))
			require.NoError(t, os.Chown(fx.Exe, 1234, 5678))
			require.NoError(t, os.Chmod(fx.Exe, 0o755|os.ModeSetuid|os.ModeSetgid))
			orig := readFile(t, fx.Exe)
			ino := stat(t, fx.Exe).Ino

			_, err := elfedit.EditFile(fx.Exe, mk(fx), elfedit.Options{})
			require.ErrorIs(t, err, elfedit.ErrHardLinks)
			oneLine(t, err, fx.Exe)
			assert.True(t, bytes.Equal(orig, readFile(t, fx.Exe)), "refused edit changed the file")
			assert.Equal(t, ino, stat(t, fx.Exe).Ino)

			res, err := elfedit.EditFile(fx.Exe, mk(fx), elfedit.Options{BreakHardLinks: true})
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.True(t, bytes.Equal(orig, readFile(t, other)), "the other link changed")
			st := stat(t, fx.Exe)
			assert.NotEqual(t, ino, st.Ino, "the path should be a new file")
			assert.Equal(t, uint64(1), uint64(st.Nlink))
			assert.Equal(t, uint64(1), uint64(stat(t, other).Nlink))
			assert.Equal(t, uint32(0o755|syscall.S_ISUID|syscall.S_ISGID), st.Mode&0o7777, "mode bits")
			assert.Equal(t, [2]uint32{1234, 5678}, [2]uint32{st.Uid, st.Gid}, "owner")
			checkWant(t, fx.Exe, expect(info(t, other), mk(fx)))
			// Run it without the setuid bit: set-user-ID to 1234, it could
			// not enter the test's private temp dir, nor use $ORIGIN.
			require.NoError(t, os.Chmod(fx.Exe, 0o755))
			assert.NoError(t, runs(t, fx)(fx.Exe))
			leftovers, err := filepath.Glob(filepath.Join(fx.Dir, "bin", ".*"))
			require.NoError(t, err)
			assert.Empty(t, leftovers, "temporary files left behind")
		})
	}
}

// TestModeKept edits files with unusual modes in place: the inode, the
// mode bits (setuid, setgid, sticky) and the owner stay.
func TestModeKept(t *testing.T) {
	t.Parallel()
	for _, mode := range []os.FileMode{0o755 | os.ModeSetuid, 0o750 | os.ModeSetgid, 0o700 | os.ModeSetuid | os.ModeSetgid | os.ModeSticky, 0o555} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			fx := fileOpsFixture(t)
			require.NoError(t, os.Chown(fx.Exe, 4321, 8765))
			require.NoError(t, os.Chmod(fx.Exe, mode))
			before := stat(t, fx.Exe)
			_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}, elfedit.Options{Sync: true})
			if os.Getuid() != 0 && mode&0o200 == 0 {
				// Not writable and not root: refused, named, untouched.
				oneLine(t, err, fx.Exe)
				assert.ErrorIs(t, err, os.ErrPermission)
				return
			}
			require.NoError(t, err)
			after := stat(t, fx.Exe)
			assert.Equal(t, before.Ino, after.Ino)
			assert.Equal(t, before.Mode, after.Mode)
			assert.Equal(t, [2]uint32{before.Uid, before.Gid}, [2]uint32{after.Uid, after.Gid})
			require.NoError(t, os.Chmod(fx.Exe, 0o755)) // see TestHardLinks
			assert.NoError(t, runs(t, fx)(fx.Exe))
		})
	}
}

// TestReadOnlyFile: a file without write permission can be edited only by
// root (who ignores the permission); anyone else gets an error that names
// the path, and the file is unchanged. The test runs one branch or the
// other depending on who runs it.
func TestReadOnlyFile(t *testing.T) {
	t.Parallel()
	fx := fileOpsFixture(t)
	require.NoError(t, os.Chmod(fx.Exe, 0o444))
	orig := readFile(t, fx.Exe)
	_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(originMain)}, elfedit.Options{})
	if os.Getuid() == 0 {
		require.NoError(t, err)
		assert.Equal(t, uint32(0o444), stat(t, fx.Exe).Mode&0o7777)
		return
	}
	oneLine(t, err, fx.Exe)
	assert.ErrorIs(t, err, os.ErrPermission)
	assert.True(t, bytes.Equal(orig, readFile(t, fx.Exe)))
}

// TestSymlink: EditFile follows a symbolic link and edits the file it
// names; the link stays a link to the same place. With BreakHardLinks the
// edited copy replaces the link's target, not the link.
func TestSymlink(t *testing.T) {
	t.Parallel()
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		fx := fileOpsFixture(t)
		link := filepath.Join(fx.Dir, "bin", "main-symlink")
		require.NoError(t, os.Symlink("main", link))
		_, err := elfedit.EditFile(link, elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}, elfedit.Options{})
		require.NoError(t, err)
		target, err := os.Readlink(link)
		require.NoError(t, err)
		assert.Equal(t, "main", target)
		assert.Equal(t, pad(300, fx.LibDir), *info(t, fx.Exe).RunPath)
		assert.NoError(t, runs(t, fx)(fx.Exe))
	})
	t.Run("hard-linked-target", func(t *testing.T) {
		t.Parallel()
		fx := fileOpsFixture(t)
		link := filepath.Join(fx.Dir, "bin", "main-symlink")
		require.NoError(t, os.Symlink("main", link))
		other := filepath.Join(fx.Dir, "main-hardlink")
		require.NoError(t, os.Link(fx.Exe, other))
		orig := readFile(t, fx.Exe)
		_, err := elfedit.EditFile(link, elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}, elfedit.Options{})
		require.ErrorIs(t, err, elfedit.ErrHardLinks)
		oneLine(t, err, link)
		_, err = elfedit.EditFile(link, elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}, elfedit.Options{BreakHardLinks: true})
		require.NoError(t, err)
		st, err := os.Lstat(link)
		require.NoError(t, err)
		assert.Equal(t, os.ModeSymlink, st.Mode().Type(), "the symlink was replaced")
		assert.Equal(t, pad(300, fx.LibDir), *info(t, fx.Exe).RunPath, "the target was not edited")
		assert.True(t, bytes.Equal(orig, readFile(t, other)), "the other hard link changed")
		assert.NoError(t, runs(t, fx)(fx.Exe))
	})
}

// TestDryRun plans and verifies but writes nothing, and reports what the
// result would be.
func TestDryRun(t *testing.T) {
	t.Parallel()
	fx := fileOpsFixture(t)
	orig := readFile(t, fx.Exe)
	w := watchFile(t, fx.Exe)
	e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), Interpreter: str(longInterp(t, fx, 200))}
	res, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{DryRun: true})
	require.NoError(t, err)
	// EditFile's read, taken from the queue before ours closes: inotify
	// merges two like events queued back to back and unread.
	events := w.settle(t, 1)
	assert.True(t, res.Changed)
	assert.Equal(t, elfedit.Region, res.Plan.Strategy)
	assert.Equal(t, *e.SetPath, *res.After.RunPath)
	assert.Equal(t, *e.Interpreter, res.After.Interpreter)
	assert.True(t, bytes.Equal(orig, readFile(t, fx.Exe)))
	events |= w.settle(t, 1) // ours
	assert.Zero(t, events&(syscall.IN_CLOSE_WRITE|syscall.IN_MODIFY))
}

// TestErrorsNamePath: every EditFile error starts with the path, once, and
// is one line; the file is unchanged.
func TestErrorsNamePath(t *testing.T) {
	t.Parallel()
	fx := fileOpsFixture(t)
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script.sh")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755))
	truncated := filepath.Join(dir, "truncated")
	require.NoError(t, os.WriteFile(truncated, readFile(t, fx.Exe)[:3000], 0o755))
	shortMagic := filepath.Join(dir, "short-magic")
	require.NoError(t, os.WriteFile(shortMagic, []byte("\x7fELF\x02\x01\x01"), 0o755))
	shortOther := filepath.Join(dir, "short-other")
	require.NoError(t, os.WriteFile(shortOther, []byte("\x7fEL"), 0o755))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	static := fixtures.ByName(t, "static").Copy(t).Exe
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	long := elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}
	for _, c := range []struct {
		name, path string
		edit       elfedit.Edit
		is         error
	}{
		{"missing", filepath.Join(dir, "missing"), long, os.ErrNotExist},
		{"directory", dir, long, nil},
		{"fifo", fifo, long, nil},
		{"not-elf", notELF, long, elfedit.ErrNotELF},
		{"truncated", truncated, long, nil},
		// The magic and less than an identification: a truncated ELF
		// file, not a file to pass over.
		{"truncated-identification", shortMagic, long, new(elfedit.FormatError)},
		{"short-not-elf", shortOther, long, elfedit.ErrNotELF},
		{"symlink-loop", loop, long, nil},
		{"static", static, long, elfedit.ErrNotDynamic},
		{"no-interpreter", fx.Libs[1], elfedit.Edit{Interpreter: str("/lib/ld.so")}, elfedit.ErrNoInterpreter},
		{"empty-entry", fx.Exe, elfedit.Edit{SetPath: str("/a::/b")}, nil},
		{"nul", fx.Exe, elfedit.Edit{Soname: str("a\x00b")}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before []byte
			if st, err := os.Stat(c.path); err == nil && st.Mode().IsRegular() {
				before = readFile(t, c.path)
			}
			_, err := elfedit.EditFile(c.path, c.edit, elfedit.Options{})
			oneLine(t, err, c.path)
			if fe, ok := c.is.(*elfedit.FormatError); ok {
				assert.ErrorAs(t, err, &fe)
				assert.NotErrorIs(t, err, elfedit.ErrNotELF)
			} else if c.is != nil {
				assert.ErrorIs(t, err, c.is)
			}
			if before != nil {
				assert.True(t, bytes.Equal(before, readFile(t, c.path)), "file changed")
			}
		})
	}
}
