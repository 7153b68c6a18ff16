package patch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// The library index is lazy: it lists directories and reads a library's
// headers only as lookups need them. These tests hold it to the eager
// index it replaced (patch.UseEagerIndex, the oracle): the same answer to
// every question, on random trees full of what real trees hold (links,
// RUNPATH chains and cycles, stub directories, other architectures,
// linker scripts, hostile ELF files), and on real trees given by
// CUDAPATCH_INDEX_TREES. Every policy test's tree is also patched with
// both (tree.patch).

// indexPool is the set of real files random trees are made of: a library
// per architecture and OS ABI, a PIE executable, a static executable.
type indexPool struct {
	libs   []string // shared libraries (first: x86-64 SYSV)
	others []string // executables, static and dynamic
	blobs  [][]byte // hostile ELF files: the fuzz corpora
}

func newIndexPool(t *testing.T) *indexPool {
	t.Helper()
	p := &indexPool{}
	base := cfix.Spec{Soname: "libbase.so.0", Needed: []string{"libdep.so"}}
	for _, s := range []cfix.Spec{
		base,
		{Arch: "i686", Soname: base.Soname, Needed: base.Needed},
		{Arch: "aarch64", Soname: base.Soname, Needed: base.Needed},
		{Soname: base.Soname, Needed: base.Needed, OSABI: byte(3)}, // GNU/Linux
		{Soname: base.Soname, Needed: base.Needed, OSABI: byte(9)}, // FreeBSD
	} {
		p.libs = append(p.libs, cfix.Build(t, s))
	}
	p.others = append(p.others, cfix.Build(t, cfix.Spec{Exe: true, Needed: []string{"libdep.so"}}),
		cfix.Build(t, cfix.Spec{Exe: true, Static: true}))
	for _, dir := range []string{"../elfedit/testdata/fuzz/FuzzRead", "../elfedit/testdata/fuzz/FuzzEdit"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if b := fuzzCorpusBytes(t, filepath.Join(dir, e.Name())); b != nil {
				p.blobs = append(p.blobs, b)
			}
		}
	}
	if len(p.blobs) == 0 {
		t.Fatal("no fuzz corpus entries")
	}
	return p
}

// fuzzCorpusBytes returns the first []byte argument of a Go fuzz corpus
// file.
func fuzzCorpusBytes(t *testing.T, path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "[]byte("); ok {
			b, err := strconv.Unquote(strings.TrimSuffix(s, ")"))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return []byte(b)
		}
	}
	return nil
}

// randomTree is one random tree and the Run arguments that search it.
type randomTree struct {
	root  string
	paths []string
	opts  patch.Config
	desc  []string // what the options are, for failure messages
}

// indexNames are the file names random trees use: few, so that the same
// name turns up in many directories and precedence matters.
var indexNames = []string{
	"liba.so", "liba.so.1", "libb.so.2", "libc.so.6", "libd.so.1.2.3", "libe.so", "libbase.so.0", "libx.so.9",
}

func (p *indexPool) randomTree(t *testing.T, rng *rand.Rand) *randomTree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	abs := func(rel string) string { return filepath.Join(root, rel) }
	dirs := []string{
		"out", "out/lib", "out/lib/sub", "out/bin",
		"s0", "s1", "s2", "s3",
		"h0", "h1", "h2", "h3", "h3/deep", // reached only through RUNPATHs
		"cuda/lib64/stubs", "x-cuda_cudart-12-stubs/lib",
		"tree", "tree/a", "tree/a/b", "tree/stubs",
	}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	// RUNPATH entries: directories of the tree, a missing one, stub
	// directories, $ORIGIN and relative ones, a file.
	entries := func() string {
		var es []string
		for range 1 + rng.IntN(3) {
			switch rng.IntN(10) {
			case 0:
				es = append(es, "$ORIGIN/../"+pick(dirs))
			case 1:
				es = append(es, pick(dirs)) // relative: never followed
			case 2:
				es = append(es, abs("nowhere"))
			case 3:
				es = append(es, abs(pick(dirs))+"/")
			case 4:
				es = append(es, abs(pick(dirs)+"/"+pick(indexNames)))
			default:
				es = append(es, abs(pick(dirs)))
			}
		}
		return strings.Join(es, ":")
	}
	var placed []string
	for _, d := range dirs {
		if err := os.MkdirAll(abs(d), 0o755); err != nil {
			t.Fatal(err)
		}
		for range rng.IntN(6) {
			rel := d + "/" + pick(indexNames)
			dst := abs(rel)
			if _, err := os.Lstat(dst); err == nil {
				continue
			}
			switch k := rng.IntN(20); {
			case k < 12: // a library: any architecture, any DT_SONAME, a RUNPATH or RPATH
				cfix.Copy(t, p.libs[rng.IntN(len(p.libs))], dst)
				var e elfedit.Edit
				if rng.IntN(3) > 0 {
					s := pick(indexNames)
					e.Soname = &s
				}
				if rng.IntN(3) > 0 {
					rp := entries()
					e.SetPath = &rp
					if rng.IntN(3) == 0 {
						e.Tag = elfedit.TagRPath
					}
				}
				if !e.IsZero() {
					if _, err := elfedit.EditFile(dst, e, elfedit.Options{}); err != nil {
						t.Fatalf("%s: %v", rel, err)
					}
				}
			case k < 13:
				cfix.Copy(t, p.others[rng.IntN(len(p.others))], dst)
			case k < 14: // hostile: a fuzz corpus entry
				if err := os.WriteFile(dst, p.blobs[rng.IntN(len(p.blobs))], 0o644); err != nil {
					t.Fatal(err)
				}
			case k < 15: // hostile: a real library with bytes flipped in its headers
				b, err := os.ReadFile(p.libs[0])
				if err != nil {
					t.Fatal(err)
				}
				for range 1 + rng.IntN(4) {
					b[rng.IntN(min(len(b), 512))] ^= byte(1 + rng.IntN(255))
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
			case k < 16: // a linker script, as libc.so is
				if err := os.WriteFile(dst, []byte("INPUT(libc.so.6)\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			case k < 19: // links: same name elsewhere, another name, dangling, a directory, a loop
				var target string
				switch rng.IntN(5) {
				case 0:
					target = abs(pick(dirs) + "/" + filepath.Base(rel))
				case 1:
					target = pick(indexNames)
				case 2:
					target = "../" + pick(dirs) + "/" + pick(indexNames)
				case 3:
					target = abs(pick(dirs))
				default:
					target = filepath.Base(rel)
				}
				if err := os.Symlink(target, dst); err != nil {
					t.Fatal(err)
				}
			default: // a directory with a library's name
				if err := os.Mkdir(dst, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			placed = append(placed, rel)
		}
	}
	tr := &randomTree{root: root, paths: []string{abs("out")}}
	if len(placed) > 0 && rng.IntN(4) == 0 {
		f := pick(placed)
		tr.paths = append(tr.paths, abs(f)) // a file given as a path to patch
		tr.desc = append(tr.desc, "path "+f)
	}
	var search []string
	for _, i := range rng.Perm(4) {
		if rng.IntN(4) > 0 {
			search = append(search, abs("s"+strconv.Itoa(i)))
		}
	}
	if rng.IntN(3) == 0 {
		search = append(search, abs(pick(dirs)), abs("nowhere"), abs("cuda/lib64/stubs"))
	}
	if len(placed) > 0 && rng.IntN(4) == 0 {
		search = append(search, abs(pick(placed))) // a file as a search directory
	}
	tr.opts.Search = append(tr.opts.Search, search...)
	tr.desc = append(tr.desc, fmt.Sprintf("search %q", search))
	if rng.IntN(2) == 0 {
		tr.opts.SearchRecursive = append(tr.opts.SearchRecursive, abs("tree"))
		tr.desc = append(tr.desc, "search-recursive tree")
	}
	if rng.IntN(4) == 0 {
		tr.opts.IgnoreExisting = true
		tr.desc = append(tr.desc, "ignore-existing")
	}
	if rng.IntN(4) == 0 {
		tr.opts.NoRecurse = true
		tr.desc = append(tr.desc, "no-recurse")
	}
	tr.opts.Jobs = 1 + rng.IntN(4)
	return tr
}

// TestIndexMatchesEagerOnRandomTrees: on random trees, the lazy index gives
// the eager one's answer to every question (each name it could know, each
// architecture, the DT_SONAME hints), asked in any order and concurrently,
// and Patch decides every file the same way with either. The seeds are
// fixed plus one from the clock, which a failure names
// (CUDAPATCH_INDEX_SEED=N repeats it).
func TestIndexMatchesEagerOnRandomTrees(t *testing.T) {
	pool := newIndexPool(t)
	var seeds []uint64
	for i := range 24 {
		seeds = append(seeds, uint64(i+1))
	}
	seeds = append(seeds, uint64(time.Now().UnixNano()))
	if s := os.Getenv("CUDAPATCH_INDEX_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	asked := 0
	for _, seed := range seeds {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			tr := pool.randomTree(t, rng)
			extra := append(slices.Clone(indexNames), "a/b.so", "libnothere.so", "liba", tr.root+"/s0/liba.so")
			diffs, n, err := patch.CompareIndexes(context.Background(), &tr.opts, seed, 200, tr.paths, extra)
			if err != nil {
				t.Fatalf("seed %d (%s): %v", seed, strings.Join(tr.desc, ", "), err)
			}
			asked += n
			for _, d := range diffs {
				t.Errorf("seed %d (%s): %s", seed, strings.Join(tr.desc, ", "), d)
			}
			sameAsEager(t, tr.paths, tr.opts)
		})
	}
	t.Logf("%d questions asked of both indexes", asked)
}

// TestIndexWorkFollowsLookups: the index reads the headers of a library
// only when a wanted name is its file name, and follows RUNPATHs only when
// a name is not found in the directories queued before them; a name found
// nowhere reads everything (it must be missing everywhere).
func TestIndexWorkFollowsLookups(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("liba.so"))
	for i := range 40 {
		tr.place(fmt.Sprintf("s0/lib%02d.so", i), lib(fmt.Sprintf("lib%02d.so", i)))
	}
	tr.place("s0/libhop.so", withRunpath(lib("libhop.so"), "{root}/hidden"))
	tr.place("s1/liba.so", lib("liba.so"))
	tr.place("hidden/libh.so", lib("libh.so"))
	opts := patch.Config{Search: tr.ps("s0", "s1")}
	for _, c := range []struct {
		names  []string
		want   []string
		stats  patch.IndexStats
		reason string
	}{
		{[]string{"lib07.so"}, []string{"{root}/s0/lib07.so"}, patch.IndexStats{Listed: 3, Probed: 1},
			"out, out/bin, s0 listed; one header read"},
		{[]string{"liba.so"}, []string{"{root}/s1/liba.so"}, patch.IndexStats{Listed: 4, Probed: 1},
			"s1 is searched before any RUNPATH of s0 is followed"},
		{[]string{"libh.so"}, []string{"{root}/hidden/libh.so"}, patch.IndexStats{Listed: 5, Probed: 42},
			"found only through libhop.so's RUNPATH: s0 and s1 are read whole"},
		{[]string{"libnothere.so"}, []string{""}, patch.IndexStats{Listed: 5, Probed: 43, Full: true},
			"missing: everything is read"},
		{[]string{"lib01.so", "lib02.so", "lib01.so"}, []string{"{root}/s0/lib01.so", "{root}/s0/lib02.so", "{root}/s0/lib01.so"},
			patch.IndexStats{Listed: 3, Probed: 2}, "each header read once"},
	} {
		got, stats, err := patch.IndexLookups(context.Background(), &opts, tr.ps("out"), c.names)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.want {
			c.want[i] = tr.x(c.want[i])
		}
		if !slices.Equal(got, c.want) || stats != c.stats {
			t.Errorf("%q (%s): found %q, %+v; want %q, %+v", c.names, c.reason, got, stats, c.want, c.stats)
		}
	}
}

// TestIndexMatchesEagerOnRealTrees compares both indexes on real trees,
// too big for the repository: CUDAPATCH_INDEX_TREES names a JSON file
// holding a list of {"paths": [...], "search": [...],
// "search_recursive": [...], "ignore_existing": bool}. bench/index.sh
// writes one for the CUDA corpus, the debootstrap userland and the host's
// library directories.
func TestIndexMatchesEagerOnRealTrees(t *testing.T) {
	file := os.Getenv("CUDAPATCH_INDEX_TREES")
	if file == "" {
		t.Skip("set CUDAPATCH_INDEX_TREES to a JSON list of trees (bench/index.sh)")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var trees []struct {
		Paths           []string `json:"paths"`
		Search          []string `json:"search"`
		SearchRecursive []string `json:"search_recursive"`
		IgnoreExisting  bool     `json:"ignore_existing"`
		Patch           bool     `json:"patch"` // also compare Patch's decisions (a dry run)
	}
	if err := json.Unmarshal(b, &trees); err != nil {
		t.Fatal(err)
	}
	for i, tr := range trees {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			opts := patch.Config{
				Search:          tr.Search,
				SearchRecursive: tr.SearchRecursive,
				IgnoreExisting:  tr.IgnoreExisting,
			}
			diffs, n, err := patch.CompareIndexes(context.Background(), &opts, uint64(i), 300, tr.Paths, []string{"libnothere.so"})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Error(d)
			}
			t.Logf("paths %q, %d search, %d recursive: %d questions, %d disagreements",
				tr.Paths, len(tr.Search), len(tr.SearchRecursive), n, len(diffs))
			if tr.Patch {
				cfg := opts
				cfg.Policy.IgnoreMissing = append(cfg.Policy.IgnoreMissing, "*")
				sameAsEager(t, tr.Paths, cfg)
			}
		})
	}
}
