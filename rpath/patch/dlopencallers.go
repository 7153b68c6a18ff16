package patch

import (
	"cmp"
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// dlopenCallers gives the names a file that cannot call dlopen holds to
// the files that make the call for it: glibc searches the RUNPATH of the
// calling object. A file that imports dlopen gets what its own data says
// (decide), and of other files only what those that link to it name: a
// directory joins its RUNPATH only for a name a file of its own closure's
// dependents holds. A holder, a file that imports neither
// dlopen nor has a .note.dlopen, hands its names on:
//   - through a loader function (policy.LoaderFunctions) to the library
//     that defines it: an output that imports dlopen gets them; a library
//     outside the outputs has a RUNPATH this run does not write, and the
//     holder reports them policy.HowOutsideCaller, with the fix;
//   - else to the dlopen importers without .note.dlopen of its DT_NEEDED
//     closure among the outputs (a library handing a name to a wrapper of
//     dlopen it links to).
//
// Under DlopenResolve each caller is decided again with them after its
// own (Dep.From, no note entry); a holder keeps its RUNPATH and reports
// the names found.
func (c *job) dlopenCallers(ctx context.Context, fs []*fileWork, files []found, ix resolver, t *policy.Target) error {
	if c.Dlopen == policy.DlopenOff {
		return nil
	}
	if !slices.ContainsFunc(fs, func(f *fileWork) bool { return usable(f) && (f.dlopen.Imports || f.dlopen.Loader != "") }) {
		return nil
	}
	callersOf, adj, err := c.possibleCallers(ctx, fs, ix)
	if err != nil || c.Dlopen != policy.DlopenResolve {
		return err
	}
	inherit := inheritedNames(fs, callersOf)
	if err := c.siblingNeeds(ctx, fs, files, adj, inherit); err != nil {
		return err
	}
	if c.dlopenNeeded {
		addNeeded(fs, inherit)
	}
	var redo []int
	for i := range fs {
		if len(inherit[i]) > 0 {
			redo = append(redo, i)
			c.drop(fs[i])
		}
	}
	return c.big.gatedParallel(ctx, c.jobs, len(redo), func(k int, held bool) bool {
		i := redo[k]
		f := c.decideSafe(files[i], ix, t, held, inherit[i], fs[i])
		if f == nil {
			return false
		}
		if usable(f) {
			f.Deps = keepReported(f.Deps, fs[i].Deps)
		}
		fs[i] = f
		return true
	})
}

// addNeeded gives each holder whose loader lies outside the outputs
// (Config.DlopenNeeded) the names it hands that loader as dependencies of
// its own, policy.SourceAddNeeded: decide makes each a DT_NEEDED and puts
// its directory in the RUNPATH. Only a name resolved to a file of that
// very name qualifies: a versioned one (libX.so for libX.so.9) or a
// driver library would be a DT_NEEDED nothing on the search path
// satisfies as named.
func addNeeded(fs []*fileWork, inherit map[int][]policy.Dep) {
	for h, f := range fs {
		if !usable(f) {
			continue
		}
		for _, d := range f.Deps {
			if d.How != policy.HowOutsideCaller || d.Dir == "" || filepath.Base(d.Path) != d.Name {
				continue
			}
			d.Source, d.How, d.Hint, d.Entry, d.From, d.ResolvedHow = policy.SourceAddNeeded, policy.HowStore, "", "", "", ""
			inherit[h] = append(inherit[h], d)
		}
	}
}

// keepReported is a file's dependencies decided again (now) with those of
// its first decision (was) that it no longer names: a holder's names,
// read for its callers, that it does not take itself.
func keepReported(now, was []policy.Dep) []policy.Dep {
	for _, d := range was {
		if !slices.ContainsFunc(now, func(o policy.Dep) bool { return o.Name == d.Name }) {
			now = append(now, d)
		}
	}
	return now
}

// usable: decided, neither skipped nor failed.
func usable(f *fileWork) bool { return f != nil && f.Skipped == "" && len(f.Errors) == 0 }

// outside is where a holder's loader function lives when no output
// defines it: the function, and the library found for it ("" if none of
// the holder's DT_NEEDED names it).
type outside struct{ fn, lib string }

// possibleCallers maps each holder to the outputs that may make a dlopen
// call for it, and reads and resolves the names of every holder that has
// some, or whose loader lies outside the outputs (readHolder). It returns
// the DT_NEEDED graph of the outputs too (neededGraph).
func (c *job) possibleCallers(ctx context.Context, fs []*fileWork, ix resolver) (map[int][]int, [][]int, error) {
	adj, byID := neededGraph(fs)
	caller := func(j int) bool { return fs[j].dlopen.Imports && !fs[j].dlopen.Noted }
	out := map[int][]int{}
	away := map[int]outside{}
	var read []int // holders whose names are to be read
	for h, f := range fs {
		if usable(f) && caller(h) {
			// A caller's own names reach the callers it links to as
			// well: at::DynamicLibrary's dlopen in libtorch_cpu opens
			// what libtorch_cuda, a dlopen caller too, names.
			if cs := closureWhere(adj, h, caller); len(cs) > 0 {
				out[h] = cs
			}
			continue
		}
		if !usable(f) || f.dlopen.Imports || f.dlopen.Noted {
			continue
		}
		var cs []int
		if fn := f.dlopen.Loader; fn != "" {
			j, lib := loaderLibrary(fs, adj, byID, h, policy.LoaderFunctions[fn])
			switch {
			case j >= 0 && caller(j):
				cs = []int{j}
			case j < 0:
				away[h] = outside{fn, lib}
				read = append(read, h)
				continue
			}
		} else {
			cs = closureWhere(adj, h, caller)
		}
		if len(cs) > 0 {
			out[h] = cs
			read = append(read, h)
		}
	}
	errs := make([]error, len(read))
	if err := parallel(ctx, c.jobs, len(read), func(k int) {
		h := read[k]
		errs[k] = c.readHolder(fs[h], ix, away[h])
	}); err != nil {
		return nil, nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, nil, err // the first in file order, as a serial run would
		}
	}
	for h := range out {
		if !slices.ContainsFunc(fs[h].Deps, ownName) {
			delete(out, h)
		}
	}
	return out, adj, nil
}

// loaderLibrary finds the library whose soname starts with stem ("libgmodule-2.0"
// + ".so") that holder h reaches: the index of the output it is (-1 for
// one outside the outputs) and its path when h's own DT_NEEDED resolved
// it. An output of h's DT_NEEDED closure of that name counts too (h may
// reach it through another library).
func loaderLibrary(fs []*fileWork, adj [][]int, byID map[fileID]int, h int, stem string) (int, string) {
	named := func(name string) bool { return strings.HasPrefix(name, stem+".so") }
	lib := ""
	for _, d := range fs[h].Deps {
		if d.Source != policy.SourceNeeded || !named(d.Name) {
			continue
		}
		if d.How == policy.HowStore {
			if k, ok := statID(d.Path); ok {
				if j, ok := byID[k]; ok {
					return j, d.Path
				}
			}
		}
		lib = cmp.Or(d.Path, d.Name)
	}
	if cs := closureWhere(adj, h, func(j int) bool { return named(filepath.Base(fs[j].Path)) }); len(cs) > 0 {
		return cs[0], fs[cs[0]].Path
	}
	return -1, lib
}

// ownName: a name policy.Discovered in the file's own read-only data.
func ownName(d policy.Dep) bool {
	return (d.Source == policy.SourceStrings || d.Source == policy.SourcePrefix) && d.From == ""
}

// neededGraph links each output to the outputs its DT_NEEDED entries
// resolved to, by identity: a DT_NEEDED resolves to a file of the index,
// which may be a link to an output. It returns the outputs by identity too.
func neededGraph(fs []*fileWork) ([][]int, map[fileID]int) {
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
	return adj, byID
}

// inheritedNames lists, per caller, the resolved names its holders pass
// on, each once, marked with the holder it came from.
func inheritedNames(fs []*fileWork, callersOf map[int][]int) map[int][]policy.Dep {
	holders := slices.Sorted(maps.Keys(callersOf))
	inherit := map[int][]policy.Dep{}
	for _, h := range holders {
		for _, cl := range callersOf[h] {
			for _, d := range fs[h].Deps {
				switch {
				case !ownName(d):
					continue
				case d.How == policy.HowFound:
					// A holder that is no caller reports what it found;
					// a caller needs where.
					d.How = d.ResolvedHow
				case d.How == policy.HowStore, d.How == policy.HowVersioned:
					// A caller's own, resolved.
				case d.How != policy.HowDriver:
					continue
				}
				if d.Path == fs[cl].Path || slices.ContainsFunc(inherit[cl], func(o policy.Dep) bool { return o.Name == d.Name }) {
					continue
				}
				d.From, d.Entry, d.ResolvedHow = fs[h].Path, "", ""
				inherit[cl] = append(inherit[cl], d)
			}
		}
	}
	return inherit
}

// readHolder reads the dlopen names and prefixes of a file that does not
// import dlopen and resolves them, for its callers: reported on the file
// as found (policy.HowFound, or policy.HowUnresolved), its RUNPATH and
// note unchanged. When its loader lies outside the outputs (away.fn set)
// a name resolved is reported policy.HowOutsideCaller instead, with the
// fix in its hint.
func (c *job) readHolder(out *fileWork, ix resolver, away outside) error {
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
	d.Names = slices.DeleteFunc(d.Names, func(n string) bool {
		return slices.ContainsFunc(out.Deps, func(o policy.Dep) bool { return o.Name == n })
	})
	info := f.Info()
	class, machine, osabi := info.ELFClass(), info.ELFMachine(), info.ELFOSABI()
	keepLibc := c.keepLibc || osabi == elf.ELFOSABI_FREEBSD || osabi == elf.ELFOSABI_OPENBSD
	n := len(out.Deps)
	deps, err := c.discovered(out.Path, d, ix, class, machine, osabi, keepLibc, out.Deps)
	if err != nil {
		out.Deps = deps[:n]
		return fileError(out.Path, err)
	}
	for i := n; i < len(deps); i++ {
		dep := &deps[i]
		switch {
		case dep.How == policy.HowMissing:
			dep.How = policy.HowUnresolved
		case dep.How == policy.HowStore || dep.How == policy.HowVersioned || dep.How == policy.HowDriver:
			if away.fn != "" {
				dep.How, dep.Hint = policy.HowOutsideCaller, outsideHint(away, dep)
			} else if dep.How != policy.HowDriver {
				dep.ResolvedHow, dep.How = dep.How, policy.HowFound
			}
		}
	}
	out.Deps = deps
	return nil
}

// outsideHint is the one line that says why a holder's name cannot load
// through this RUNPATH, and what fixes it.
func outsideHint(away outside, dep *policy.Dep) string {
	by := "a library outside the outputs"
	if away.lib != "" {
		by = away.lib + ", outside the outputs"
	}
	where := dep.Dir
	if where == "" {
		where = "the driver link"
	}
	return "dlopened by " + away.fn + " in " + by + ", whose RUNPATH this run does not write: " +
		"give this file a DT_NEEDED on " + dep.Name + " (--dlopen-needed, or patchelf --add-needed) or wrap the program to put " + where + " on LD_LIBRARY_PATH"
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

// siblingNeeds gives each caller a directory outside its output that
// another file of its output needs (DT_NEEDED) and it lacks, when the
// caller can form the name in code: the name's first eight bytes (a
// mov's 64-bit immediate, policy.CodeWord) are in the executable code of
// the caller or of a file of its output whose DT_NEEDED closure reaches
// it (a name built there and handed to the caller's dlopen). The
// evidence is that word in that file (policy.EvidenceCode), the sibling
// that needs the name in From. This is for names built in code, where no
// string holds them: PyTorch 2.11's libtorch_cuda builds "libnvrtc.so.13"
// from immediates ("libnvrtc" is an operand of a mov, not data), and
// libtorch_cpu's at::DynamicLibrary opens it; its sibling
// libcaffe2_nvrtc.so needs libnvrtc.so.13, which puts cuda_nvrtc's
// directory in reach (docs/gpu-proof.md). A library a sibling needs whose
// name no code of the caller's forms is none of its business.
func (c *job) siblingNeeds(ctx context.Context, fs []*fileWork, files []found, adj [][]int, inherit map[int][]policy.Dep) error {
	callers := map[string][]int{} // output root → its callers
	for j, f := range fs {
		if usable(f) && f.dlopen.Imports && !f.dlopen.Noted {
			callers[files[j].root] = append(callers[files[j].root], j)
		}
	}
	type candidate struct {
		cl  int
		dep policy.Dep
	}
	var cands []candidate
	for h, f := range fs {
		if !usable(f) {
			continue
		}
		for _, cl := range callers[files[h].root] {
			if cl == h {
				continue
			}
			for _, d := range f.Deps {
				sameDir := func(o policy.Dep) bool { return o.How == d.How && o.Dir == d.Dir }
				if d.Source != policy.SourceNeeded || d.How != policy.HowStore || d.Path == fs[cl].Path || inRoot(d.Dir, files[cl].root) ||
					slices.ContainsFunc(fs[cl].Deps, sameDir) || slices.ContainsFunc(inherit[cl], sameDir) ||
					slices.ContainsFunc(cands, func(o candidate) bool { return o.cl == cl && sameDir(o.dep) }) {
					continue
				}
				d.Source, d.From, d.Entry, d.ResolvedHow = policy.SourceSibling, f.Path, "", ""
				cands = append(cands, candidate{cl, d})
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	// The files whose code may form a caller's names: itself, and the
	// files of its output whose closure reaches it.
	rev := make([][]int, len(adj)) // j → the files that need j
	for i, js := range adj {
		for _, j := range js {
			rev[j] = append(rev[j], i)
		}
	}
	formers := map[int][]int{}
	words := map[int][]string{} // file → the words to look for in its code
	for _, cd := range cands {
		if _, ok := formers[cd.cl]; !ok {
			root := files[cd.cl].root
			formers[cd.cl] = append([]int{cd.cl}, closureWhere(rev, cd.cl, func(j int) bool { return files[j].root == root })...)
		}
		w := policy.CodeWord(cd.dep.Name)
		for _, h := range formers[cd.cl] {
			if !slices.Contains(words[h], w) {
				words[h] = append(words[h], w)
			}
		}
	}
	held, err := c.codeHeld(ctx, fs, words)
	if err != nil {
		return err
	}
	for _, cd := range cands {
		w := policy.CodeWord(cd.dep.Name)
		for _, h := range formers[cd.cl] {
			if held[h][w] {
				cd.dep.Evidence = policy.Evidence{File: fs[h].Path, String: w, Kind: policy.EvidenceCode}
				inherit[cd.cl] = append(inherit[cd.cl], cd.dep)
				break
			}
		}
	}
	return nil
}

// codeHeld says, for each reader (an index of fs, with the words to look
// for in it), which of its words its executable code holds
// (elfedit.CodeHolds). Fewer readers than jobs have their code read in
// parts at once, as many as the jobs allow and at most one for each
// minCodeShare bytes of the file (whose size bounds its code's): one
// reader is often one big library (libnvrtc, libtorch_cuda), which would
// keep one job busy and the others waiting.
func (c *job) codeHeld(ctx context.Context, fs []*fileWork, words map[int][]string) (map[int]map[string]bool, error) {
	share := int64(minCodeShare)
	if c.codeShare > 0 {
		share = c.codeShare
	}
	type item struct{ h, part, parts int }
	var items []item
	for _, h := range slices.Sorted(maps.Keys(words)) {
		parts := max(1, min(c.jobs/len(words), int(fs[h].size/share)))
		for p := range parts {
			items = append(items, item{h, p, parts})
		}
	}
	found := make([][]bool, len(items))
	errs := make([]error, len(items))
	if err := parallel(ctx, c.jobs, len(items), func(i int) {
		it := items[i]
		found[i], errs[i] = c.codeHolds(fs[it.h].Path, words[it.h], it.part, it.parts)
	}); err != nil {
		return nil, err
	}
	held := make(map[int]map[string]bool, len(words))
	for i, it := range items {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if held[it.h] == nil {
			held[it.h] = map[string]bool{}
		}
		for j, ok := range found[i] {
			w := words[it.h][j]
			held[it.h][w] = held[it.h][w] || ok
		}
	}
	return held, nil
}

// minCodeShare is the least code a part of codeHeld reads: a part costs an
// open and a read of the file's head.
const minCodeShare = 8 << 20

// codeHolds says which of words the executable code of the file at path
// holds, in the part-th of parts shares of it (elfedit.CodeHoldsPart).
func (c *job) codeHolds(path string, words []string, part, parts int) ([]bool, error) {
	f, err := c.open(path, false)
	if err != nil {
		return nil, fileError(path, err)
	}
	defer f.Close()
	bs := make([][]byte, len(words))
	for i, w := range words {
		bs[i] = []byte(w)
	}
	found, err := f.CodeHoldsPart(bs, part, parts)
	if err != nil {
		return nil, fileError(path, fmt.Errorf("reading its code: %w", err))
	}
	return found, nil
}

// inRoot reports whether dir is root or below it.
func inRoot(dir, root string) bool {
	return dir == root || strings.HasPrefix(dir, root+"/")
}
