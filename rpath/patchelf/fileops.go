package patchelf

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// openForPatchelf opens a file to read it, with patchelf's messages.
func openForPatchelf(path string) (*os.File, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, pfErr("getting info about '%s': %s", path, strerror(err))
	}
	if st.IsDir() {
		return nil, 0, pfErr("reading '%s': %s", path, strerror(syscall.EISDIR))
	}
	// A FIFO, socket or device is refused before it is opened: opening a
	// FIFO for reading waits for a writer (patchelf itself does). The
	// open is non-blocking, and checked again, for a path swapped since.
	if !st.Mode().IsRegular() {
		return nil, 0, pfErr("%s: not a regular file", path)
	}
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, pfErr("opening '%s': %s", path, strerror(err))
	}
	if st, err = fd.Stat(); err != nil || !st.Mode().IsRegular() {
		fd.Close()
		return nil, 0, pfErr("%s: not a regular file", path)
	}
	return fd, st.Size(), nil
}

// copyForPatchelf writes the input to --output before the edit, so the
// input stays untouched; like patchelf, the output is written even when
// nothing changes, with the input's permission bits.
func copyForPatchelf(src, dst string) error {
	if same(src, dst) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return pfErr("opening '%s': %s", src, strerror(err))
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return pfErr("getting info about '%s': %s", src, strerror(err))
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return pfErr("open: %s", strerror(err))
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return pfErr("write: %s", strerror(err))
	}
	// A device or a pipe (/dev/null) keeps its own mode.
	if ost, err := out.Stat(); err == nil && ost.Mode().IsRegular() {
		if err := out.Chmod(st.Mode().Perm()); err != nil {
			out.Close()
			return pfErr("fchmod: %s", strerror(err))
		}
	}
	if err := out.Close(); err != nil {
		return pfErr("close: %s", strerror(err))
	}
	return nil
}

func same(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// strerror renders an error the way C's strerror does ("No such file or
// directory"): Go's errno texts are the same words with a lower-case first
// letter.
func strerror(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return err.Error()
	}
	s := errno.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}
