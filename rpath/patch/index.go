package patch

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/policy"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// candidate is one library file the index knows.
type candidate struct {
	path    string // the file as found (possibly a symlink)
	dir     string // the directory a RUNPATH entry names to reach it
	soname  string
	class   elf.Class
	machine elf.Machine
	osabi   elf.OSABI
}

// resolver answers the two questions decide asks of the library index. The
// index below answers them lazily; the tests hold an eager one, the shape
// of auto-patchelf's populate_cache, as the oracle it must agree with.
type resolver interface {
	// lookup returns the first compatible candidate for a file name; the
	// error says the search could not go on (a directory it must read
	// could not be read).
	lookup(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error)
	// sonameHint explains a miss that a DT_SONAME would have matched.
	sonameHint(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) string
	// lookupVersioned returns the first compatible candidate, in the
	// same precedence, whose file name is prefix followed by a version
	// ("libX.so." + "9", see policy.IsVersionOf): a directory's names in sorted
	// order, directories in index order.
	lookupVersioned(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error)
	// lookupPrefix returns the first compatible candidate of each
	// directory whose file name matches a soname prefix
	// (policy.MatchesPrefix), directories in the same precedence.
	lookupPrefix(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) ([]candidate, error)
}

var soPattern = fnmatch.Compile("*.so*")

// index resolves library names with exactly the precedence of an index
// built like auto-patchelf's populate_cache, in two rounds, each followed
// by the absolute, non-$ORIGIN RUNPATH directories of the libraries it
// found, breadth-first: first the outputs (recursively unless told not to;
// skipped with Config.IgnoreExisting), then the search directories in order.
// Within a directory names are taken in sorted order.
//
// It works lazily (a derivation's search path is the lib/ of every build
// input, and reading every library there costs more than patching the
// package): directories are listed when a lookup has not found its name
// in those listed so far, a library's headers read when a wanted name is
// its file name, RUNPATH directories followed only when those queued
// before them are used up. Breadth-first order keeps that exact; only a
// name found nowhere reads everything the search can reach.
type index struct {
	ctx   context.Context
	jobs  int
	open  func(path string, edit bool) (*elfedit.File, error)
	share *share // the files Run decides, which a probe may read for them
	// big is the gate of files with big string tables: a file read for
	// its decide that needs it is not parked (it may wait its turn).
	big *bigGate

	// grow serializes growing the list of listed directories; the fields
	// after it are its state.
	grow    sync.Mutex
	rounds  [][]string // rounds not yet started
	queue   []string   // directories of the current round still to list
	pending []*listing // listed directories whose RUNPATHs are not yet followed, in order
	seen    map[string]bool
	// ahead holds directories listed before their turn (prefetch).
	ahead map[string]listed

	// mu guards what lookups read; growing appends to it.
	mu       sync.Mutex
	byName   map[string][]entry // every listed *.so* name, in precedence order
	lists    []*listing         // every listed directory, in order
	step     int                // counts growth steps, so waiters know whether to grow again
	full     bool               // every reachable directory is listed
	err      error              // why growing stopped early
	bySoname map[string][]candidate
	probes   map[string]*probe
}

// listing is the *.so* entries of one directory, sorted by name.
type listing struct {
	dir  string
	ents []fs.DirEntry
}

// entry is one *.so* name of a listed directory.
type entry struct {
	dir string
	ent fs.DirEntry
}

// listed is the outcome of listing a directory ahead of its turn.
type listed struct {
	l   *listing
	err error
}

// probe is what the headers of one library file say, read once.
type probe struct {
	once    sync.Once
	ok      bool // an ELF file with a dynamic section
	cand    candidate
	runpath []string // absolute, non-$ORIGIN RUNPATH (or RPATH) entries
}

// buildIndex works out the directories of both rounds (roots and search
// directories; recursive ones are walked, names only) and returns the
// index that searches them lazily. below holds the directories below
// roots that collect walked already.
func buildIndex(ctx context.Context, c *job, roots []string, below map[string][]string) (*index, error) {
	var outputs []string
	for _, r := range roots {
		st, err := os.Stat(r)
		if err != nil {
			return nil, err
		}
		switch {
		case !st.IsDir():
			outputs = append(outputs, r) // a library named directly is indexed too
		case c.recurse:
			dirs, ok := below[r]
			if !ok {
				if dirs, err = dirsBelow(ctx, r, c.jobs); err != nil {
					return nil, err
				}
			}
			outputs = append(outputs, dirs...)
		default:
			outputs = append(outputs, r)
		}
	}
	search := slices.Clone(c.search)
	for _, r := range c.searchRecursive {
		dirs, err := dirsBelow(ctx, r, c.jobs)
		if errors.Is(err, fs.ErrNotExist) {
			continue // nothing to search, as for a --search that does not exist
		}
		if err != nil {
			return nil, err
		}
		search = append(search, dirs...)
	}
	rounds := [][]string{outputs, search}
	if c.ignoreExisting {
		rounds = rounds[1:]
	}
	return &index{
		ctx: ctx, jobs: c.jobs, open: c.open, share: c.share, big: c.big, rounds: rounds, seen: map[string]bool{},
		ahead: map[string]listed{}, byName: map[string][]entry{}, probes: map[string]*probe{},
	}, nil
}

// dirsBelow lists dir and every directory below it, in lexical order,
// without following symlinks (nothing when dir is not a directory, as
// filepath.WalkDir visits no directory of it).
func dirsBelow(ctx context.Context, dir string, jobs int) ([]string, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, nil
	}
	d, err := confine.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	_, dirs, err := walkTree(ctx, d, jobs, true)
	return dirs, err
}

// lookup returns the first compatible candidate for a file name, listing
// more directories only while none listed so far has one.
func (ix *index) lookup(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error) {
	if strings.Contains(name, "/") || !soPattern.Match(name) {
		return candidate{}, false, nil // no directory entry has this name
	}
	for i := 0; ; {
		ix.mu.Lock()
		ents, step, full, err := ix.byName[name], ix.step, ix.full, ix.err
		ix.mu.Unlock()
		for ; i < len(ents); i++ {
			if p := ix.probe(ents[i]); p.ok && compatible(p.cand, class, machine, osabi) {
				return p.cand, true, nil
			}
		}
		switch {
		case err != nil:
			return candidate{}, false, err
		case full:
			return candidate{}, false, nil
		}
		ix.growPast(step)
	}
}

// lookupVersioned lists every directory (it is asked after a miss, which
// listed them all already) and takes the first versioned name of prefix.
func (ix *index) lookupVersioned(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool, error) {
	cs, err := ix.matching(prefix, policy.IsVersionOf, 1, class, machine, osabi)
	if err != nil || len(cs) == 0 {
		return candidate{}, false, err
	}
	return cs[0], true, nil
}

// lookupPrefix lists every directory and returns, for each directory
// holding one, in index precedence, the first compatible library whose
// name matches prefix (policy.MatchesPrefix), at most maxPrefixDirs.
func (ix *index) lookupPrefix(prefix string, class elf.Class, machine elf.Machine, osabi elf.OSABI) ([]candidate, error) {
	return ix.matching(prefix, policy.MatchesPrefix, maxPrefixDirs, class, machine, osabi)
}

// maxPrefixDirs bounds the directories one soname prefix adds: a
// caller builds one name, and the directories past the first few hold
// other versions of it.
const maxPrefixDirs = 4

// matching lists every directory and returns the first compatible
// candidate starting with prefix that match accepts of each directory, in
// index precedence (a directory's names in sorted order), at most limit.
func (ix *index) matching(prefix string, match func(name, prefix string) bool, limit int, class elf.Class, machine elf.Machine, osabi elf.OSABI) ([]candidate, error) {
	for {
		ix.mu.Lock()
		step, full, err := ix.step, ix.full, ix.err
		lists := ix.lists
		ix.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if !full {
			ix.growPast(step)
			continue
		}
		var out []candidate
		for _, l := range lists {
			i, _ := slices.BinarySearchFunc(l.ents, prefix, func(e fs.DirEntry, p string) int { return strings.Compare(e.Name(), p) })
			for ; i < len(l.ents) && strings.HasPrefix(l.ents[i].Name(), prefix); i++ {
				if !match(l.ents[i].Name(), prefix) {
					continue
				}
				p := ix.probe(entry{l.dir, l.ents[i]})
				if !p.ok || !compatible(p.cand, class, machine, osabi) {
					continue
				}
				if !slices.ContainsFunc(out, func(c candidate) bool { return c.dir == p.cand.dir }) {
					out = append(out, p.cand)
					if len(out) == limit {
						return out, nil
					}
				}
				break
			}
		}
		return out, nil
	}
}

// sonameHint explains a miss that a DT_SONAME would have matched: the
// loader opens the file by name, so the directory needs a file (or link)
// of that name. It is asked only after a miss, which listed everything.
func (ix *index) sonameHint(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) string {
	for {
		ix.mu.Lock()
		step, full, err := ix.step, ix.full, ix.err
		cands := ix.bySoname[name]
		ix.mu.Unlock()
		if err != nil {
			return ""
		}
		if full {
			for _, c := range cands {
				if compatible(c, class, machine, osabi) {
					return c.path + " has this DT_SONAME; the loader needs a file or link named " + name + " in " + c.dir
				}
			}
			return ""
		}
		ix.growPast(step)
	}
}

// growPast lists the next directory, unless another goroutine grew the
// index since the caller looked at it (step).
func (ix *index) growPast(step int) {
	ix.grow.Lock()
	defer ix.grow.Unlock()
	ix.mu.Lock()
	now := ix.step
	ix.mu.Unlock()
	if now == step {
		ix.growOne()
	}
}

// growOne lists the next directory in precedence order: the next one
// queued; when the queue is empty, the RUNPATH directories of the oldest
// listed directory whose libraries' RUNPATHs were not followed yet are
// queued; when none is left, the next round starts. With no round left the
// index is full. Called with grow held.
func (ix *index) growOne() {
	for {
		if err := ix.ctx.Err(); err != nil {
			ix.finish(err)
			return
		}
		if len(ix.queue) > 0 {
			dir := filepath.Clean(ix.queue[0])
			ix.queue = ix.queue[1:]
			if ix.seen[dir] || policy.IsStubDir(dir) {
				continue
			}
			ix.seen[dir] = true
			l, err := ix.list(dir)
			if err != nil {
				ix.finish(fmt.Errorf("library index: %w", err))
				return
			}
			if l == nil {
				continue
			}
			ix.pending = append(ix.pending, l)
			ix.mu.Lock()
			for _, e := range l.ents {
				ix.byName[e.Name()] = append(ix.byName[e.Name()], entry{l.dir, e})
			}
			ix.lists = append(ix.lists, l)
			ix.step++
			ix.mu.Unlock()
			return
		}
		if len(ix.pending) > 0 {
			ix.queue = append(ix.queue, ix.runpaths(ix.pending)...)
			ix.pending = ix.pending[1:]
			continue
		}
		if len(ix.rounds) > 0 {
			ix.queue, ix.rounds = ix.rounds[0], ix.rounds[1:]
			continue
		}
		ix.finish(nil)
		return
	}
}

// lookAhead bounds the work done ahead of need, per job: directories
// listed, libraries probed. A lookup that misses must wait for the index
// to grow, and growing one directory or one directory's libraries at a
// time leaves the other jobs idle behind it (a name found nowhere grows
// the index fully); a little work ahead, on every job, keeps them busy,
// and a lookup that stops early wastes at most this much.
const lookAhead = 4

// list lists dir, which a listing made ahead of its turn may hold. With
// more than one job it lists, on the index's jobs, dir and the directories
// queued after it, up to lookAhead per job, keeping what it finds (errors
// included) for their turn. Called with grow held.
func (ix *index) list(dir string) (*listing, error) {
	if got, ok := ix.ahead[dir]; ok {
		delete(ix.ahead, dir)
		return got.l, got.err
	}
	if ix.jobs < 2 {
		return listDir(dir)
	}
	dirs := []string{dir}
	for _, q := range ix.queue {
		if len(dirs) >= lookAhead*ix.jobs {
			break
		}
		q = filepath.Clean(q)
		if _, ok := ix.ahead[q]; !ok && !ix.seen[q] && !policy.IsStubDir(q) && !slices.Contains(dirs, q) {
			dirs = append(dirs, q)
		}
	}
	got := make([]listed, len(dirs))
	if parallel(ix.ctx, ix.jobs, len(dirs), func(i int) { got[i].l, got[i].err = listDir(dirs[i]) }) != nil {
		return listDir(dir) // canceled: growOne stops at its next step
	}
	for i, d := range dirs[1:] {
		ix.ahead[d] = got[i+1]
	}
	return got[0].l, got[0].err
}

// finish ends growing: with an error, or with every reachable directory
// listed, when the DT_SONAME hints can be collected (every library's
// headers were read to follow its RUNPATH).
func (ix *index) finish(err error) {
	var bySoname map[string][]candidate
	if err == nil {
		bySoname = map[string][]candidate{}
		for _, l := range ix.lists {
			for _, e := range l.ents {
				p := ix.probe(entry{l.dir, e})
				if p.ok && p.cand.soname != "" && p.cand.soname != e.Name() {
					bySoname[p.cand.soname] = append(bySoname[p.cand.soname], p.cand)
				}
			}
		}
	}
	ix.mu.Lock()
	ix.err, ix.full, ix.bySoname = err, err == nil, bySoname
	ix.step++
	ix.mu.Unlock()
}

// listDir lists the *.so* entries of dir; nil if it does not exist. A
// path that is a file (auto-patchelf's --libs and --paths accept them) is
// listed as its directory holding only that file.
func listDir(dir string) (*listing, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // a search directory that does not exist holds nothing
		}
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			lst, lerr := os.Lstat(dir)
			if lerr != nil {
				return nil, lerr
			}
			ents, dir = []fs.DirEntry{fs.FileInfoToDirEntry(lst)}, filepath.Dir(dir)
		} else {
			return nil, err
		}
	}
	ents = slices.DeleteFunc(ents, func(e fs.DirEntry) bool { return !soPattern.Match(e.Name()) })
	return &listing{dir: dir, ents: ents}, nil
}

// runpaths reads the headers of every library of the oldest pending
// listing, ls[0], and returns the RUNPATH directories they name, in name
// order. It reads them on the index's jobs (a directory of a big tree
// holds hundreds), and with more than one job those of the listings after
// it too, up to lookAhead libraries per job, for their turn.
func (ix *index) runpaths(ls []*listing) []string {
	var ents []entry
	for i, l := range ls {
		if i > 0 && (ix.jobs < 2 || len(ents) >= lookAhead*ix.jobs) {
			break
		}
		for _, e := range l.ents {
			ents = append(ents, entry{l.dir, e})
		}
	}
	_ = parallel(context.Background(), ix.jobs, len(ents), func(i int) { ix.probe(ents[i]) })
	var more []string
	for _, e := range ls[0].ents {
		more = append(more, ix.probe(entry{ls[0].dir, e}).runpath...)
	}
	return more
}

// probe returns what e's headers say, reading them on first use.
func (ix *index) probe(e entry) *probe {
	p := filepath.Join(e.dir, e.ent.Name())
	ix.mu.Lock()
	pr := ix.probes[p]
	if pr == nil {
		pr = &probe{}
		ix.probes[p] = pr
	}
	ix.mu.Unlock()
	pr.once.Do(func() {
		if s := ix.share.seeded(p); s != nil {
			// Deciding it read it (a regular file: found in e.dir).
			pr.ok, pr.cand, pr.runpath = s.ok, s.cand, s.runpath
			pr.cand.dir = e.dir
			return
		}
		pr.read(ix, p, e)
	})
	return pr
}

// read reads the headers of the library at p, found as e. A library of
// the tree not yet decided is read as deciding reads it, and parked for
// its decide (share).
func (pr *probe) read(ix *index, p string, e entry) {
	st, err := os.Stat(p) // follows symlinks: a link to a library counts
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	link := e.ent.Type()&fs.ModeSymlink != 0
	edit := !link && ix.share.wanted(p)
	f, err := ix.open(p, edit)
	if err != nil {
		return // not ELF (linker scripts like libc.so), or unreadable
	}
	pr.fill(f, p, e.dir)
	// A link whose target has the same name is reached through the
	// target's directory (auto-patchelf does the same).
	if pr.ok && link {
		if t, err := filepath.EvalSymlinks(p); err == nil && filepath.Base(t) == e.ent.Name() {
			pr.cand.dir = filepath.Dir(t)
		}
	}
	if edit && !ix.big.needs(f.StringTableSize()) && ix.share.park(p, f) {
		return // its decide closes it
	}
	f.Close()
}

// fill records what the headers of f, the library at p in dir, say.
func (pr *probe) fill(f *elfedit.File, p, dir string) {
	if !f.IsDynamic() {
		return
	}
	h := f.Header
	pr.ok = true
	pr.cand = candidate{path: p, dir: dir, soname: f.Soname(), class: h.Class, machine: h.Machine, osabi: h.OSABI}
	rp, ok := f.RunPath()
	if !ok {
		rp, ok = f.RPath()
	}
	if ok {
		for _, r := range strings.Split(rp, ":") {
			if r != "" && filepath.IsAbs(r) && !strings.Contains(r, "$") {
				pr.runpath = append(pr.runpath, r)
			}
		}
	}
}

func runpathDirs(in elfedit.Info) []string {
	var s string
	switch {
	case in.RunPath != nil:
		s = *in.RunPath
	case in.RPath != nil:
		s = *in.RPath
	default:
		return nil
	}
	return slices.DeleteFunc(strings.Split(s, ":"), func(e string) bool { return e == "" })
}

// compatible says whether a library can satisfy a file: same class and
// machine, and the same OS ABI unless either side is SYSV (the usual value,
// meaning "unspecified").
func compatible(c candidate, class elf.Class, machine elf.Machine, osabi elf.OSABI) bool {
	return c.class == class && c.machine == machine &&
		(c.osabi == osabi || c.osabi == elf.ELFOSABI_NONE || osabi == elf.ELFOSABI_NONE)
}
