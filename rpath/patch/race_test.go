package patch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/stretchr/testify/require"
)

// Another process changes the tree while the main job runs, at the moment
// it matters most: after every file was decided, before a file is written
// (patch.SetBeforeWrite). The promises: nothing outside the tree is
// written, no byte another process wrote is lost, and a file that cannot
// be written as decided fails with an error that names it and says why.

// TestDirSwappedForLinkOut: lib/ is renamed away and replaced by a link to
// a directory outside the tree holding files of the same names. The
// outside files are untouched, the moved ones too, and every file of lib/
// fails naming the link.
func TestDirSwappedForLinkOut(t *testing.T) {
	// With every file held from its decision to its write, and with
	// none (a run with more files than descriptors to spare: each is
	// opened again, below the root, when written).
	for _, held := range []int64{1 << 20, 0} {
		t.Run(fmt.Sprintf("held=%d", held), func(t *testing.T) { dirSwapped(t, held) })
	}
}

func dirSwapped(t *testing.T, held int64) {
	fx, dir := fsFixture(t)
	outside := filepath.Join(dir, "outside")
	if err := os.CopyFS(outside, os.DirFS(fx.LibDir)); err != nil {
		t.Fatal(err)
	}
	outsideFiles := []string{filepath.Join(outside, "libfoo.so"), filepath.Join(outside, "libbar.so")}
	before := hashes(t, append(outsideFiles, fx.Libs...)...)
	moved := filepath.Join(fx.Dir, "lib.moved")
	var once sync.Once
	cfg := fsConfig()
	patch.SetHeldClaims(cfg, held)
	patch.SetBeforeWrite(cfg, func(string) {
		once.Do(func() {
			if err := os.Rename(fx.LibDir, moved); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(outside, fx.LibDir); err != nil {
				t.Error(err)
			}
		})
	})
	rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
	// The hashes were taken by path: the in-tree libraries are now below
	// lib.moved.
	for p, h := range before {
		if strings.HasPrefix(p, fx.LibDir+"/") {
			delete(before, p)
			before[filepath.Join(moved, filepath.Base(p))] = h
		}
	}
	sameHashes(t, before, "a directory swapped for a link out of the tree")
	if err == nil {
		t.Fatalf("Patch: no error; want one naming each file of %s", fx.LibDir)
	}
	for _, l := range fx.Libs {
		f := fileOf(rep, l)
		if f != nil && !f.Changed && len(f.Errors) == 0 {
			continue // nothing to write: it never gets there
		}
		if f == nil || len(f.Errors) == 0 || !strings.Contains(f.Errors[0].Error(), "no longer found where it was") || !strings.Contains(f.Errors[0].Error(), "symbolic link") {
			t.Errorf("%s: %+v, want an error saying a link on the way was not followed", l, f)
		}
		if !strings.Contains(err.Error(), l+": ") {
			t.Errorf("Patch: %v, want it to name %s", err, l)
		}
	}
	if rep.Written {
		t.Errorf("report says every file was written")
	}
}

// TestAppenderDuringTheJob: a library is appended to with O_APPEND (a
// log writer that takes no lock) between its decision and its write. Its
// write fails, saying so; the file is the original and the record after
// it, byte for byte.
func TestAppenderDuringTheJob(t *testing.T) {
	for _, held := range []int64{1 << 20, 0} {
		t.Run(fmt.Sprintf("held=%d", held), func(t *testing.T) { appender(t, held) })
	}
}

func appender(t *testing.T, held int64) {
	fx, _ := fsFixture(t)
	victim := fx.Libs[0]
	orig, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	rec := bytes.Repeat([]byte("a record a logger appends\n"), 100)
	cfg := fsConfig()
	patch.SetHeldClaims(cfg, held)
	patch.SetBeforeWrite(cfg, func(p string) {
		if p == victim {
			f, err := os.OpenFile(victim, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			f.Write(rec)
			f.Close()
		}
	})
	rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
	if !errors.Is(err, elfedit.ErrChanged) || !strings.Contains(err.Error(), victim+": ") {
		t.Errorf("Patch: %v, want ErrChanged naming %s", err, victim)
	}
	got, _ := os.ReadFile(victim)
	if !bytes.Equal(got, append(orig, rec...)) {
		t.Errorf("%s: %d bytes, want the original (%d) and the record (%d) only", victim, len(got), len(orig), len(rec))
	}
	if f := fileOf(rep, victim); f == nil || len(f.Errors) == 0 {
		t.Errorf("%s: %+v, want failed", victim, f)
	}
	if rep.Written {
		t.Errorf("report says every file was written")
	}
}

// TestTwoRunsAtOnce: a second run starts while the first is between its
// decisions and its writes. The first holds every file it will write
// locked, so the second fails on each (ErrLocked, nothing written, not
// even the files the first does not hold), and the first writes them
// all: the tree ends byte for byte as one run leaves it.
func TestTwoRunsAtOnce(t *testing.T) {
	fx, dir := fsFixture(t)
	// As long as "out": the result names its tree (RUNPATH, note).
	clean := fx.CopyTo(t, filepath.Join(dir, "cln"))
	if _, err := patch.Run(context.Background(), fsConfig(), []string{clean.Dir}); err != nil {
		t.Fatal(err)
	}
	var second *patch.Report
	var secondErr error
	var once sync.Once
	cfg := fsConfig()
	patch.SetBeforeWrite(cfg, func(string) {
		once.Do(func() {
			second, secondErr = patch.Run(context.Background(), fsConfig(), []string{fx.Dir})
		})
	})
	_, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	for _, p := range []string{fx.Exe, fx.Libs[0]} {
		if want := p + ": " + elfedit.ErrLocked.Error(); secondErr == nil || !strings.Contains(secondErr.Error(), want) {
			t.Errorf("second run: %v, want %q", secondErr, want)
		}
	}
	if second == nil || second.WritePhase || second.Failed == 0 {
		t.Errorf("second run: %+v, want failed files and no write phase", second)
	}
	for _, p := range elfFiles(fx) {
		want, err := os.ReadFile(filepath.Join(clean.Dir, strings.TrimPrefix(p, fx.Dir)))
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.ReplaceAll(want, []byte(clean.Dir), []byte(fx.Dir))
		if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, not as one run writes it (%d)", p, len(got), len(want))
		}
	}
	mustRun(t, fx)
}

// TestTwoCLIRunsAtOnce: two cudapatch processes on the same tree at the
// same time, many times over, unsynchronised. Whatever the interleaving,
// every file ends as the original or as one run leaves it (never torn,
// never written twice: a second write would append a second region), a
// run that fails says the file was locked or changed by the other, with
// exit 2, and a third run afterwards leaves the tree as one run does.
func TestTwoCLIRunsAtOnce(t *testing.T) {
	fx, dir := fsFixture(t)
	bin := cli(t, dir)
	cleanTree := fx.CopyTo(t, filepath.Join(dir, "clean"))
	if code, _, stderr := runCLI(t, bin, -1, cliArgs(cleanTree.Dir)...); code != 0 {
		t.Fatalf("clean run: exit %d\n%s", code, stderr)
	}
	clean := map[string][]byte{}
	orig := map[string][]byte{}
	for _, p := range elfFiles(fx) {
		clean[p], _ = os.ReadFile(filepath.Join(cleanTree.Dir, strings.TrimPrefix(p, fx.Dir)))
		orig[p], _ = os.ReadFile(p)
	}
	for try := range 10 {
		// As long as "clean": the result names its tree (RUNPATH, note).
		tree := filepath.Join(dir, "try-"+string(rune('a'+try)))
		want := map[string][]byte{}
		for p, b := range clean {
			want[p] = bytes.ReplaceAll(b, []byte(cleanTree.Dir), []byte(tree))
		}
		if err := os.CopyFS(tree, os.DirFS(fx.Dir)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		codes := make([]int, 2)
		errs := make([]string, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i], _, errs[i] = runCLI(t, bin, -1, cliArgs(tree)...)
			}()
		}
		wg.Wait()
		for i, c := range codes {
			// Locked by the other run, or read before the other
			// run took the lock and wrote it: either way refused.
			if c != 0 && (c != 2 || !strings.Contains(errs[i], "locked by another process") && !strings.Contains(errs[i], "changed by another process since it was read")) {
				t.Errorf("try %d run %d: exit %d\n%s", try, i, c, errs[i])
			}
		}
		for p := range want {
			q := filepath.Join(tree, strings.TrimPrefix(p, fx.Dir))
			got, _ := os.ReadFile(q)
			if !bytes.Equal(got, want[p]) && !bytes.Equal(got, orig[p]) {
				t.Errorf("try %d: %s is neither the original nor the result (%d bytes; %d, %d)", try, q, len(got), len(orig[p]), len(want[p]))
			}
		}
		if code, _, stderr := runCLI(t, bin, -1, cliArgs(tree)...); code != 0 {
			t.Errorf("try %d: the run after: exit %d\n%s", try, code, stderr)
		}
		for p := range want {
			q := filepath.Join(tree, strings.TrimPrefix(p, fx.Dir))
			if got, _ := os.ReadFile(q); !bytes.Equal(got, want[p]) {
				t.Errorf("try %d: after a third run %s is not as one run leaves it", try, q)
			}
		}
	}
}

// TestPartlyWritableTree: a user who owns part of a tree. A file it may
// not write fails while deciding, so nothing is written (not the files it
// may write either) and the CLI exits 2 naming the file; --dry-run says
// the same. Once the file is the user's, the same command patches all.
func TestPartlyWritableTree(t *testing.T) {
	requireRoot(t, "it runs the CLI as uid 65534 on a tree partly owned by root")
	fx, dir := fsFixture(t)
	bin := cli(t, dir)
	chownR(t, fx.Dir, nobody)
	theirs := fx.Libs[0] // root's, 0644: nobody may read it, not write it
	if err := os.Chown(theirs, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(theirs, 0o644); err != nil {
		t.Fatal(err)
	}
	before := hashes(t, elfFiles(fx)...)
	for _, dry := range []bool{true, false} {
		args := cliArgs(fx.Dir)
		if dry {
			args = append([]string{"--dry-run"}, args...)
		}
		code, stdout, stderr := runCLI(t, bin, nobody, args...)
		if code != 2 {
			t.Errorf("dry-run=%v: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", dry, code, stdout, stderr)
		}
		if want := "error: " + theirs + ": opening for writing: permission denied"; !strings.Contains(stderr, want) {
			t.Errorf("dry-run=%v: stderr does not say %q:\n%s", dry, want, stderr)
		}
		if strings.Count(stderr, "error: ") != 1 {
			t.Errorf("dry-run=%v: want one error, for %s only:\n%s", dry, theirs, stderr)
		}
		sameHashes(t, before, "a tree with a file the user may not write")
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI(t, bin, nobody, cliArgs(fx.Dir)...); code != 0 {
		t.Fatalf("once the file is the user's: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	mustRun(t, fx)
}

// fileOf is the report's file at path, or nil.
func fileOf(rep *patch.Report, path string) *patch.File {
	if rep == nil {
		return nil
	}
	for _, f := range rep.Files {
		if f.Path == path {
			return f
		}
	}
	return nil
}

// TestAppenderThroughTheJob: a logger appends numbered records to a
// library, without a lock, from before the job starts until it ends.
// Every record is in the file afterwards, once and in order, whatever
// the job did with the file (it fails it, as changed since it was read,
// or, had it read it after the logger's last record, patches it).
func TestAppenderThroughTheJob(t *testing.T) {
	for try := range 5 {
		fx, _ := fsFixture(t)
		victim := fx.Libs[0]
		f, err := os.OpenFile(victim, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan int)
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				fmt.Fprintf(f, "record %06d\n", n)
				n++
			}
		}()
		rep, _ := patch.Run(context.Background(), fsConfig(), []string{fx.Dir})
		close(stop)
		n := <-done
		f.Close()
		got, err := os.ReadFile(victim)
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		for i := range n {
			rec := []byte(fmt.Sprintf("record %06d\n", i))
			j := bytes.Index(got[at:], rec)
			if j < 0 {
				t.Fatalf("try %d: record %d of %d lost (file %+v)", try, i, n, fileOf(rep, victim).Errors)
			}
			at += j + len(rec)
		}
		if c := bytes.Count(got, []byte("record ")); c != n {
			t.Errorf("try %d: %d records in the file, %d written", try, c, n)
		}
	}
}

// TestFileGivenTwice: a file named both as a path and below a directory
// path is decided and written once (two decisions claimed it twice, and
// the second found it locked).
func TestFileGivenTwice(t *testing.T) {
	for _, dry := range []bool{true, false} {
		tr := newTree(t)
		out := tr.p("out")
		foo := tr.p("out/lib/libfoo.so")
		tr.place("out/lib/libfoo.so", lib("libfoo.so", "libbar.so"))
		tr.place("deps/libbar.so", lib("libbar.so"))
		for i := 0; i < 20; i++ {
			rep, err := patch.Run(context.Background(), &patch.Config{Search: []string{tr.p("deps")}, Write: patch.WriteOptions{DryRun: dry}}, []string{out, foo})
			require.NoError(t, err, "dry run %v", dry)
			require.Len(t, rep.Files, 1)
		}
	}
}

// TestChangedAtTheCommit: between a file's last check and its commit
// (patch.SetWriteHook), another process makes a hard link to it from
// outside the tree, renames it and puts a copy at its path, or puts a
// directory there. The file fails with one error naming it and what
// changed, it is not counted patched, the run ends in an error, and no
// byte changes: not the link outside, not the file now at the path, not
// the file decided on.
func TestChangedAtTheCommit(t *testing.T) {
	tests := []struct{ act, wantErr string }{
		{"link", "its link count went from 1 to 2 (a hard link made or removed)"},
		{"replace", "its path names another file now"},
		{"dir", "its path names a directory now"},
	}
	for _, held := range []int64{1 << 20, 0} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("held=%d/%s", held, tt.act), func(t *testing.T) {
				fx, dir := fsFixture(t)
				victim := fx.Exe
				orig, err := os.ReadFile(victim)
				if err != nil {
					t.Fatal(err)
				}
				outside := filepath.Join(dir, "outside")
				moved := victim + ".moved"
				acted := false
				cfg := fsConfig()
				patch.SetHeldClaims(cfg, held)
				patch.SetWriteHook(cfg, func(p, at string) {
					if p != victim || at != "commit" {
						return
					}
					acted = true
					switch tt.act {
					case "link":
						must(t, os.Link(victim, outside))
					case "replace":
						must(t, os.Rename(victim, moved))
						must(t, os.WriteFile(victim, orig, 0o755))
					case "dir":
						must(t, os.Rename(victim, moved))
						must(t, os.Mkdir(victim, 0o755))
					}
				})
				rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
				if !acted {
					t.Fatalf("the hook never ran before %s's commit", victim)
				}
				if err == nil || !errors.Is(err, elfedit.ErrChanged) || !strings.Contains(err.Error(), victim+": ") || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Patch: %v, want ErrChanged naming %s and saying %q", err, victim, tt.wantErr)
				}
				f := fileOf(rep, victim)
				if f == nil || len(f.Errors) != 1 || f.Errors[0].Kind != patch.ErrorWrite {
					t.Errorf("%s: %+v, want one write error", victim, f)
				}
				if rep.Written || rep.Failed != 1 {
					t.Errorf("report: written %v, %d failed; want not written, 1 failed", rep.Written, rep.Failed)
				}
				decided := victim
				if tt.act != "link" {
					decided = moved
				}
				for _, p := range []string{decided, outside, victim} {
					if p == outside && tt.act != "link" || p == victim && tt.act != "replace" {
						continue
					}
					if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, orig) {
						t.Errorf("%s: written (err %v)", p, err)
					}
				}
			})
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}
