package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenFD: every way out of the tree fails with ErrEscape, and every
// path inside opens, with openat2 and with the per-component fallback of
// kernels without it.
func TestOpenFD(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a/b/f"), []byte("in"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "f"), []byte("out"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "out")))
	must(os.Symlink("b", filepath.Join(root, "a/inside")))
	must(os.Symlink("b/f", filepath.Join(root, "a/flink")))
	must(os.Symlink("../..", filepath.Join(root, "a/b/up")))
	tests := []struct {
		path string
		err  error // nil: opens
	}{
		{"a/b/f", nil},
		{"a/b", nil},
		{".", nil},
		{"out/f", ErrEscape},      // a link out, on the way
		{"a/inside/f", ErrEscape}, // a link that stays inside: not followed either
		{"a/flink", ErrEscape},    // the last component a link
		{"a/b/up/" + filepath.Base(outside), ErrEscape},
		{"a/b/missing", fs.ErrNotExist},
		{"a/b/f/x", syscall.ENOTDIR},
	}
	for _, fallback := range []bool{false, true} {
		d, err := Open(root)
		must(err)
		defer d.Close()
		d.noOpenat2.Store(fallback)
		for _, tt := range tests {
			fd, err := d.OpenFD(filepath.Join(root, tt.path), syscall.O_RDONLY)
			if fd >= 0 {
				syscall.Close(fd)
			}
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("fallback=%v: %s: %v, want %v", fallback, tt.path, err, tt.err)
			}
		}
		// A path is cleaned first: ".." only climbs out through a
		// link (a/b/up above), and a path not below the root fails.
		if _, err := d.OpenFD(outside+"/f", syscall.O_RDONLY); err == nil {
			t.Errorf("fallback=%v: a path not below the root opened", fallback)
		}
	}
}

// TestDirOps: the writes doctor --fix makes below a root, and a link on
// the way out of it refused for each.
func TestDirOps(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := func(rel string) string { return filepath.Join(root, rel) }
	for name, err := range map[string]error{
		"mkdir":   d.MkdirAll(p("etc/tmpfiles.d"), 0o755),
		"symlink": d.Symlink("/x", p("etc/l")),
		"create": func() error {
			f, err := d.Create(p("etc/f"), 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}(),
		"rename": d.Rename(p("etc"), p("etc2")), /* the link itself may move */
		"remove": d.Remove(p("etc2/x")),
	} {
		switch {
		case name == "rename" && err != nil:
			t.Errorf("renaming the link itself: %v", err)
		case name != "rename" && !errors.Is(err, ErrEscape):
			t.Errorf("%s through a link out: %v, want ErrEscape", name, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside the root: %v", ents)
	}
	// Inside, they work.
	if err := d.MkdirAll(p("run/opengl-driver/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Symlink("/usr/lib/libcuda.so.1", p("run/opengl-driver/lib/libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Lstat(p("run/opengl-driver/lib/libcuda.so.1")); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		t.Errorf("Lstat of the link: %v, %v", st, err)
	}
	if err := d.Rename(p("run/opengl-driver/lib/libcuda.so.1"), p("run/opengl-driver/lib/l")); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(p("run/opengl-driver/lib/l")); err != nil {
		t.Fatal(err)
	}
}
