package lint

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// rootProber answers ldcache.Build's questions inside the linter's root.
type rootProber struct{ l *linter }

func (p rootProber) SearchableDir(f string) bool { return ldcache.SearchableDir(p.l.host(f)) }
func (p rootProber) Readable(f string) bool      { return syscall.Access(p.l.host(f), 4) == nil }
func (p rootProber) Exists(f string) bool        { return syscall.Access(p.l.host(f), 0) == nil }

// noteRules are the rules cudapatch writes notes with, for this linter's
// driver links: what a note should say is what ldcache.Build says with them.
func (l *linter) noteRules() ldcache.Rules { return policy.ResolutionRules(l.driverLinks...) }

var noteRuleIDs = []string{NoteStale, NoteNeeded, NoteStub, NoteOutsideStore, NoteMalformed, NoteUnloaded, NoteMissing}

// noteBeyondNeeded says whether the note has an entry for a name that is
// not a DT_NEEDED name.
func noteBeyondNeeded(nt *ldso.Note, needed []string) bool {
	return slices.ContainsFunc(nt.Cache, func(e ldcache.Entry) bool { return !slices.Contains(needed, e.Name) })
}

// checkNote checks the resolution-cache note (.note.nixos.ldcache) against
// what ldcache.Build writes for the file's current search path, with the
// rules cudapatch uses. nixpkgs' loader reads the note before DT_RUNPATH,
// so a note that disagrees with the search path wins over it. dlopened
// are the names the file dlopens (its .note.dlopen's, else those
// policy.DiscoverDlopen finds): an entry for one of them is no leftover, and
// is checked like a DT_NEEDED name's; one without an entry is no finding
// (cudapatch --dlopen off|report writes none).
func (l *linter) checkNote(j job, in elfedit.Info, nt *ldso.Note, dlopened []string, add addFunc) {
	if !slices.ContainsFunc(noteRuleIDs, func(id string) bool { return j.rules.on[id] }) {
		return
	}
	search, tag := "", "search path"
	switch {
	case in.RunPath != nil:
		search, tag = *in.RunPath, "DT_RUNPATH"
	case in.RPath != nil:
		search, tag = *in.RPath, "DT_RPATH"
	}
	names := slices.Clone(in.Needed)
	if nt != nil {
		for _, n := range dlopened {
			if _, ok := nt.Cache.Lookup(n); ok {
				names = append(names, n)
			}
		}
	}
	want, outcome := ldcache.Build(names, search, rootProber{l}, l.noteRules())
	if !noteReadable(in, nt, outcome, tag, add) {
		return
	}
	c := l.newNoteCheck(j, in, search, tag, dlopened, add)
	for _, e := range nt.Cache {
		c.entry(e, want)
	}
	for _, n := range in.Needed {
		if !c.needed[n] {
			continue
		}
		c.needed[n] = false // once per name
		if _, ok := nt.Cache.Lookup(n); ok {
			continue
		}
		if w, ok := want.Lookup(n); ok {
			add(NoteNeeded, n, "DT_NEEDED %s has no entry in the note, though %s resolves it (%s): the loader walks the search path for it", n, tag, w.PathList())
		}
	}
}

// noteReadable reports a file without a note that should have one, and a
// note the loader does not read or cannot decode; it says whether there
// is a note whose entries are worth checking.
func noteReadable(in elfedit.Info, nt *ldso.Note, outcome ldcache.Outcome, tag string, add addFunc) bool {
	if nt == nil {
		// Only DT_RUNPATH: the loader reads the note after the DT_RPATH
		// walk, so for a DT_RPATH file a note saves nothing.
		if outcome == ldcache.Built && in.RunPath != nil {
			add(NoteMissing, "", "no resolution-cache note: nixpkgs' loader walks %s for each of its %d DT_NEEDED libraries", tag, len(in.Needed))
		}
		return false
	}
	if !nt.Loaded {
		add(NoteUnloaded, ldcache.Section, "%s is not in a PT_NOTE segment (objcopy --add-section makes such notes): the loader never reads it, but Nix's reference scan keeps the store paths in it in the closure", ldcache.Section)
		return false
	}
	switch {
	case nt.Err != nil:
		add(NoteMalformed, "", "the note does not decode (%v); the loader reads such a note its own way", nt.Err)
		return false
	case len(nt.Desc) <= 2:
		add(NoteMalformed, "", "the descriptor is %d bytes, which the loader ignores: an empty note is no note", len(nt.Desc))
		return false
	}
	return true
}

// noteCheck is what checking a note's entries needs: the names the
// loader searches for (needed), the store and whether the file is in it,
// the directories of its search path.
type noteCheck struct {
	l       *linter
	j       job
	add     addFunc
	tag     string
	needed  map[string]bool
	store   string
	inStore bool
	dirs    []string
}

func (l *linter) newNoteCheck(j job, in elfedit.Info, search, tag string, dlopened []string, add addFunc) *noteCheck {
	c := &noteCheck{l: l, j: j, add: add, tag: tag, needed: map[string]bool{}}
	for _, n := range in.Needed {
		if !strings.Contains(n, "/") {
			c.needed[n] = true
		}
	}
	for _, n := range dlopened {
		c.needed[n] = true
	}
	c.store = strings.TrimSuffix(l.storeDir, "/") + "/"
	c.inStore = strings.HasPrefix(j.logical, c.store)
	origin := path.Dir(j.logical)
	for _, e := range ldcache.SplitPath(search) {
		if d, ok := expandOrigin(e, origin); ok && path.IsAbs(d) {
			c.dirs = append(c.dirs, path.Clean(d))
		}
	}
	return c
}

// entry checks one entry of the note against what the search path gives.
func (c *noteCheck) entry(e ldcache.Entry, want ldcache.Cache) {
	if len(e.Elements) == 0 {
		c.add(NoteMalformed, e.Name, "%s has an empty path list: nixpkgs' loader stops trusting the whole note at that entry", e.Name)
		return
	}
	if !c.needed[e.Name] {
		c.add(NoteNeeded, e.Name, "the note has an entry for %s, which is not a DT_NEEDED name the loader searches for: a leftover of an edit of DT_NEEDED, and its paths stay in the closure", e.Name)
		return
	}
	got := c.own(e.Name, e.Elements, true)
	w, _ := want.Lookup(e.Name)
	exp := c.own(e.Name, w.Elements, false)
	if slices.Equal(got, exp) {
		return
	}
	c.add(NoteStale, e.Name, "%s: the note says %q, but %s gives %q: %s; the patched loader follows the note", e.Name, listOf(got), c.tag, listOf(exp), c.l.staleReason(got, exp, c.dirs))
}

// own is what the specific rules (stub, outside the store, build
// directory), where they are on, have not already reported (report says
// to report it); only that is compared with what the search path gives,
// on both sides.
func (c *noteCheck) own(name string, els []ldcache.Element, report bool) []ldcache.Element {
	on := func(id string) bool { return c.j.rules.on[id] && !c.j.rules.ignored(id, c.j.rel) }
	var kept []ldcache.Element
	for _, el := range els {
		dir := el.Path
		if el.Exact {
			dir = path.Dir(el.Path)
		}
		switch {
		case policy.IsStubDir(dir) && on(NoteStub):
			if report {
				c.add(NoteStub, name, "%s: note element %s is in the stub directory %s; a stub libcuda reached at run time fails with \"CUDA driver is a stub library\", and the stubs stay in the closure", name, el, dir)
			}
		case c.l.underBuildDir(el.Path) != "" && on(NoteOutsideStore):
			if report {
				c.add(NoteOutsideStore, name, "%s: note element %s is under the build directory %s, which is gone at run time (or, worse, writable by others)", name, el, c.l.underBuildDir(el.Path))
			}
		case el.Exact && c.inStore && !strings.HasPrefix(el.Path, c.store) && on(NoteOutsideStore):
			if report {
				c.add(NoteOutsideStore, name, "%s: note element %s is outside %s: the loader opens that host file before searching %s", name, el, c.l.storeDir, c.tag)
			}
		default:
			kept = append(kept, el)
		}
	}
	return kept
}

// staleReason says why a note's path list differs from the search path's.
func (l *linter) staleReason(got, exp []ldcache.Element, dirs []string) string {
	for _, el := range got {
		if !el.Exact {
			continue
		}
		if !path.IsAbs(el.Path) {
			return fmt.Sprintf("%s is relative, opened against the current directory", el)
		}
		if !(rootProber{l}).Exists(el.Path) {
			return fmt.Sprintf("%s is gone", el.Path)
		}
		if !slices.Contains(dirs, path.Clean(path.Dir(el.Path))) {
			return fmt.Sprintf("%s is no longer in the search path", path.Dir(el.Path))
		}
	}
	if len(got) > 0 && len(exp) > 0 && got[0] != exp[0] && exp[0].Exact {
		return fmt.Sprintf("%s comes first", exp[0].Path)
	}
	if len(exp) == 0 {
		return "the search path gives it nothing the note may name"
	}
	return "the elements differ"
}

func listOf(els []ldcache.Element) string { return ldcache.Entry{Elements: els}.PathList() }

// underBuildDir returns the build directory p lies under, "" if none. A
// build directory that holds the store (/tmp, for a test's store or an
// unprivileged Nix's) does not make a path in the store a leak: the store
// is where the files linted are to run from.
func (l *linter) underBuildDir(p string) string {
	inStore := within(p, l.storeDir)
	for _, b := range l.buildDirs {
		b = strings.TrimSuffix(b, "/")
		if (p == b || strings.HasPrefix(p, b+"/")) && !(inStore && within(l.storeDir, b)) {
			return b
		}
	}
	return ""
}

// within says whether p is dir or lies below it.
func within(p, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return p == dir || strings.HasPrefix(p, dir+"/")
}
