package ldso

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxSymlinks is Linux's MAXSYMLINKS: more links in one lookup is ELOOP.
const maxSymlinks = 40

// fsys maps logical paths (inside Config.Root) to host paths.
type fsys struct {
	root string // "" for the host
	wd   string // logical working directory
	ids  *IdentityCache
}

func newFsys(cfg Config) (*fsys, error) {
	f := &fsys{root: cfg.Root, wd: cfg.WorkDir, ids: cfg.Identities}
	if f.root == "/" {
		f.root = ""
	}
	if f.wd == "" {
		if f.root != "" {
			f.wd = "/"
		} else {
			wd, err := os.Getwd()
			if err != nil {
				return nil, err
			}
			f.wd = wd
		}
	}
	return f, nil
}

// abs makes a logical path absolute against the working directory.
func (f *fsys) abs(p string) string {
	if path.IsAbs(p) {
		return p
	}
	// Not cleaned: ld.so joins getcwd() and the name as they are.
	return strings.TrimSuffix(f.wd, "/") + "/" + p
}

// host returns the host path to open for logical path p. Without a root the
// kernel resolves links itself; with one, every link is followed inside it.
// An empty path names no file, as open("") fails with ENOENT (a note's
// "=" element with nothing after it).
func (f *fsys) host(p string) (string, error) {
	if p == "" {
		return "", &fs.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
	}
	if f.root == "" {
		return f.abs(p), nil
	}
	r, err := f.realpath(p)
	if err != nil {
		return "", err
	}
	return filepath.Join(f.root, filepath.FromSlash(r)), nil
}

// identity returns p's file identity for "already loaded" checks: its
// device and inode, as ld.so compares st_dev and st_ino (so a hard link is
// the file it links to), or p cleaned when it cannot be stat'ed.
func (f *fsys) identity(p string) string {
	return f.cached("id", p, f.findIdentity)
}

// canonical returns the logical path of p with every link resolved, as
// /proc/self/exe gives a running program's (its $ORIGIN), or p cleaned
// when it cannot be resolved.
func (f *fsys) canonical(p string) string {
	return f.cached("real", p, f.findCanonical)
}

// cached is find(p), remembered in f.ids (if any) under kind.
func (f *fsys) cached(kind, p string, find func(string) string) string {
	if f.ids == nil {
		return find(p)
	}
	key := kind + "\x00" + f.root + "\x00" + f.abs(p)
	if v, ok := f.ids.m.Load(key); ok {
		return v.(string)
	}
	v := find(p)
	f.ids.m.Store(key, v)
	return v
}

func (f *fsys) findIdentity(p string) string {
	if hp, err := f.host(p); err == nil {
		if id, err := IdentityOf(hp); err == nil {
			// No logical path starts with a NUL.
			return "\x00" + strconv.FormatUint(id.Dev, 16) + ":" + strconv.FormatUint(id.Ino, 16)
		}
	}
	return path.Clean(f.abs(p))
}

// FileID is a file's identity as ld.so tells loaded objects apart: its
// st_dev and st_ino.
type FileID struct{ Dev, Ino uint64 }

// IdentityOf is the identity of the file at host path p, links followed.
func IdentityOf(p string) (FileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return FileID{}, err
	}
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

func (f *fsys) findCanonical(p string) string {
	if f.root == "" {
		// A clean path whose last component is no link is its
		// directory's canonical path and that name: one lstat, the
		// directory's from the cache, not one a component.
		a := f.abs(p)
		if a != "/" && a == path.Clean(a) {
			if fi, err := os.Lstat(a); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
				return path.Join(f.canonical(path.Dir(a)), path.Base(a))
			}
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r
		}
		return path.Clean(a)
	}
	if r, err := f.realpath(p); err == nil {
		return r
	}
	return path.Clean(f.abs(p))
}

// realpath resolves logical path p inside the root: ".." never climbs above
// it and absolute link targets start again at it.
func (f *fsys) realpath(p string) (string, error) {
	todo := strings.Split(f.abs(p), "/")
	done := "/"
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		hp := filepath.Join(f.root, filepath.FromSlash(next))
		fi, err := os.Lstat(hp)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(todo) > 0 && !fi.IsDir() {
				return "", &fs.PathError{Op: "lstat", Path: hp, Err: syscall.ENOTDIR}
			}
			done = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", &fs.PathError{Op: "readlink", Path: hp, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(hp)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// HostPath returns the host path to open for p, a path of a Tree (logical,
// inside cfg.Root), following links inside the root as Resolve does.
func HostPath(cfg Config, p string) (string, error) {
	f, err := newFsys(cfg)
	if err != nil {
		return "", err
	}
	return f.host(p)
}
