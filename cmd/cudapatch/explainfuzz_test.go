package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// Running it longer (each run writes a tree and runs the loader):
//
//	go test ./cmd/cudapatch -run=- -fuzz=FuzzExplainAgrees -fuzztime=10m
//
// The agreement tests compare explain with ld.so on trees someone built;
// this one lets the fuzzer shape the tree: which libraries sit in which
// directories under which names, what each needs, its SONAME, its
// DT_RUNPATH or DT_RPATH (with $ORIGIN, empty, relative, symlinked and
// missing entries), a 32-bit library the loader must pass over, a
// versioned name's link, and LD_LIBRARY_PATH.

// treeBytes reads the fuzzer's bytes one choice at a time; past the end
// every choice is 0.
type treeBytes []byte

func (b *treeBytes) pick(n int) int {
	if len(*b) == 0 {
		return 0
	}
	v := int((*b)[0]) % n
	*b = (*b)[1:]
	return v
}

var (
	// fuzzDirs are where libraries are placed; "link" is a symlink to d1,
	// and the last ones are what glibc-hwcaps, the legacy subdirectories
	// (tls, platform, hardware capabilities), $PLATFORM and $LIB name.
	// "d0/stubs" is a stub directory, as the CUDA toolkit's lib/stubs.
	fuzzDirs = []string{"d0", "d1", "d2", "d0/sub", "link",
		"d1/glibc-hwcaps/x86-64-v2", "d1/glibc-hwcaps/x86-64-v3", "d1/tls", "d1/x86_64", "d1/haswell/x86_64",
		"d0/x86_64", "d0/haswell", "lib/x86_64-linux-gnu", "lib64", "d0/stubs"}
	// fuzzNames are what libraries are called and need; all but the last
	// are placed. libcuda.so.1 is the driver's: a copy in the tree stands
	// for the toolkit's stub, or a vendored one.
	fuzzNames = []string{"liba.so", "libb.so.1", "libcc.so", "libd.so.2", "libcuda.so.1", "libmissing.so"}
	// fuzzEntries are RUNPATH entries; "@" is the tree's root.
	fuzzEntries = []string{"$ORIGIN", "$ORIGIN/../d1", "@/d0", "@/d1", "@/d2", "@/d0/sub", "@/link",
		"", "${ORIGIN}/sub", "/nonexistent", "$ORIGIN/../link", "rel", "@/d1/", "$ORIGIN/..",
		"@/d0/$PLATFORM", "@/${LIB}", "$ORIGIN/../$LIB"}
)

// shape is what shapedTree builds from: the compiled templates, and
// whether the files get resolution-cache notes.
type shape struct {
	app, lib, lib32 []byte
	notes           bool
}

// shapeTemplates compiles what shapedTree edits: a program, a library,
// and the same library for i686, which the loader must pass over.
func shapeTemplates(f *testing.F, notes bool) shape {
	if _, err := exec.LookPath("i686-linux-gnu-gcc"); err != nil {
		f.Fatalf("%s needs i686-linux-gnu-gcc (scripts/deps.sh installs it)", f.Name())
	}
	read := func(c fixtures.C) []byte {
		b, err := os.ReadFile(fixtures.Compile(f, c))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	sh := shape{notes: notes}
	sh.app = read(fixtures.C{Source: "int main(void) { return 0; }\n"})
	libSrc := fixtures.C{Source: "int fz(void) { return 1; }\n", Args: []string{"-shared", "-fPIC"}}
	sh.lib = read(libSrc)
	libSrc.Compiler = "i686-linux-gnu-gcc"
	sh.lib32 = read(libSrc)
	return sh
}

// addTreeSeeds adds the smallest tree's input and n inputs of size fixed
// random bytes (PCG stream 43, stream).
func addTreeSeeds(f *testing.F, stream uint64, n, size int) {
	f.Add([]byte{0})
	rng := rand.New(rand.NewPCG(43, stream))
	for range n {
		seed := make([]byte, size)
		for i := range seed {
			seed[i] = byte(rng.UintN(256))
		}
		f.Add(seed)
	}
}

// shapedTree writes the tree the bytes describe below root and returns
// its program and the environment to run it in. Paths written into the
// files and the environment name the tree as at (root itself when "").
func shapedTree(t *testing.T, root, at string, b treeBytes, sh shape) (string, []string) {
	if at == "" {
		at = root
	}
	if err := os.MkdirAll(filepath.Join(root, "d1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d1", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range fuzzDirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := func() (*string, elfedit.PathTag) {
		tag := b.pick(3)
		if tag == 0 {
			return nil, elfedit.TagRunPath
		}
		s := ""
		for i := range 1 + b.pick(3) {
			if i > 0 {
				s += ":"
			}
			e := fuzzEntries[b.pick(len(fuzzEntries))]
			s += rooted(e, at)
		}
		if tag == 1 {
			return &s, elfedit.TagRunPath
		}
		return &s, elfedit.TagRPath
	}
	needs := func(min int) []string {
		var out []string
		for range min + b.pick(3) {
			out = append(out, fuzzNames[b.pick(len(fuzzNames))])
		}
		return out
	}
	place := func(p string, data []byte, e elfedit.Edit) {
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		e.EmptyEntries = true
		if _, err := elfedit.EditFile(p, e, elfedit.Options{}); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	var placed []string // where the libraries are, as at names them
	for range 1 + b.pick(5) {
		name := fuzzNames[b.pick(len(fuzzNames)-1)]
		dir := fuzzDirs[b.pick(len(fuzzDirs))]
		p := filepath.Join(root, dir, name)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		e := elfedit.Edit{AddNeeded: needs(0)}
		switch b.pick(4) {
		case 0, 1:
			e.Soname = &name
		case 2:
			other := fuzzNames[b.pick(len(fuzzNames))]
			e.Soname = &other
		}
		e.SetPath, e.Tag = path()
		// DF_1_NODEFLIB: the default directories and the cache are
		// skipped for this library's own needs.
		e.NoDefaultLib = b.pick(8) == 0
		if sh.notes && b.pick(2) == 0 {
			e.SetNote = shapedNote(&b, at, e.AddNeeded, placed)
		}
		data := sh.lib
		if b.pick(8) == 7 {
			// The loader passes over a library of the wrong class and
			// searches on; edit it as is, with no needs of its own.
			data, e = sh.lib32, elfedit.Edit{Soname: e.Soname}
		}
		place(p, data, e)
		placed = append(placed, filepath.Join(at, dir, name))
		if b.pick(4) == 0 {
			// A versioned name's link, as a package installs it.
			link := filepath.Join(filepath.Dir(p), "liblink.so")
			if _, err := os.Lstat(link); err != nil {
				if err := os.Symlink(name, link); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	exe := filepath.Join(root, "d2", "app")
	e := elfedit.Edit{AddNeeded: needs(1)}
	e.SetPath, e.Tag = path()
	if sh.notes && b.pick(4) != 0 {
		e.SetNote = shapedNote(&b, at, e.AddNeeded, placed)
	}
	place(exe, sh.app, e)
	var env []string
	if d := b.pick(len(fuzzDirs) + 1); d < len(fuzzDirs) {
		env = append(env, "LD_LIBRARY_PATH="+filepath.Join(at, fuzzDirs[d]))
	}
	return filepath.Join(at, "d2", "app"), env
}

// rooted replaces a leading "@" of a fuzzEntries entry with the tree's
// path.
func rooted(e, at string) string {
	if len(e) > 0 && e[0] == '@' {
		return at + e[1:]
	}
	return e
}

// noteNames are the names a shaped note answers: the tree's, libc's and
// the versioned name's link.
var noteNames = append([]string{"libc.so.6", "liblink.so"}, fuzzNames...)

// shapedNote is a resolution-cache note the bytes describe: pairs of a
// name and a list of files (=) and directories (?) of the tree, some of
// them missing, of the wrong class, directories given as files,
// relative, empty or unknown elements, or no element at all (which
// switches the note off); now and then a descriptor without the empty
// name that ends it, which the loader ignores. Names are mostly the
// object's own needs, and files mostly libraries already placed, so that
// the note often answers a lookup, rightly or not.
func shapedNote(b *treeBytes, at string, needs, placed []string) *elfedit.Note {
	odd := []string{"x", "=", "?", "=" + at + "/d1", "=/lib64/libc.so.6", "?/lib64", "=" + at + "/link/libb.so.1",
		"=" + at + "/d1/liblink.so", "=d1/liba.so", "=/nonexistent/libb.so.1"}
	var desc []byte
	for range b.pick(4) {
		var elems []string
		for range b.pick(4) {
			switch b.pick(5) {
			case 0:
				elems = append(elems, "="+filepath.Join(at, fuzzDirs[b.pick(len(fuzzDirs))], fuzzNames[b.pick(len(fuzzNames))]))
			case 1:
				if len(placed) > 0 {
					elems = append(elems, "="+placed[b.pick(len(placed))])
				}
			case 2, 3:
				elems = append(elems, "?"+rooted(fuzzEntries[b.pick(len(fuzzEntries))], at))
			default:
				elems = append(elems, odd[b.pick(len(odd))])
			}
		}
		name := noteNames[b.pick(len(noteNames))]
		if len(needs) > 0 && b.pick(4) != 0 {
			name = needs[b.pick(len(needs))]
		}
		desc = append(desc, name...)
		desc = append(desc, 0)
		desc = append(desc, strings.Join(elems, ":")...)
		desc = append(desc, 0)
	}
	desc = append(desc, 0) // the empty name that ends the pairs
	if b.pick(8) == 0 {
		desc = desc[:len(desc)-1]
	}
	return &elfedit.Note{NoteID: ldcache.NoteID, Desc: desc, Section: ".note.nixos.ldcache"}
}

// FuzzExplainAgrees: on any tree the bytes shape, explain's load order
// is the one the host's loader lists (`ld.so --list`, else
// LD_TRACE_LOADED_OBJECTS), name for name and path for path.
func FuzzExplainAgrees(f *testing.F) {
	if _, err := os.Stat(hostLoader); err != nil {
		f.Skip("not an x86_64 glibc host")
	}
	sh := shapeTemplates(f, false)
	// Seeds: trees from fixed random bytes, and the smallest tree.
	addTreeSeeds(f, 30, 12, 64)
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		exe, env := shapedTree(t, root, "", treeBytes(data), sh)
		want, _, ok := ldList(t, exe, env...)
		if !ok {
			return
		}
		assert.Equal(t, want, explainPairs(t, exe, env...), "tree %q", data)
	})
}
