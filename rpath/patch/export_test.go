package patch

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// This file holds the eager library index, the shape of auto-patchelf's
// populate_cache and of cudapatch before the index became lazy, as the
// oracle the lazy index is checked against: every test tree is patched
// with both (tree.patch in helpers_test.go), and CompareIndexes asks both
// every question a tree allows.

// eagerIndex maps library file names to candidates in precedence order,
// read up front: every library of every reachable directory.
type eagerIndex struct {
	byName   map[string][]candidate
	bySoname map[string][]candidate
	seen     map[string]bool
	order    []candidate // every candidate, in precedence order
}

func buildEagerIndex(ctx context.Context, c *job, roots []string) (*eagerIndex, error) {
	ix := &eagerIndex{byName: map[string][]candidate{}, bySoname: map[string][]candidate{}, seen: map[string]bool{}}
	var outputs []string
	for _, r := range roots {
		st, err := os.Stat(r)
		if err != nil {
			return nil, err
		}
		switch {
		case !st.IsDir():
			outputs = append(outputs, r)
		case c.recurse:
			dirs, err := walkDirsBelow(r)
			if err != nil {
				return nil, err
			}
			outputs = append(outputs, dirs...)
		default:
			outputs = append(outputs, r)
		}
	}
	search := slices.Clone(c.search)
	for _, r := range c.searchRecursive {
		dirs, err := walkDirsBelow(r)
		if err != nil {
			return nil, err
		}
		search = append(search, dirs...)
	}
	rounds := [][]string{outputs, search}
	if c.ignoreExisting {
		rounds = rounds[1:]
	}
	for _, queue := range rounds {
		for len(queue) > 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			dir := filepath.Clean(queue[0])
			queue = queue[1:]
			if ix.seen[dir] || policy.IsStubDir(dir) {
				continue
			}
			ix.seen[dir] = true
			more, err := ix.addDir(dir)
			if err != nil {
				return nil, err
			}
			queue = append(queue, more...)
		}
	}
	return ix, nil
}

func (ix *eagerIndex) addDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			lst, lerr := os.Lstat(dir)
			if lerr != nil {
				return nil, lerr
			}
			return ix.addFiles(filepath.Dir(dir), []fs.DirEntry{fs.FileInfoToDirEntry(lst)}), nil
		}
		return nil, err
	}
	return ix.addFiles(dir, ents), nil
}

func (ix *eagerIndex) addFiles(dir string, ents []fs.DirEntry) []string {
	var more []string
	for _, e := range ents {
		name := e.Name()
		if !soPattern.Match(name) {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		f, err := elfedit.Open(p)
		if err != nil {
			continue
		}
		if !f.IsDynamic() {
			f.Close()
			continue
		}
		info := f.Info()
		f.Close()
		cand := candidate{path: p, dir: dir, soname: info.Soname, class: info.ELFClass(), machine: info.ELFMachine(), osabi: info.ELFOSABI()}
		if e.Type()&fs.ModeSymlink != 0 {
			if t, err := filepath.EvalSymlinks(p); err == nil && filepath.Base(t) == name {
				cand.dir = filepath.Dir(t)
			}
		}
		ix.byName[name] = append(ix.byName[name], cand)
		ix.order = append(ix.order, cand)
		if info.Soname != "" && info.Soname != name {
			ix.bySoname[info.Soname] = append(ix.bySoname[info.Soname], cand)
		}
		for _, r := range runpathDirs(info) {
			if filepath.IsAbs(r) && !strings.Contains(r, "$") {
				more = append(more, r)
			}
		}
	}
	return more
}

func (ix *eagerIndex) lookup(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error) {
	for _, c := range ix.byName[name] {
		if compatible(c, class, machine, osabi) {
			return c, true, nil
		}
	}
	return candidate{}, false, nil
}

func (ix *eagerIndex) lookupVersioned(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error) {
	for _, c := range ix.order {
		if policy.IsVersionOf(filepath.Base(c.path), prefix) && compatible(c, class, machine, osabi) {
			return c, true, nil
		}
	}
	return candidate{}, false, nil
}

func (ix *eagerIndex) lookupPrefix(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) ([]candidate, error) {
	var out []candidate
	for _, c := range ix.order {
		if policy.MatchesPrefix(filepath.Base(c.path), prefix) && compatible(c, class, machine, osabi) &&
			!slices.ContainsFunc(out, func(o candidate) bool { return o.dir == c.dir }) && len(out) < maxPrefixDirs {
			out = append(out, c)
		}
	}
	return out, nil
}

func (ix *eagerIndex) sonameHint(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) string {
	for _, c := range ix.bySoname[name] {
		if compatible(c, class, machine, osabi) {
			return c.path + " has this DT_SONAME; the loader needs a file or link named " + name + " in " + c.dir
		}
	}
	return ""
}

// UseEagerIndex makes Run with cfg use the eager oracle instead of the
// lazy index.
func UseEagerIndex(cfg *Config) {
	cfg.hooks.newIndex = func(ctx context.Context, c *job, roots []string, _ map[string][]string) (resolver, error) {
		return buildEagerIndex(ctx, c, roots)
	}
}

// IndexStats is how much of the index a run touched.
type IndexStats struct {
	Listed int // directories listed
	Probed int // library files whose headers were read
	Full   bool
}

// IndexLookups builds the lazy index for paths with cfg, looks up each
// name (for an x86-64 SYSV file) in order and returns the paths found
// ("" for a miss) and how much of the index that took.
func IndexLookups(ctx context.Context, cfg *Config, paths, names []string) ([]string, IndexStats, error) {
	rc, err := resolve(cfg)
	if err != nil {
		return nil, IndexStats{}, err
	}
	c := newJob(rc)
	roots, err := absDirs("path", paths)
	if err != nil {
		return nil, IndexStats{}, err
	}
	ix, err := buildIndex(ctx, c, roots, nil)
	if err != nil {
		return nil, IndexStats{}, err
	}
	var out []string
	for _, n := range names {
		cand, _, err := ix.lookup(n, elf.ELFCLASS64, elf.EM_X86_64, elf.ELFOSABI_NONE)
		if err != nil {
			return nil, IndexStats{}, err
		}
		out = append(out, cand.path)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return out, IndexStats{Listed: len(ix.lists), Probed: len(ix.probes), Full: ix.full}, nil
}

// CompareIndexes builds the eager and the lazy index for paths with cfg
// and asks both every question the tree allows: for every name either
// index could know (every *.so* name of every directory it reaches, every
// DT_SONAME, and extra), for every architecture a library there has and
// a few more, the first compatible candidate and the DT_SONAME hint. The
// lazy index is asked in a random order from several goroutines, as
// decide does, and the first fresh questions of that order (all when
// fresh < 0) each on a fresh index, as the first question of a run. It
// returns one line per disagreement and the number of questions asked.
func CompareIndexes(ctx context.Context, cfg *Config, seed uint64, fresh int, paths, extra []string) ([]string, int, error) {
	rc, err := resolve(cfg)
	if err != nil {
		return nil, 0, err
	}
	c := newJob(rc)
	roots, err := absDirs("path", paths)
	if err != nil {
		return nil, 0, err
	}
	eager, err := buildEagerIndex(ctx, c, roots)
	if err != nil {
		// The eager index fails on the first directory it cannot read;
		// the lazy one fails where it must, or fails the lookups that
		// reach that directory: a name found nowhere reaches them all.
		lazy, lerr := buildIndex(ctx, c, roots, nil)
		if lerr != nil {
			if lerr.Error() != err.Error() {
				return []string{fmt.Sprintf("building the index:\n  lazy  %v\n  eager %v", lerr, err)}, 1, nil
			}
			return nil, 1, nil
		}
		_, _, lerr = lazy.lookup("libnothing-has-this-name.so", elf.ELFCLASS64, elf.EM_X86_64, elf.ELFOSABI_NONE)
		if lerr == nil || !strings.Contains(lerr.Error(), err.Error()) {
			return []string{fmt.Sprintf("a miss, when the eager index failed:\n  lazy  %v\n  eager %v", lerr, err)}, 1, nil
		}
		return nil, 1, nil
	}
	type arch struct {
		class   elf.Class
		machine elf.Machine
		osabi   elf.OSABI
	}
	archs := map[arch]bool{
		{elf.ELFCLASS64, elf.EM_X86_64, elf.ELFOSABI_NONE}:    true,
		{elf.ELFCLASS64, elf.EM_X86_64, elf.ELFOSABI_LINUX}:   true,
		{elf.ELFCLASS64, elf.EM_X86_64, elf.ELFOSABI_FREEBSD}: true,
		{elf.ELFCLASS32, elf.EM_386, elf.ELFOSABI_NONE}:       true,
		{elf.ELFCLASS64, elf.EM_AARCH64, elf.ELFOSABI_NONE}:   true,
	}
	names := map[string]bool{}
	for _, n := range extra {
		names[n] = true
	}
	for n, cs := range eager.byName {
		names[n] = true
		for _, c := range cs {
			archs[arch{c.class, c.machine, c.osabi}] = true
		}
	}
	for n := range eager.bySoname {
		names[n] = true
	}
	type question struct {
		name string
		a    arch
	}
	var qs []question
	for n := range names {
		for a := range archs {
			qs = append(qs, question{n, a})
		}
	}
	slices.SortFunc(qs, func(x, y question) int { return strings.Compare(fmt.Sprint(x), fmt.Sprint(y)) })
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })

	ask := func(ix resolver, q question) (string, error) {
		cand, ok, err := ix.lookup(q.name, q.a.class, q.a.machine, q.a.osabi)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%v %+v hint %q", ok, cand, ix.sonameHint(q.name, q.a.class, q.a.machine, q.a.osabi)), nil
	}
	want := make([]string, len(qs))
	for i, q := range qs {
		if want[i], err = ask(eager, q); err != nil {
			return nil, 0, err
		}
	}
	var diffs []string
	var mu sync.Mutex
	differ := func(q question, how, got, want string) {
		mu.Lock()
		defer mu.Unlock()
		diffs = append(diffs, fmt.Sprintf("%s %v (%s):\n  lazy  %s\n  eager %s", q.name, q.a, how, got, want))
	}
	// All questions, shuffled, on one lazy index shared by jobs goroutines.
	lazy, err := buildIndex(ctx, c, roots, nil)
	if err != nil {
		return nil, 0, err
	}
	err = parallel(ctx, max(c.jobs, 4), len(qs), func(i int) {
		got, err := ask(lazy, qs[i])
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want[i] {
			differ(qs[i], "shared", got, want[i])
		}
	})
	if err != nil {
		return nil, 0, err
	}
	// Questions first on a fresh index: what it answers before it has
	// grown for anything else.
	if fresh < 0 || fresh > len(qs) {
		fresh = len(qs)
	}
	for i, q := range qs[:fresh] {
		fresh, err := buildIndex(ctx, c, roots, nil)
		if err != nil {
			return nil, 0, err
		}
		got, err := ask(fresh, q)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want[i] {
			differ(q, "fresh", got, want[i])
		}
	}
	slices.Sort(diffs)
	return diffs, len(qs) + fresh, nil
}

// walkDirsBelow is dirsBelow as filepath.WalkDir gives it, one directory
// at a time: the eager oracle lists its directories independently of the
// walk Patch makes.
func walkDirsBelow(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// CountOpens counts in opens, by path, the files Run with cfg opens to
// read them: to decide them, or as the index's probes.
func CountOpens(cfg *Config, opens map[string]int) {
	var mu sync.Mutex
	cfg.hooks.wrapOpen = func(open openFunc) openFunc {
		return func(path string, edit bool) (*elfedit.File, error) {
			mu.Lock()
			opens[path]++
			mu.Unlock()
			return open(path, edit)
		}
	}
}

// SetCodeShare sets the least code a part of the sibling rule's code scan
// reads (8 MiB otherwise): at 1, a reader's code is read in as many parts
// as the jobs allow.
func SetCodeShare(cfg *Config, n int64) { cfg.hooks.codeShare = n }

// CountDiscovers counts, by path, how often decide reads a file's
// read-only data for dlopen discovery in Run with cfg.
func CountDiscovers(cfg *Config, reads map[string]int) {
	var mu sync.Mutex
	cfg.hooks.discovering = func(path string) {
		mu.Lock()
		reads[path]++
		mu.Unlock()
	}
}

// CountTableOpens counts, by path, how often the symbol check of Run with
// cfg opens a file to read its tables whole.
func CountTableOpens(cfg *Config, opens map[string]int) {
	var mu sync.Mutex
	cfg.hooks.tablesOpened = func(path string) {
		mu.Lock()
		opens[path]++
		mu.Unlock()
	}
}

// SetBigTable sets the string table size from which a file is decided
// and written alone (defaultBigTable otherwise): at 1, every file is big.
func SetBigTable(cfg *Config, n int) { cfg.hooks.bigTable = n }

// BigGate is the big files' gate and its scheduler, for the tests.
type BigGate struct{ g *bigGate }

func NewBigGate() BigGate { return BigGate{newBigGate(1)} }

func (b BigGate) Enter(n int, held bool) (leave func(), ok bool) { return b.g.enter(n, held) }

func (b BigGate) Parallel(ctx context.Context, jobs, n int, fn func(i int, held bool) bool) error {
	return b.g.gatedParallel(ctx, jobs, n, fn)
}

// SetBeforeWrite runs fn before each file is written, with its path:
// the moment between the decisions and a write that a tree changed by
// another process (a directory swapped for a link, bytes appended, a
// second run) meets.
func SetBeforeWrite(cfg *Config, fn func(path string)) { cfg.hooks.beforeWrite = fn }

// SetWriteHook runs fn at the moments of each file's write that
// elfedit.WithHook names ("commit": after the last check but one, just
// before the commit), with the file's path.
func SetWriteHook(cfg *Config, fn func(path, at string)) { cfg.hooks.writeHook = fn }

// SetHeldClaims lets decide hold at most n files open and locked for
// the write phase (the descriptors left otherwise); past n, a file is
// released after deciding and taken again, checked, when written.
func SetHeldClaims(cfg *Config, n int64) { cfg.hooks.heldClaims = &n }

// SetSelectorMachine makes the selector read a fake machine: procfs at
// proc, sysfs at sys.
func SetSelectorMachine(cfg *Config, proc, sys string) {
	cfg.hooks.selectorProc, cfg.hooks.selectorSys = proc, sys
}
