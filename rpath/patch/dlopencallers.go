package patch

import (
	"context"
	"debug/elf"
	"maps"
	"os"
	"slices"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// dlopenCallers gives the directories of dlopen names to the files that
// may make the call: glibc searches the RUNPATH of the calling object, and
// a library often hands a name to another's loader routine (PyTorch's
// at::DynamicLibrary in libtorch_cpu). A holder's callers are the dlopen
// importers without .note.dlopen in its DT_NEEDED closure and in its
// output; an output's callers also get the directories of what its other
// files need, for names built at run time. Under DlopenResolve each caller
// is decided again with them after its own (Dep.From, no note entry); a
// holder that cannot call keeps its RUNPATH and reports the names found.
func (c *config) dlopenCallers(ctx context.Context, rep *Report, files []found, ix resolver, t *policy.Target) error {
	if c.Dlopen == policy.DlopenOff {
		return nil
	}
	fs := rep.Files
	if !slices.ContainsFunc(fs, func(f *File) bool { return usable(f) && f.dlopen.Imports }) {
		return nil
	}
	callersOf, err := c.possibleCallers(ctx, fs, files, ix)
	if err != nil || c.Dlopen != policy.DlopenResolve || len(callersOf) == 0 {
		return err
	}
	inherit := inheritedNames(fs, callersOf)
	var redo []int
	for i := range fs {
		if len(inherit[i]) > 0 {
			redo = append(redo, i)
			c.unclaim(fs[i])
			c.kept.give(fs[i].plan)
			fs[i].plan = nil
		}
	}
	return c.big.gatedParallel(ctx, c.jobs, len(redo), func(k int, held bool) bool {
		i := redo[k]
		f := c.decideSafe(files[i], ix, t, held, inherit[i])
		if f == nil {
			return false
		}
		fs[i] = f
		return true
	})
}

// usable: decided, neither skipped nor failed.
func usable(f *File) bool { return f != nil && f.Skipped == "" && len(f.Errors) == 0 }

// passOn lists the callers a file passes names on to: those of the
// names it holds (its DT_NEEDED closure's and its output's), and those of
// the libraries it needs (its output's).
type passOn struct{ names, needed []int }

// possibleCallers maps each file to the files that may make a dlopen call
// for it. A holder that imports no dlopen has its names read and resolved
// here (readHolder).
func (c *config) possibleCallers(ctx context.Context, fs []*File, files []found, ix resolver) (map[int]passOn, error) {
	adj := neededGraph(fs)
	caller := func(j int) bool { return fs[j].dlopen.Imports && !fs[j].dlopen.Noted }
	inRoot := map[string][]int{}
	for j, f := range fs {
		if usable(f) && caller(j) {
			inRoot[files[j].root] = append(inRoot[files[j].root], j)
		}
	}
	out := map[int]passOn{}
	var read []int // holders whose names are still to be read
	for h, f := range fs {
		if !usable(f) {
			continue
		}
		same := slices.DeleteFunc(slices.Clone(inRoot[files[h].root]), func(j int) bool { return j == h })
		var p passOn
		if slices.ContainsFunc(f.Deps, isOutputNeeded) {
			p.needed = same
		}
		if !f.dlopen.Noted {
			cs := closureWhere(adj, h, caller)
			for _, j := range same {
				if !slices.Contains(cs, j) {
					cs = append(cs, j)
				}
			}
			slices.Sort(cs)
			p.names = cs
			if len(cs) > 0 && !f.dlopen.Imports {
				read = append(read, h)
			}
		}
		out[h] = p
	}
	errs := make([]error, len(read))
	if err := parallel(ctx, c.jobs, len(read), func(k int) { errs[k] = c.readHolder(fs[read[k]], ix) }); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err // the first in file order, as a serial run would
		}
	}
	for h, p := range out {
		if !slices.ContainsFunc(fs[h].Deps, ownName) {
			p.names = nil
		}
		if len(p.names)+len(p.needed) == 0 {
			delete(out, h)
		} else {
			out[h] = p
		}
	}
	return out, nil
}

// isOutputNeeded: a DT_NEEDED this file's output passes on to its dlopen
// callers, one resolved to a directory.
func isOutputNeeded(d policy.Dep) bool {
	return d.Source == policy.SourceNeeded && (d.How == policy.HowStore || d.How == policy.HowDriver)
}

// ownName: a name policy.Discovered in the file's own read-only data.
func ownName(d policy.Dep) bool { return d.Source == policy.SourceStrings && d.From == "" }

// neededGraph links each output to the outputs its DT_NEEDED entries
// resolved to, by identity: a DT_NEEDED resolves to a file of the index,
// which may be a link to an output.
func neededGraph(fs []*File) [][]int {
	byID := map[fileID]int{}
	for i, f := range fs {
		if usable(f) {
			if k, ok := statID(f.Path); ok {
				byID[k] = i
			}
		}
	}
	output := map[string]int{} // a DT_NEEDED's file → output index, -1 if none
	adj := make([][]int, len(fs))
	for i, f := range fs {
		if !usable(f) {
			continue
		}
		for _, d := range f.Deps {
			if d.Source != policy.SourceNeeded || d.How != policy.HowStore {
				continue
			}
			j, ok := output[d.Path]
			if !ok {
				j = -1
				if k, ok := statID(d.Path); ok {
					if o, ok := byID[k]; ok {
						j = o
					}
				}
				output[d.Path] = j
			}
			if j >= 0 && j != i {
				adj[i] = append(adj[i], j)
			}
		}
	}
	return adj
}

// inheritedNames lists, per caller, the resolved names its holders pass
// on, each once, marked with the holder it came from: first the names
// files hold, then what files of its output need.
func inheritedNames(fs []*File, callersOf map[int]passOn) map[int][]policy.Dep {
	holders := slices.Sorted(maps.Keys(callersOf))
	inherit := map[int][]policy.Dep{}
	add := func(cl, h int, d policy.Dep) {
		if d.How == "" || d.Path == fs[cl].Path || slices.ContainsFunc(inherit[cl], func(o policy.Dep) bool { return o.Name == d.Name }) {
			return
		}
		d.From, d.Entry, d.ResolvedHow = fs[h].Path, "", ""
		inherit[cl] = append(inherit[cl], d)
	}
	for _, h := range holders {
		for _, cl := range callersOf[h].names {
			for _, d := range fs[h].Deps {
				if !ownName(d) {
					continue
				}
				switch d.How {
				case policy.HowStore, policy.HowVersioned, policy.HowDriver:
				case policy.HowFound:
					// A holder that is no caller reports what it found;
					// a caller needs where.
					d.How = d.ResolvedHow
				default:
					continue
				}
				add(cl, h, d)
			}
		}
	}
	for _, h := range holders {
		for _, cl := range callersOf[h].needed {
			for _, d := range fs[h].Deps {
				// Only a directory the caller lacks: the rest would
				// decide it again for nothing.
				sameDir := func(o policy.Dep) bool { return o.How == d.How && o.Dir == d.Dir }
				if isOutputNeeded(d) && !slices.ContainsFunc(fs[cl].Deps, sameDir) && !slices.ContainsFunc(inherit[cl], sameDir) {
					d.Source = policy.SourceOutput
					add(cl, h, d)
				}
			}
		}
	}
	return inherit
}

// readHolder reads the dlopen names of a file that does not import
// dlopen and resolves them, for its callers: reported on the file as
// found (policy.HowFound, or policy.HowUnresolved), its RUNPATH and note unchanged.
func (c *config) readHolder(out *File, ix resolver) error {
	f, err := c.open(out.Path, false)
	if err != nil {
		out.DlopenError = errMsg(out.Path, err)
		return nil
	}
	defer f.Close()
	d, err := policy.Discover(f, true)
	if err != nil {
		out.DlopenError = err.Error()
	}
	info := f.Info()
	class, machine, osabi := info.ELFClass(), info.ELFMachine(), info.ELFOSABI()
	keepLibc := c.keepLibc || osabi == elf.ELFOSABI_FREEBSD || osabi == elf.ELFOSABI_OPENBSD
	for _, n := range d.Names {
		if slices.ContainsFunc(out.Deps, func(o policy.Dep) bool { return o.Name == n }) {
			continue
		}
		dep, err := c.resolve([]string{n}, ix, class, machine, osabi, keepLibc, false)
		if err == nil {
			dep.Source = policy.SourceStrings
			dep, err = c.resolveVersioned(dep, ix, class, machine, osabi)
		}
		if err != nil {
			return fileError(out.Path, err)
		}
		switch dep.How {
		case policy.HowMissing:
			dep.How = policy.HowUnresolved
		case policy.HowStore, policy.HowVersioned:
			dep.ResolvedHow, dep.How = dep.How, policy.HowFound
		}
		out.Deps = append(out.Deps, dep)
	}
	return nil
}

// closureWhere lists, sorted, the nodes other than from reachable from
// it along adj that satisfy keep.
func closureWhere(adj [][]int, from int, keep func(int) bool) []int {
	seen := map[int]bool{from: true}
	queue := slices.Clone(adj[from])
	var out []int
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		if seen[j] {
			continue
		}
		seen[j] = true
		if keep(j) {
			out = append(out, j)
		}
		queue = append(queue, adj[j]...)
	}
	slices.Sort(out)
	return out
}

// fileID identifies a file across links.
type fileID struct{ dev, ino uint64 }

func statID(p string) (fileID, bool) {
	st, err := os.Stat(p)
	if err != nil {
		return fileID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(sys.Dev), sys.Ino}, true
}
