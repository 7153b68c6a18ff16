// Package confine opens paths below a directory without leaving it: no
// symbolic link is followed and no ".." climbs out, whatever another
// process does to the tree meanwhile. A path checked and then opened by
// name can name another file by the time it is opened (a directory on the
// way swapped for a link out of the tree); a path resolved by the kernel
// from the directory's descriptor cannot. Linux's openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS does it in one call; where the
// kernel lacks it (before 5.6, ENOSYS), each component is opened from its
// parent's descriptor with O_NOFOLLOW. It is a leaf: the standard library
// only.
package confine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// ErrEscape is what a path that meets a symbolic link, or would climb out
// of the directory, fails with.
var ErrEscape = errors.New("a symbolic link or a path out of the tree on the way (not followed)")

// Dir is a directory files are opened below. The zero value is not
// usable; Open makes one. It is safe for concurrent use.
type Dir struct {
	fd   int
	path string
	// noOpenat2 is set once openat2 failed with ENOSYS (or, in tests,
	// to exercise the fallback).
	noOpenat2 atomic.Bool
}

// Open opens the directory at path, following symbolic links in path
// itself (it is the caller's to name); what lies below it is then opened
// without following any.
func Open(path string) (*Dir, error) {
	fd, err := retry(func() (int, error) {
		return syscall.Open(path, oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: filepath.Clean(path)}, nil
}

// Path is the path the directory was opened by, cleaned.
func (d *Dir) Path() string { return d.path }

// Close closes the directory's descriptor.
func (d *Dir) Close() error { return syscall.Close(d.fd) }

// Rel returns path relative to the directory; path must be the directory
// or lie below it (lexically).
func (d *Dir) Rel(path string) (string, error) {
	path = filepath.Clean(path)
	if path == d.path {
		return ".", nil
	}
	prefix := d.path + "/"
	if d.path == "/" {
		prefix = "/"
	}
	if rel, ok := strings.CutPrefix(path, prefix); ok && rel != "" {
		return rel, nil
	}
	return "", fmt.Errorf("%s is not below %s", path, d.path)
}

// OpenFD opens path (the directory, or a path below it) with flags
// (O_CLOEXEC added) and returns the descriptor. No component is a
// symbolic link, the last one included: one fails with ErrEscape.
func (d *Dir) OpenFD(path string, flags int) (int, error) {
	rel, err := d.Rel(path)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	fd, err := d.openRel(rel, flags|syscall.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EXDEV) {
			err = ErrEscape
		}
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// OpenFile is OpenFD as an *os.File.
func (d *Dir) OpenFile(path string, flags int) (*os.File, error) {
	fd, err := d.OpenFD(path, flags)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadDir lists the directory at path (the directory itself or one below
// it), sorted by name, as os.ReadDir does.
func (d *Dir) ReadDir(path string) ([]fs.DirEntry, error) {
	f, err := d.OpenFile(path, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// Stat is fstat of the file at path, opened with O_PATH (no permission
// needed): dev and ino say which file the path names now.
func (d *Dir) Stat(path string) (*syscall.Stat_t, error) {
	fd, err := d.OpenFD(path, oPath)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if _, err := retry(func() (int, error) { return 0, syscall.Fstat(fd, &st) }); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return &st, nil
}

// openHow is the kernel's struct open_how.
type openHow struct {
	flags, mode, resolve uint64
}

const (
	// oPath is O_PATH, which package syscall does not export: 0x200000
	// on every Linux architecture Go supports but sparc64.
	oPath             = 0x200000
	resolveNoSymlinks = 0x04
	resolveBeneath    = 0x08
)

// openat2Trap is openat2's system call number: 437 on every Linux
// architecture Go supports, offset on MIPS as its other calls are.
func openat2Trap() uintptr {
	switch runtime.GOARCH {
	case "mips", "mipsle":
		return 4437
	case "mips64", "mips64le":
		return 5437
	}
	return 437
}

func (d *Dir) openRel(rel string, flags int) (int, error) {
	if !d.noOpenat2.Load() {
		how := openHow{flags: uint64(flags), resolve: resolveBeneath | resolveNoSymlinks}
		p, err := syscall.BytePtrFromString(rel)
		if err != nil {
			return -1, err
		}
		fd, err := retry(func() (int, error) {
			r, _, e := syscall.Syscall6(openat2Trap(), uintptr(d.fd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
			if e != 0 {
				return -1, e
			}
			return int(r), nil
		})
		runtime.KeepAlive(p)
		if !errors.Is(err, syscall.ENOSYS) {
			return fd, err
		}
		d.noOpenat2.Store(true)
	}
	return d.walk(rel, flags)
}

// walk opens rel one component at a time, each from its parent's
// descriptor with O_NOFOLLOW: openat2 without the kernel's help.
func (d *Dir) walk(rel string, flags int) (int, error) {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == ".." {
			return -1, syscall.EXDEV
		}
	}
	cur := d.fd
	closeCur := func() {
		if cur != d.fd {
			syscall.Close(cur)
		}
	}
	for i, p := range parts {
		if p == "" || p == "." {
			if i < len(parts)-1 {
				continue
			}
		}
		last := i == len(parts)-1
		fl := oPath | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
		if last {
			fl = flags | syscall.O_NOFOLLOW
		}
		name := p
		if name == "" {
			name = "."
		}
		fd, err := retry(func() (int, error) { return syscall.Openat(cur, name, fl, 0) })
		if err != nil && !last && errors.Is(err, syscall.ENOTDIR) {
			// O_PATH|O_NOFOLLOW opens a link as itself, and
			// O_DIRECTORY then refuses it: say which.
			if isLink(cur, name) {
				err = syscall.ELOOP
			}
		}
		if err == nil && last && flags&oPath != 0 {
			// O_PATH|O_NOFOLLOW opens a final link as itself.
			var st syscall.Stat_t
			if syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
				syscall.Close(fd)
				fd, err = -1, syscall.ELOOP
			}
		}
		closeCur()
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// isLink reports whether name in the directory dir is a symbolic link.
func isLink(dir int, name string) bool {
	fd, err := retry(func() (int, error) {
		return syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK
}

// retry runs fn until it fails with something other than EINTR.
func retry(fn func() (int, error)) (int, error) {
	for {
		r, err := fn()
		if !errors.Is(err, syscall.EINTR) {
			return r, err
		}
	}
}

// parent opens the directory holding path (below d, or d itself) and
// returns its descriptor and path's last component.
func (d *Dir) parent(path string) (int, string, error) {
	rel, err := d.Rel(path)
	if err != nil || rel == "." {
		return -1, "", &os.PathError{Op: "open", Path: path, Err: errors.New("not below " + d.path)}
	}
	fd, err := d.OpenFD(filepath.Dir(filepath.Clean(path)), oPath|syscall.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, filepath.Base(rel), nil
}

// at runs fn with the descriptor of path's parent and path's last
// component, and names path in its error.
func (d *Dir) at(op, path string, fn func(dir int, name string) error) error {
	dir, name, err := d.parent(path)
	if err != nil {
		return err
	}
	defer syscall.Close(dir)
	if _, err := retry(func() (int, error) { return 0, fn(dir, name) }); err != nil {
		if errors.Is(err, syscall.ELOOP) {
			err = ErrEscape
		}
		return &os.PathError{Op: op, Path: path, Err: err}
	}
	return nil
}

// MkdirAll makes the directory path and those above it below d that are
// missing; an existing component must be a directory, not a link to one.
func (d *Dir) MkdirAll(path string, perm uint32) error {
	rel, err := d.Rel(path)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	cur := d.path
	for _, p := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, p)
		err := d.at("mkdir", cur, func(dir int, name string) error { return syscall.Mkdirat(dir, name, perm) })
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		fd, err := d.OpenFD(cur, oPath|syscall.O_DIRECTORY)
		if err != nil {
			return err
		}
		syscall.Close(fd)
	}
	return nil
}

// Symlink makes a symbolic link at path (its parent below d) to target,
// which is not resolved.
func (d *Dir) Symlink(target, path string) error {
	return d.at("symlink", path, func(dir int, name string) error {
		t, err := syscall.BytePtrFromString(target)
		if err != nil {
			return err
		}
		n, err := syscall.BytePtrFromString(name)
		if err != nil {
			return err
		}
		_, _, e := syscall.Syscall(syscall.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), uintptr(dir), uintptr(unsafe.Pointer(n)))
		runtime.KeepAlive(t)
		runtime.KeepAlive(n)
		if e != 0 {
			return e
		}
		return nil
	})
}

// Rename renames from to to, both below d.
func (d *Dir) Rename(from, to string) error {
	return d.at("rename", from, func(fdir int, fname string) error {
		return d.at("rename", to, func(tdir int, tname string) error {
			return syscall.Renameat(fdir, fname, tdir, tname)
		})
	})
}

// Remove removes the file or link at path (below d); a link is removed,
// not what it points to.
func (d *Dir) Remove(path string) error {
	return d.at("remove", path, func(dir int, name string) error { return syscall.Unlinkat(dir, name) })
}

// Create makes a new file at path (below d) for writing, failing if
// anything is there: a link planted at path is not followed.
func (d *Dir) Create(path string, perm uint32) (*os.File, error) {
	var fd int
	err := d.at("create", path, func(dir int, name string) error {
		var err error
		fd, err = syscall.Openat(dir, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
		return err
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadFile reads the file at path (below d) whole.
func (d *Dir) ReadFile(path string) ([]byte, error) {
	f, err := d.OpenFile(path, syscall.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Lstat is lstat of path (below d): a link is described, not followed.
func (d *Dir) Lstat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	err := d.at("lstat", path, func(dir int, name string) error {
		fd, err := syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		return syscall.Fstat(fd, &st)
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}
