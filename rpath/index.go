package rpath

import (
	"context"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// index maps library file names to candidates in precedence order.
type index struct {
	byName   map[string][]candidate
	bySoname map[string][]candidate // only for hints: the loader opens files by name
	dirs     []string               // directories indexed, in order
	seen     map[string]bool
}

var soPattern = fnmatch.Compile("*.so*")

// buildIndex indexes libraries the way auto-patchelf's populate_cache does,
// in two rounds, each followed by the absolute, non-$ORIGIN RUNPATH
// directories of what it found, breadth-first: first the outputs
// (recursively unless told not to; skipped with WithIgnoreExisting), then
// the search directories in order. Names are taken in sorted order so that
// the same inputs always give the same result.
func buildIndex(ctx context.Context, c *config, roots []string) (*index, error) {
	ix := &index{byName: map[string][]candidate{}, bySoname: map[string][]candidate{}, seen: map[string]bool{}}
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
			dirs, err := dirsBelow(r)
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
		dirs, err := dirsBelow(r)
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
			if ix.seen[dir] || IsStubDir(dir) {
				continue
			}
			ix.seen[dir] = true
			more, err := ix.addDir(c, dir)
			if err != nil {
				return nil, err
			}
			queue = append(queue, more...)
		}
	}
	return ix, nil
}

// dirsBelow lists dir and every directory below it, in lexical order,
// without following symlinks.
func dirsBelow(dir string) ([]string, error) {
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

// addDir indexes the *.so* files of one directory and returns the absolute,
// non-$ORIGIN RUNPATH directories they name.
func (ix *index) addDir(c *config, dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // a search directory that does not exist holds nothing
		}
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			// A single file, as auto-patchelf's --libs and --paths accept:
			// indexed under its directory if its name is *.so*.
			lst, lerr := os.Lstat(dir)
			if lerr != nil {
				return nil, lerr
			}
			return ix.addFiles(c, filepath.Dir(dir), []fs.DirEntry{fs.FileInfoToDirEntry(lst)}), nil
		}
		return nil, err
	}
	ix.dirs = append(ix.dirs, dir)
	return ix.addFiles(c, dir, ents), nil
}

// addFiles indexes the *.so* files among ents, entries of dir, and returns
// the absolute, non-$ORIGIN RUNPATH directories they name. Their headers are
// read on c.jobs goroutines (a directory of a big tree holds hundreds of
// libraries); the index is then filled in name order, as if read one by one.
func (ix *index) addFiles(c *config, dir string, ents []fs.DirEntry) []string {
	ents = slices.DeleteFunc(slices.Clone(ents), func(e fs.DirEntry) bool { return !soPattern.Match(e.Name()) })
	infos := make([]*elfedit.Info, len(ents))
	_ = parallel(context.Background(), c.jobs, len(ents), func(i int) {
		p := filepath.Join(dir, ents[i].Name())
		st, err := os.Stat(p) // follows symlinks: a link to a library counts
		if err != nil || !st.Mode().IsRegular() {
			return
		}
		f, err := elfedit.Open(p)
		if err != nil {
			return // not ELF (linker scripts like libc.so), or unreadable
		}
		defer f.Close()
		if f.IsDynamic() {
			info := f.Info()
			infos[i] = &info
		}
	})
	var more []string
	for i, e := range ents {
		info := infos[i]
		if info == nil {
			continue
		}
		name := e.Name()
		p := filepath.Join(dir, name)
		cand := candidate{path: p, dir: dir, soname: info.Soname, class: info.ELFClass(), machine: info.ELFMachine(), osabi: info.ELFOSABI()}
		// A link whose target has the same name is reached through the
		// target's directory (auto-patchelf does the same).
		if e.Type()&fs.ModeSymlink != 0 {
			if t, err := filepath.EvalSymlinks(p); err == nil && filepath.Base(t) == name {
				cand.dir = filepath.Dir(t)
			}
		}
		ix.byName[name] = append(ix.byName[name], cand)
		if info.Soname != "" && info.Soname != name {
			ix.bySoname[info.Soname] = append(ix.bySoname[info.Soname], cand)
		}
		for _, r := range runpathDirs(*info) {
			if filepath.IsAbs(r) && !strings.Contains(r, "$") {
				more = append(more, r)
			}
		}
	}
	return more
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

// lookup returns the first compatible candidate for a file name.
func (ix *index) lookup(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) (candidate, bool) {
	for _, c := range ix.byName[name] {
		if compatible(c, class, machine, osabi) {
			return c, true
		}
	}
	return candidate{}, false
}

// sonameHint explains a miss that a DT_SONAME would have matched: the
// loader opens the file by name, so the directory needs a file (or link)
// of that name.
func (ix *index) sonameHint(name string, class elf.Class, machine elf.Machine, osabi elf.OSABI) string {
	for _, c := range ix.bySoname[name] {
		if compatible(c, class, machine, osabi) {
			return c.path + " has this DT_SONAME; the loader needs a file or link named " + name + " in " + c.dir
		}
	}
	return ""
}
