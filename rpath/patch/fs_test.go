package patch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// Filesystem edges of the main job, on real runnable fixtures
// (internal/fixtures, variant bfd-pie): read-only files, setuid and setgid
// bits, hard links, symbolic link loops and links out of the tree, a tree
// that changes between the decisions and the writes, and a full disk. The
// rule everywhere: a correct result, or a clear error that names the file
// and leaves it byte-identical.
//
// Some cases need root (mounting a tmpfs, dropping to another user); CI
// runs the tests as root, and they fail, not skip, without it.

// nobody is the unprivileged user the non-root cases run the CLI as.
const nobody = 65534

// fsConfig is the configuration every case patches with: libc comes from
// the host (no RUNPATH entry for it) and no driver link, so the RUNPATH of
// main is exactly the tree's lib/.
func fsConfig() *patch.Config {
	return &patch.Config{Libc: hostLibc, Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone}}
}

const hostLibc = "/lib/x86_64-linux-gnu"

// fsFixture is a private copy of bfd-pie below a fresh temporary directory
// that every user can enter (t.TempDir's parent is 0700).
func fsFixture(t *testing.T) (fixtures.Fixture, string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return fixtures.ByName(t, "bfd-pie").CopyTo(t, filepath.Join(dir, "out")), dir
}

// elfFiles are the four ELF files of a variant.
func elfFiles(fx fixtures.Fixture) []string {
	return append([]string{fx.Exe, fx.LoadLib}, fx.Libs...)
}

// hashes returns the sha256 of each file.
func hashes(t *testing.T, paths ...string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = sha256.Sum256(b)
	}
	return out
}

func sameHashes(t *testing.T, before map[string][32]byte, what string) {
	t.Helper()
	for p, h := range before {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%s: %s: %v", what, p, err)
			continue
		}
		if sha256.Sum256(b) != h {
			t.Errorf("%s: %s was written", what, p)
		}
	}
}

// mustRun checks that the fixture's main runs and prints its line.
func mustRun(t *testing.T, fx fixtures.Fixture) {
	t.Helper()
	out, err := fx.Run(t, fx.Exe)
	if err != nil || out != fx.Want+"\n" {
		t.Errorf("main: %q, %v; want %q", out, err, fx.Want)
	}
}

func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (%s); CI runs it as root", why)
	}
}

// cli builds cmd/cudapatch into dir (which every user can reach) and
// returns its path.
func cli(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "cudapatch")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/cudapatch/cudapatch/cmd/cudapatch").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/cudapatch: %v\n%s", err, out)
	}
	return bin
}

// runCLI runs the cudapatch binary, as uid/gid when uid >= 0, and returns
// its exit code, stdout and stderr.
func runCLI(t *testing.T, bin string, uid int, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, o.String(), e.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), o.String(), e.String()
	}
	t.Fatalf("running %s: %v", bin, err)
	return -1, "", ""
}

func cliArgs(root string) []string {
	return []string{"--libc", hostLibc, "--driver-link-for", "none", "--jobs", "2", root}
}

func chownR(t *testing.T, root string, uid int) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// chmodFiles gives executables mode exe and libraries mode lib.
func chmodFiles(t *testing.T, fx fixtures.Fixture, exe, lib fs.FileMode) {
	t.Helper()
	for _, p := range []string{fx.Exe, fx.LoadLib} {
		if err := os.Chmod(p, exe); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range fx.Libs {
		if err := os.Chmod(p, lib); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadOnlyFiles: files without write permission (r-xr-xr-x executables,
// r--r--r-- libraries, as a Nix store path or a vendor package ships them).
//
// As root, the write succeeds: root needs no write permission, and the
// modes stay as they were. That is the behaviour of a fixupPhase, which
// runs `chmod -R u+w` over the outputs before its hooks: the file is
// writable by its owner either way. As any other user the open for writing
// fails: cudapatch exits 2, names every file with "permission denied", and
// writes nothing; after `chmod -R u+w` the same command succeeds.
func TestReadOnlyFiles(t *testing.T) {
	requireRoot(t, "it runs the non-root case as uid 65534")
	t.Run("root", func(t *testing.T) {
		fx, _ := fsFixture(t)
		chmodFiles(t, fx, 0o555, 0o444)
		rep, err := patch.Run(context.Background(), fsConfig(), []string{fx.Dir})
		if err != nil || !rep.Written {
			t.Fatalf("Patch as root: %v (written %v)", err, rep != nil && rep.Written)
		}
		for _, p := range elfFiles(fx) {
			want := fs.FileMode(0o444)
			if p == fx.Exe || p == fx.LoadLib {
				want = 0o555
			}
			if got := mode(t, p); got != want {
				t.Errorf("%s: mode %v after patching, want %v", p, got, want)
			}
		}
		mustRun(t, fx)
	})
	t.Run("non-root", func(t *testing.T) {
		fx, dir := fsFixture(t)
		bin := cli(t, dir)
		chownR(t, fx.Dir, nobody)
		chmodFiles(t, fx, 0o555, 0o444)
		before := hashes(t, elfFiles(fx)...)
		code, stdout, stderr := runCLI(t, bin, nobody, cliArgs(fx.Dir)...)
		if code != 2 {
			t.Errorf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, p := range []string{fx.Exe, fx.LibDir + "/libfoo.so"} {
			if want := "error: " + p + ": opening for writing: permission denied"; !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
		}
		sameHashes(t, before, "refused as non-root")
		// chmod -R u+w, as fixupPhase does: now it works.
		chmodFiles(t, fx, 0o755, 0o644)
		code, stdout, stderr = runCLI(t, bin, nobody, cliArgs(fx.Dir)...)
		if code != 0 {
			t.Fatalf("after chmod u+w: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		mustRun(t, fx)
	})
}

// TestSetuidSetgidKept: the setuid and setgid bits survive patching, as
// root (in-place writes keep them) and as the owner of the files (where the
// kernel clears them on every write by a process without CAP_FSETID).
func TestSetuidSetgidKept(t *testing.T) {
	requireRoot(t, "it runs the non-root case as uid 65534")
	modes := func(fx fixtures.Fixture) map[string]fs.FileMode {
		return map[string]fs.FileMode{
			fx.Exe:     0o755 | fs.ModeSetuid,
			fx.LoadLib: 0o755 | fs.ModeSetuid | fs.ModeSetgid,
			fx.Libs[0]: 0o755 | fs.ModeSetgid,
		}
	}
	check := func(t *testing.T, fx fixtures.Fixture) {
		t.Helper()
		for p, want := range modes(fx) {
			if got := mode(t, p); got != want {
				t.Errorf("%s: mode %v after patching, want %v", p, got, want)
			}
		}
	}
	setModes := func(t *testing.T, fx fixtures.Fixture) {
		t.Helper()
		for p, m := range modes(fx) {
			if err := os.Chmod(p, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("root", func(t *testing.T) {
		fx, _ := fsFixture(t)
		setModes(t, fx)
		if _, err := patch.Run(context.Background(), fsConfig(), []string{fx.Dir}); err != nil {
			t.Fatal(err)
		}
		check(t, fx)
		mustRun(t, fx)
	})
	t.Run("owner", func(t *testing.T) {
		fx, dir := fsFixture(t)
		bin := cli(t, dir)
		chownR(t, fx.Dir, nobody)
		setModes(t, fx) // after chown, which clears them
		code, stdout, stderr := runCLI(t, bin, nobody, cliArgs(fx.Dir)...)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		check(t, fx)
		mustRun(t, fx)
	})
}

// TestHardLinkRefused: a file with another hard link (here one outside the
// tree) is refused by default, because editing it in place would change the
// other path too. The error names the file, and nothing is written at all:
// not the file, not its other link, not the other files of the tree.
func TestHardLinkRefused(t *testing.T) {
	fx, dir := fsFixture(t)
	other := filepath.Join(dir, "elsewhere", "main")
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(fx.Exe, other); err != nil {
		t.Fatal(err)
	}
	before := hashes(t, append(elfFiles(fx), other)...)
	rep, err := patch.Run(context.Background(), fsConfig(), []string{fx.Dir})
	if err == nil {
		t.Fatal("Patch of a file with two hard links succeeded")
	}
	if !strings.Contains(err.Error(), fx.Exe+": ") || !strings.Contains(err.Error(), "hard link") {
		t.Errorf("error %q does not name %s and its hard links", err, fx.Exe)
	}
	if !errors.Is(err, elfedit.ErrHardLinks) {
		t.Errorf("error %q does not wrap elfedit.ErrHardLinks", err)
	}
	if f := fileOf(rep, fx.Exe); f == nil || len(f.Errors) != 1 || f.Errors[0].Kind != patch.ErrorHardLinks {
		t.Errorf("%s: errors %v, want one of kind %v", fx.Exe, f, patch.ErrorHardLinks)
	}
	if rep == nil || rep.Written {
		t.Errorf("report says the tree was written")
	}
	sameHashes(t, before, "hard link refused")
}

// TestSymlinkLoopsAndEscapes: links are never followed, whether they loop
// (to themselves, to each other, to a parent directory), dangle, or point
// out of the tree; what they point to is never written, and they stay
// links. Loops named *.so* are where the library index looks.
func TestSymlinkLoopsAndEscapes(t *testing.T) {
	fx, dir := fsFixture(t)
	outside := filepath.Join(dir, "outside")
	if err := os.CopyFS(outside, os.DirFS(filepath.Join(fixtures.ByName(t, "lld-pie").Dir))); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"lib/libloop.so":    "libloop.so",
		"lib/liba.so":       "libb.so",
		"lib/libb.so":       "liba.so",
		"lib/up":            "..",
		"lib/self":          ".",
		"lib/libgone.so.1":  "libnothere.so.1",
		"bin/outside-main":  outside + "/bin/main",
		"lib/libout.so":     outside + "/lib/libfoo.so",
		"lib/outside-dir":   outside,
		"bin/rel-outside":   "../../outside/bin/loadlib",
		"share/deep/up/top": "../../..",
	}
	for rel, target := range links {
		p := filepath.Join(fx.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	var outsideFiles []string
	filepath.WalkDir(outside, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			outsideFiles = append(outsideFiles, p)
		}
		return err
	})
	before := hashes(t, outsideFiles...)
	// A link out of the tree named as a root is refused, naming it and
	// where it leads; nothing is written.
	outLink := filepath.Join(fx.Dir, "bin/outside-main")
	inside := hashes(t, elfFiles(fx)...)
	cfg := fsConfig()
	cfg.SearchRecursive = []string{fx.Dir}
	_, err := patch.Run(context.Background(), cfg, []string{fx.Dir, outLink})
	if !errors.Is(err, patch.ErrLinkOut) || !strings.Contains(err.Error(), outLink) || !strings.Contains(err.Error(), outside+"/bin/main") {
		t.Errorf("Patch with a root linking out of the tree: %v, want ErrLinkOut naming the link and its target", err)
	}
	sameHashes(t, before, "outside the tree, named through a link")
	sameHashes(t, inside, "the tree, after a refused root")
	// The tree, with its links loops and links out of it, and the tree
	// again as a recursive search directory.
	roots := []string{fx.Dir}
	rep, err := patch.Run(context.Background(), cfg, roots)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	var got []string
	for _, f := range rep.Files {
		got = append(got, f.Path)
	}
	want := elfFiles(fx)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("files considered:\n%q\nwant\n%q", got, want)
	}
	sameHashes(t, before, "outside the tree")
	for rel, target := range links {
		p := filepath.Join(fx.Dir, rel)
		if got, err := os.Readlink(p); err != nil || got != target {
			t.Errorf("%s: now %q, %v; want a link to %q", rel, got, err, target)
		}
	}
	mustRun(t, fx)
	// A root that is itself a link loop is an error naming it.
	loop := filepath.Join(fx.Dir, "lib/libloop.so")
	if _, err := patch.Run(context.Background(), fsConfig(), []string{loop}); err == nil || !strings.Contains(err.Error(), loop) {
		t.Errorf("Patch of a looping link: %v, want an error naming it", err)
	}
}

// afterDecisions returns fsConfig set to call fn once, when every file
// has been decided and before the first write: the moment a tree that
// changes under the job matters.
func afterDecisions(fn func()) *patch.Config {
	called := false
	cfg := fsConfig()
	cfg.Progress = func(done, total int) {
		if done == total/2 && !called {
			called = true
			fn()
		}
	}
	return cfg
}

// TestTreeChangesDuringTheJob: files removed or replaced between the
// decisions and the writes. A removed file is an error naming it; a file
// replaced by a link out of the tree is not followed, so what the link
// points to is never written; a file replaced by another file is patched as
// it now is.
func TestTreeChangesDuringTheJob(t *testing.T) {
	t.Run("removed", func(t *testing.T) {
		fx, _ := fsFixture(t)
		gone := fx.Libs[0]
		cfg := afterDecisions(func() {
			if err := os.Remove(gone); err != nil {
				t.Error(err)
			}
		})
		rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
		if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), gone) {
			t.Errorf("Patch: %v, want a no-such-file error naming %s", err, gone)
		}
		if rep == nil || rep.Written {
			t.Errorf("report says the tree was written")
		}
		if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s came back: %v", gone, err)
		}
	})
	t.Run("replaced by a link out of the tree", func(t *testing.T) {
		fx, dir := fsFixture(t)
		outside := filepath.Join(dir, "outside-libfoo.so")
		if err := os.CopyFS(filepath.Join(dir, "o"), os.DirFS(fx.LibDir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "o", "libfoo.so"), outside); err != nil {
			t.Fatal(err)
		}
		before := hashes(t, outside)
		victim := fx.Libs[0]
		cfg := afterDecisions(func() {
			if err := os.Remove(victim); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(outside, victim); err != nil {
				t.Error(err)
			}
		})
		_, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
		sameHashes(t, before, "link target outside the tree")
		if err == nil || !strings.Contains(err.Error(), victim) {
			t.Errorf("Patch: %v, want an error naming %s", err, victim)
		}
		if mode(t, victim)&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link", victim)
		}
	})
	// The file decided is the file written: one renamed over it since
	// was not decided (nor checked writable), and is left as it is.
	t.Run("replaced by another file", func(t *testing.T) {
		fx, dir := fsFixture(t)
		other := fixtures.ByName(t, "mold-pie").CopyTo(t, filepath.Join(dir, "mold"))
		before := hashes(t, other.Exe)[other.Exe]
		cfg := afterDecisions(func() {
			if err := os.Rename(other.Exe, fx.Exe); err != nil {
				t.Error(err)
			}
		})
		_, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
		if err == nil || !strings.Contains(err.Error(), fx.Exe+": its path names another file since it was read") {
			t.Errorf("Patch: %v, want an error naming %s", err, fx.Exe)
		}
		sameHashes(t, map[string][32]byte{fx.Exe: before}, "the replacing file")
	})
}

// TestFullDisk: the tree lies on a tmpfs that is full, so the region a new
// interpreter needs cannot be appended (ENOSPC). The error names each such
// file and says "no space left on device", the CLI exits 2, and each file
// that failed is byte-identical to the original (the plan's writes are
// rolled back and the file cut to its old size). Once there is room, the
// same command succeeds. Twice: with the files just written, and settled
// (unchanged for longer than elfedit's settling time, 100 ms), when the
// write reads again only the bytes it takes and keeps to undo, and rolls
// back from those.
func TestFullDisk(t *testing.T) {
	requireRoot(t, "it mounts a tmpfs")
	for _, settled := range []bool{false, true} {
		t.Run(fmt.Sprintf("settled=%v", settled), func(t *testing.T) { fullDisk(t, settled) })
	}
}

func fullDisk(t *testing.T, settled bool) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := cli(t, dir)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=256k,mode=0755"); err != nil {
		t.Fatalf("mount -t tmpfs %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("umount %s: %v", mnt, err)
		}
	})
	fx := fixtures.ByName(t, "bfd-pie").CopyTo(t, filepath.Join(mnt, "out"))
	// An interpreter with a longer name than PT_INTERP has room for: every
	// executable needs a region appended at its end.
	interp := filepath.Join(dir, strings.Repeat("i", 100), "ld-linux-x86-64.so.2")
	if err := os.MkdirAll(filepath.Dir(interp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib64/ld-linux-x86-64.so.2", interp); err != nil {
		t.Fatal(err)
	}
	if settled {
		time.Sleep(200 * time.Millisecond)
	}
	// Fill the disk to the last byte.
	fill, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{64 << 10, 4 << 10, 1} {
		for {
			if _, err := fill.Write(make([]byte, chunk)); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling the tmpfs: %v", err)
				}
				break
			}
		}
	}
	fill.Close()
	before := hashes(t, elfFiles(fx)...)
	args := append([]string{"--interpreter", interp}, cliArgs(fx.Dir)...)
	code, stdout, stderr := runCLI(t, bin, -1, args...)
	if code != 2 {
		t.Errorf("exit %d on a full disk, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, p := range []string{fx.Exe, fx.LoadLib} {
		if want := "error: " + p + ": "; !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %s:\n%s", p, stderr)
		}
		// Rolled back: byte-identical, at its old size.
		sameHashes(t, map[string][32]byte{p: before[p]}, "after ENOSPC")
	}
	if !strings.Contains(stderr, "no space left on device") {
		t.Errorf("stderr does not say why:\n%s", stderr)
	}
	// Make room, and the same command succeeds.
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, bin, -1, args...)
	if code != 0 {
		t.Fatalf("with room: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if d := readDyn(t, fx.Exe); d.interp != interp {
		t.Errorf("interpreter %q, want %q", d.interp, interp)
	}
	mustRun(t, fx)
}
