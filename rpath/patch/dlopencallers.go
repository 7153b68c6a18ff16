package patch

import (
	"context"
	"debug/elf"
	"os"
	"slices"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// dlopenCallers gives the directories of the names dlopen discovery
// resolves to every file that may make the dlopen call, not only to the
// one whose read-only data holds the name. glibc's dlopen searches the
// RUNPATH of the object that calls it (_dl_map_object searches the
// caller's DT_RUNPATH; a caller with one gets no DT_RPATH of its loaders
// or of the executable), and a library often hands a name to a loader
// routine of a library it depends on: PyTorch's libtorch_cuda holds
// "libnvrtc.so.13", at::DynamicLibrary in libtorch_cpu calls dlopen. So
// the possible callers of a name that a file H holds are H itself when it
// imports dlopen, and every output in H's DT_NEEDED closure, as this run
// resolved it, that imports dlopen or dlmopen (and has no .note.dlopen,
// which says with authority what it dlopens). H's names are read even
// when H does not import dlopen, as long as its closure has such a
// caller; H's own RUNPATH and note are then unchanged (it cannot make the
// call), its names are reported as found.
//
// Under policy.DlopenResolve each caller is decided again with those names
// (policy.Dep.From the file holding them): their directories follow its own in
// its RUNPATH, with no note entry. A file no rule touches is decided once
// and comes out as before.
func (c *config) dlopenCallers(ctx context.Context, rep *Report, files []found, ix resolver, t *policy.Target) error {
	if c.Dlopen == policy.DlopenOff {
		return nil
	}
	fs := rep.Files
	usable := func(f *File) bool { return f != nil && f.Skipped == "" && len(f.Errors) == 0 }
	if !slices.ContainsFunc(fs, func(f *File) bool { return usable(f) && f.dlopen.Imports }) {
		return nil
	}
	// The outputs by identity: a DT_NEEDED resolves to a file of the
	// index, which may be a link to an output.
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
	caller := func(j int) bool { return fs[j].dlopen.Imports && !fs[j].dlopen.Noted }
	// The names each holder passes on, resolved.
	var holders []int
	callersOf := map[int][]int{}
	names := map[int][]policy.Dep{}
	for h, f := range fs {
		if !usable(f) || f.dlopen.Noted {
			continue
		}
		cs := closureWhere(adj, h, caller)
		if len(cs) == 0 {
			continue
		}
		if !f.dlopen.Imports {
			if err := c.readHolder(f, ix); err != nil {
				return err
			}
		}
		var own []policy.Dep
		for _, d := range f.Deps {
			if d.Source == policy.SourceStrings && d.From == "" {
				own = append(own, d)
			}
		}
		if len(own) == 0 {
			continue
		}
		holders = append(holders, h)
		callersOf[h], names[h] = cs, own
	}
	if c.Dlopen != policy.DlopenResolve || len(holders) == 0 {
		return nil
	}
	inherit := map[int][]policy.Dep{}
	for _, h := range holders {
		for _, cl := range callersOf[h] {
			for _, d := range names[h] {
				switch d.How {
				case policy.HowStore, policy.HowVersioned, policy.HowDriver:
				case policy.HowFound:
					// A holder that is no caller reports what it found;
					// a caller needs where.
					d.How = d.ResolvedHow
				default:
					continue
				}
				if d.How == "" || slices.ContainsFunc(inherit[cl], func(o policy.Dep) bool { return o.Name == d.Name }) {
					continue
				}
				d.From, d.Entry, d.ResolvedHow = fs[h].Path, "", ""
				inherit[cl] = append(inherit[cl], d)
			}
		}
	}
	var redo []int
	for i := range fs {
		if len(inherit[i]) > 0 {
			redo = append(redo, i)
			if fs[i].claim != nil {
				fs[i].claim.Close()
				fs[i].claim = nil
			}
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
