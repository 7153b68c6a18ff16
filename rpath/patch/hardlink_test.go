package patch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patch"
)

// driNames are the names hardLinked gives a library besides its own, as
// Debian's Mesa names its DRI drivers, hard links to one file.
func driNames(fx fixtures.Fixture, n int) []string {
	var out []string
	for i := range n {
		out = append(out, filepath.Join(fx.LibDir, "dri", fmt.Sprintf("d%02d_dri.so", i)))
	}
	return out
}

// hardLinked links lib under each of names.
func hardLinked(t *testing.T, lib string, names []string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Dir(n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(lib, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHardLinksAllInTheOutputs: a library with 13 names, all in the
// output (its own and 12 in lib/dri, as Mesa's drivers), all getting the
// same RUNPATH, is patched once, in place: every name loads, the file
// keeps its 13 links, its bytes are what a tree without the links gets,
// and it is counted once (12 names Linked, SameFileAs the first).
func TestHardLinksAllInTheOutputs(t *testing.T) {
	for _, held := range []int64{1 << 20, 0} {
		t.Run(fmt.Sprintf("held=%d", held), func(t *testing.T) {
			fx, dir := fsFixture(t)
			// As long as "out": the result names its tree (RUNPATH, note).
			clean := fx.CopyTo(t, filepath.Join(dir, "cln"))
			want, err := patch.Run(context.Background(), fsConfig(), []string{clean.Dir})
			if err != nil {
				t.Fatal(err)
			}
			lib := fx.Libs[0]
			names := driNames(fx, 12)
			hardLinked(t, lib, names)
			cfg := fsConfig()
			patch.SetHeldClaims(cfg, held)
			rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
			if err != nil {
				t.Fatalf("Patch: %v", err)
			}
			if rep.Changed != want.Changed || rep.Linked != len(names) || rep.Failed != 0 || !rep.Written {
				t.Errorf("report: %d changed, %d linked, %d failed, written %v; want %d changed, %d linked", rep.Changed, rep.Linked, rep.Failed, rep.Written, want.Changed, len(names))
			}
			if n := rep.Changed + rep.Unchanged + rep.Skipped + rep.Failed + rep.Linked; n != len(rep.Files) {
				t.Errorf("%d files counted, %d in the report", n, len(rep.Files))
			}
			all := append([]string{lib}, names...)
			first := names[0] // lib/dri sorts before lib/libfoo.so
			for _, p := range all {
				f := fileOf(rep, p)
				wantSame := first
				if p == first {
					wantSame = ""
				}
				if f == nil || !f.Changed || f.SameFileAs != wantSame || len(f.Errors) > 0 {
					t.Errorf("%s: %+v, want changed, same file as %q", p, f, wantSame)
				}
			}
			wantBytes, err := os.ReadFile(clean.Libs[0])
			if err != nil {
				t.Fatal(err)
			}
			wantBytes = bytes.ReplaceAll(wantBytes, []byte(clean.Dir), []byte(fx.Dir))
			if got, _ := os.ReadFile(lib); !bytes.Equal(got, wantBytes) {
				t.Errorf("%s: %d bytes, not as a tree without its links gets it (%d)", lib, len(got), len(wantBytes))
			}
			if st, err := os.Stat(lib); err != nil || st.Sys().(*syscall.Stat_t).Nlink != uint64(len(all)) {
				t.Errorf("%s: %v, want %d links", lib, err, len(all))
			}
			for _, p := range all {
				if err := fx.Load(t, p); err != nil {
					t.Errorf("%s does not load: %v", p, err)
				}
			}
			mustRun(t, fx)
		})
	}
}

// TestHardLinksRefused: a name of the file outside the outputs (more
// links than names found), or names that would get different RUNPATHs
// (relativized: $ORIGIN in lib/, $ORIGIN/.. in lib/dri), and the whole
// tree is refused, each name saying why, and nothing is written.
func TestHardLinksRefused(t *testing.T) {
	tests := []struct {
		name     string
		outside  bool
		relative bool // relativized
		wantErr  string
		allNames bool // every name has the error, not only the changed
	}{
		{name: "a name outside", outside: true, wantErr: "file has several hard links (14 links, 13 of them in the outputs): refusing to change the others too"},
		{name: "different edits", relative: true, wantErr: "(13 links, all in the outputs) whose names would get different edits (RUNPATH ", allNames: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx, dir := fsFixture(t)
			lib := fx.Libs[0]
			names := driNames(fx, 12)
			hardLinked(t, lib, names)
			all := append([]string{lib}, names...)
			watch := append(elfFiles(fx), names...)
			if tt.outside {
				o := filepath.Join(dir, "elsewhere", "libfoo.so")
				hardLinked(t, lib, []string{o})
				watch = append(watch, o)
			}
			before := hashes(t, watch...)
			cfg := fsConfig()
			cfg.Policy.RelativizeRoot = tt.relative
			rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
			if err == nil || !errors.Is(err, elfedit.ErrHardLinks) {
				t.Fatalf("Patch: %v, want ErrHardLinks", err)
			}
			t.Log(err)
			for _, p := range all {
				f := fileOf(rep, p)
				if f == nil || len(f.Errors) != 1 || f.Errors[0].Kind != patch.ErrorHardLinks || !strings.Contains(f.Errors[0].Error(), tt.wantErr) {
					t.Errorf("%s: %+v, want one hard-links error saying %q", p, f, tt.wantErr)
				}
				if !strings.Contains(err.Error(), p+": ") {
					t.Errorf("Patch: does not name %s", p)
				}
			}
			if rep.WritePhase || rep.Written || rep.Linked != 0 {
				t.Errorf("report: write phase %v, written %v, %d linked; want none", rep.WritePhase, rep.Written, rep.Linked)
			}
			sameHashes(t, before, tt.name)
		})
	}
}

// TestHardLinkMovedOutAtTheCommit: one name of a file whose 13 names are
// all in the output is renamed out of the tree just before the file's
// commit (its link count stays 13). The write fails, saying that name is
// gone, every name fails with it, and the file is restored: the name now
// outside the tree holds the original bytes.
func TestHardLinkMovedOutAtTheCommit(t *testing.T) {
	fx, dir := fsFixture(t)
	lib := fx.Libs[0]
	names := driNames(fx, 12)
	hardLinked(t, lib, names)
	orig, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	first, gone := names[0], names[5]
	outside := filepath.Join(dir, "outside.so")
	acted := false
	cfg := fsConfig()
	patch.SetWriteHook(cfg, func(p, at string) {
		if p == first && at == "commit" {
			acted = true
			must(t, os.Rename(gone, outside))
		}
	})
	rep, err := patch.Run(context.Background(), cfg, []string{fx.Dir})
	if !acted {
		t.Fatalf("the hook never ran before %s's commit", first)
	}
	if err == nil || !errors.Is(err, elfedit.ErrChanged) || !strings.Contains(err.Error(), first+": ") || !strings.Contains(err.Error(), "no longer found where it was") {
		t.Fatalf("Patch: %v, want ErrChanged naming %s", err, first)
	}
	for _, p := range append([]string{lib}, names...) {
		if f := fileOf(rep, p); f == nil || len(f.Errors) != 1 || f.Errors[0].Kind != patch.ErrorWrite {
			t.Errorf("%s: %+v, want one write error", p, f)
		}
	}
	if rep.Written || rep.Linked != 0 || rep.Failed != len(names)+1 {
		t.Errorf("report: written %v, %d linked, %d failed; want not written, 0 linked, %d failed", rep.Written, rep.Linked, rep.Failed, len(names)+1)
	}
	if got, err := os.ReadFile(outside); err != nil || !bytes.Equal(got, orig) {
		t.Errorf("%s (moved out of the tree): written (err %v)", outside, err)
	}
}

// TestHardLinksCLI: the command on a tree whose library has 13 names in
// it exits 0, lists every name with its new RUNPATH (the others as hard
// links of the first) and counts the file once; with a 14th name outside
// the tree it exits 2 naming each and writes nothing.
func TestHardLinksCLI(t *testing.T) {
	fx, dir := fsFixture(t)
	bin := cli(t, dir)
	lib := fx.Libs[0]
	names := driNames(fx, 12)
	hardLinked(t, lib, names)
	outside := filepath.Join(dir, "elsewhere", "libfoo.so")
	hardLinked(t, lib, []string{outside})
	before := hashes(t, append(elfFiles(fx), outside)...)
	code, _, stderr := runCLI(t, bin, -1, cliArgs(fx.Dir)...)
	if code != 2 || !strings.Contains(stderr, "error: "+names[3]+": file has several hard links (14 links, 13 of them in the outputs)") {
		t.Errorf("a name outside: exit %d, want 2 and an error for each name\n%s", code, stderr)
	}
	sameHashes(t, before, "a name outside")
	must(t, os.Remove(outside))
	code, stdout, stderr := runCLI(t, bin, -1, cliArgs(fx.Dir)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "cudapatch: patched 2 files (12 more names: hard links), 2 unchanged, 0 skipped, 0 failed") {
		t.Errorf("summary:\n%s", stderr)
	}
	for _, p := range append([]string{lib}, names[1:]...) {
		if want := p + ": RUNPATH " + fixtures.OldRunpath + " -> " + fx.LibDir + "; resolution note for 1 name; a hard link of " + names[0] + ", written with it\n"; !strings.Contains(stdout, want) {
			t.Errorf("stdout does not say %q:\n%s", want, stdout)
		}
	}
	for _, p := range append([]string{lib}, names...) {
		if err := fx.Load(t, p); err != nil {
			t.Errorf("%s does not load: %v", p, err)
		}
	}
	mustRun(t, fx)
}
