package patch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// tree is a test's directory of fixtures. Paths in its methods are relative
// to the root; "{root}" in expected strings stands for the root.
type tree struct {
	t    *testing.T
	root string
}

func newTree(t *testing.T) *tree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &tree{t: t, root: root}
}

// p returns the absolute path of rel ("{root}" allowed).
func (tr *tree) p(rel string) string {
	rel = tr.x(rel)
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(tr.root, rel)
}

// x expands "{root}".
func (tr *tree) x(s string) string { return strings.ReplaceAll(s, "{root}", tr.root) }

// ps maps p over rels.
func (tr *tree) ps(rels ...string) []string {
	out := make([]string, len(rels))
	for i, r := range rels {
		out[i] = tr.p(r)
	}
	return out
}

func (tr *tree) place(rel string, s cfix.Spec) {
	tr.t.Helper()
	s.RunPath, s.RPath = tr.x(s.RunPath), tr.x(s.RPath)
	s.Needed = slices.Clone(s.Needed)
	for i, n := range s.Needed {
		s.Needed[i] = tr.x(n)
	}
	cfix.Place(tr.t, s, tr.p(rel))
}

func (tr *tree) write(rel, content string) {
	tr.t.Helper()
	p := tr.p(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) symlink(rel, target string) {
	tr.t.Helper()
	p := tr.p(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Symlink(tr.x(target), p); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) mkdir(rel string) {
	tr.t.Helper()
	if err := os.MkdirAll(tr.p(rel), 0o755); err != nil {
		tr.t.Fatal(err)
	}
}

// snapshot hashes every regular file below the root, by relative path.
func (tr *tree) snapshot() map[string][32]byte {
	tr.t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(tr.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tr.root, p)
		out[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		tr.t.Fatal(err)
	}
	return out
}

// unchangedSince fails the test for every file that differs from snap.
func (tr *tree) unchangedSince(snap map[string][32]byte) {
	tr.t.Helper()
	now := tr.snapshot()
	for rel, h := range snap {
		if now[rel] != h {
			tr.t.Errorf("%s was written", rel)
		}
	}
	for rel := range now {
		if _, ok := snap[rel]; !ok {
			tr.t.Errorf("%s was created", rel)
		}
	}
}

// dyn is what an independent reader (debug/elf, not elfedit) sees of a
// file's dynamic linking.
type dyn struct {
	interp  string
	runpath []string // DT_RUNPATH values (at most one in a sane file)
	rpath   []string
	needed  []string
}

func readDyn(t *testing.T, path string) dyn {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	var d dyn
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			d.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	d.runpath, _ = f.DynString(elf.DT_RUNPATH)
	d.rpath, _ = f.DynString(elf.DT_RPATH)
	d.needed, _ = f.DynString(elf.DT_NEEDED)
	return d
}

// runpathOf returns the file's DT_RUNPATH ("" when it has none) and fails
// if it has a DT_RPATH or more than one DT_RUNPATH.
func (tr *tree) runpathOf(rel string) string {
	tr.t.Helper()
	d := readDyn(tr.t, tr.p(rel))
	if len(d.rpath) > 0 {
		tr.t.Errorf("%s: has DT_RPATH %q", rel, d.rpath)
	}
	switch len(d.runpath) {
	case 0:
		return ""
	case 1:
		return d.runpath[0]
	}
	tr.t.Errorf("%s: %d DT_RUNPATH entries: %q", rel, len(d.runpath), d.runpath)
	return strings.Join(d.runpath, "|")
}

// patch runs patch.Patch on the given roots (relative to the tree), after
// checking that the lazy library index decides exactly as the eager oracle.
func (tr *tree) patch(roots []string, cfg patch.Config) (*patch.Report, error) {
	tr.t.Helper()
	sameAsEager(tr.t, tr.ps(roots...), cfg)
	rep, err := patch.Run(context.Background(), &cfg, tr.ps(roots...))
	if rep != nil && rep.Written {
		for _, f := range rep.Files {
			if f.Changed && len(f.Errors) == 0 {
				mapsOnHost(tr.t, f.Path)
			}
		}
	}
	return rep, err
}

// mapsOnHost fails the test when the host's glibc refuses to map a
// patched x86_64 file ("error while loading shared libraries: FILE: ...",
// as for segments that share a page). Its libraries need not be found:
// most fixtures name stubs the tree does not hold, and a missing one is
// reported under its own name. Every file the main job writes in these
// tests goes through here, so a layout the loader refuses cannot pass
// for one that only reads back right.
func mapsOnHost(t *testing.T, path string) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		return // not ELF: the report says what it is
	}
	dynamic := slices.ContainsFunc(ef.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_DYNAMIC })
	native := ef.Machine == elf.EM_X86_64
	ef.Close()
	if !dynamic || !native {
		return
	}
	cmd := exec.Command(hostLoader, "--list", path)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LD_LIBRARY_PATH=") })
	out, _ := cmd.CombinedOutput()
	if bytes.Contains(out, []byte("error while loading shared libraries: "+path+": ")) {
		t.Errorf("the host's loader refuses the patched file: %s", bytes.TrimSpace(out))
	}
}

// sameAsEager fails the test unless a dry run with the lazy library index
// reports exactly what one with the eager oracle (patch.UseEagerIndex)
// reports: every file, dependency, path, hint, RUNPATH and error.
func sameAsEager(t testing.TB, roots []string, cfg patch.Config) {
	t.Helper()
	dry := cfg
	dry.Write.DryRun = true
	lazy, lerr := patch.Run(context.Background(), &dry, roots)
	eagerCfg := dry
	patch.UseEagerIndex(&eagerCfg)
	eager, eerr := patch.Run(context.Background(), &eagerCfg, roots)
	// The eager index fails the whole run on an entry it cannot read (a
	// symbolic-link loop, say); the lazy one fails only the files whose
	// lookups reach it, with that error. When the lazy run did not fail
	// with it, its lookups never reached the entry, so its decisions must
	// be the eager index's on the tree without it: move each such entry
	// aside and ask the eager index again.
	for moved := 0; eager == nil && eerr != nil; moved++ {
		if lerr != nil && strings.Contains(lerr.Error(), eerr.Error()) {
			return
		}
		var pe *fs.PathError
		if !errors.As(eerr, &pe) || !strings.HasPrefix(pe.Path, os.TempDir()+"/") || moved == 8 {
			t.Errorf("eager index failed, the lazy one did not fail with its error:\nlazy:  %v\neager: %v", lerr, eerr)
			return
		}
		aside := filepath.Join(t.TempDir(), "aside")
		if err := os.Rename(pe.Path, aside); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.Rename(aside, pe.Path); err != nil {
				t.Error(err)
			}
		}()
		eager, eerr = patch.Run(context.Background(), &eagerCfg, roots)
	}
	if fmt.Sprint(lerr) != fmt.Sprint(eerr) {
		t.Errorf("lazy index: error %v\neager index: error %v", lerr, eerr)
	}
	lj, _ := json.MarshalIndent(lazy, "", " ")
	ej, _ := json.MarshalIndent(eager, "", " ")
	if !bytes.Equal(lj, ej) {
		t.Errorf("lazy and eager index decide differently:\nlazy:  %s\neager: %s", lj, ej)
	}
}

// mustPatch runs Patch and fails on error.
func (tr *tree) mustPatch(roots []string, cfg patch.Config) *patch.Report {
	tr.t.Helper()
	rep, err := tr.patch(roots, cfg)
	if err != nil {
		tr.t.Fatalf("Patch: %v", err)
	}
	if !rep.Written {
		tr.t.Fatalf("Patch: report says nothing was written")
	}
	return rep
}

// file returns the report's entry for rel.
func (tr *tree) file(rep *patch.Report, rel string) *patch.File {
	tr.t.Helper()
	for _, f := range rep.Files {
		if f.Path == tr.p(rel) {
			return f
		}
	}
	tr.t.Fatalf("no report entry for %s", rel)
	return nil
}

// dep returns the decision about one dependency of rel.
func (tr *tree) dep(rep *patch.Report, rel, name string) policy.Dep {
	tr.t.Helper()
	for _, d := range tr.file(rep, rel).Deps {
		if d.Name == name {
			return d
		}
	}
	tr.t.Fatalf("%s: no decision about %s in %+v", rel, name, tr.file(rep, rel).Deps)
	return policy.Dep{}
}

// missing renders the report's missing list as "NAME wanted by REL".
func (tr *tree) missing(rep *patch.Report) []string {
	var out []string
	for _, m := range rep.Missing {
		rel, _ := filepath.Rel(tr.root, m.File)
		out = append(out, m.Name+" wanted by "+rel)
	}
	return out
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// Shorthands for specs.
func lib(soname string, needed ...string) cfix.Spec {
	return cfix.Spec{Soname: soname, Needed: needed}
}

func exe(needed ...string) cfix.Spec { return cfix.Spec{Exe: true, Needed: needed} }

func withRunpath(s cfix.Spec, rp string) cfix.Spec { s.RunPath = rp; return s }
