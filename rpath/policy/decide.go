package policy

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// Facts are what the policy knows of one file: no bytes, only what was
// read from it and where it was found.
type Facts struct {
	Path string // the file
	Root string // the path to patch it was found under
	// Machine is its ELF machine (EM_386 gets the 32-bit driver link).
	Machine elf.Machine
	// Interpreter is its PT_INTERP: "" for a library.
	Interpreter string
	// OldPath are the entries of its DT_RUNPATH, else of its DT_RPATH.
	OldPath []string
	// Links answers where symbolic links lead, for $ORIGIN entries; nil
	// is the host's file system.
	Links Links
}

// Links is what the policy asks of the file system: where symbolic links
// lead. The policy reads no file; the tests answer without files.
type Links interface {
	// EvalSymlinks is filepath.EvalSymlinks.
	EvalSymlinks(path string) (string, error)
	// SameDir says whether a and b name the same existing directory;
	// true when either does not exist, as nothing better can be known.
	SameDir(a, b string) bool
}

// Decision is what the policy decides for one file.
type Decision struct {
	// Deps are the dependencies as reported: those given, then the
	// inherited ones the file did not name itself, each with its RUNPATH
	// entry where that is not its directory.
	Deps []Dep
	// RunPath is the new search path; "" keeps the file's.
	RunPath string
	// AsRPath says RunPath is written as DT_RPATH.
	AsRPath bool
	// Interpreter is the new interpreter; "" keeps the file's.
	Interpreter string
	// NoteNames are the names the resolution note answers: DT_NEEDED,
	// then the .note.dlopen and (DlopenResolve) dlopen-string names
	// resolved to the store or the driver.
	NoteNames []string
	// Problems are the RUNPATH entries that fail the audit, each wrapping
	// ErrAudit.
	Problems []error
}

// Decide is the RUNPATH policy: given a file's facts, its dependencies as
// resolved (DT_NEEDED in order, then .note.dlopen entries, then the
// dlopen-string names, Source set), the dependencies it may dlopen for
// other files (inherited: Dep.From set), it decides the file's RUNPATH,
// its interpreter and the names of its resolution note, and audits the
// RUNPATH. It reads no file.
//
// The RUNPATH is, in this order (auto-patchelf's; the one statement of
// it besides the README, which other documents link to):
//
//	[cuda_compat selector] : driver link : [runtime deps] : resolved dirs : [appends] : [old $ORIGIN]
//
// the cuda_compat directory (its selector) when given; the driver link
// for the files DriverLinkFor picks; runtime dependencies in executables
// only; the directories of the resolved dependencies in the order they
// were needed (DT_NEEDED, then .note.dlopen and dlopen names, then the
// inherited ones); appended entries; with PreserveOrigin, the old
// $ORIGIN entries. Duplicates are removed, the first wins; no entry is
// empty.
func Decide(f Facts, deps, inherited []Dep, c *Config) Decision {
	var d Decision
	var needsDriver bool
	d.Deps, d.NoteNames, needsDriver = classify(deps, c.Dlopen)
	// Then the names this file may dlopen for others: their directories,
	// after its own; no note entry (lint reads a file's note against its
	// own names).
	for _, dep := range inherited {
		if slices.ContainsFunc(d.Deps, func(o Dep) bool { return o.Name == dep.Name }) {
			continue
		}
		dep.Entry = ""
		d.Deps = append(d.Deps, dep)
		if dep.How == HowDriver {
			needsDriver = true
		}
	}
	entries, unnameable := c.runpath(f, needsDriver, d.Deps)
	d.RunPath = strings.Join(entries, ":")
	for _, u := range unnameable {
		if !slices.ContainsFunc(d.Problems, func(o error) bool { return o.Error() == u.err.Error() }) {
			d.Problems = append(d.Problems, u.err)
		}
	}
	for _, e := range entries {
		if slices.ContainsFunc(unnameable, func(u unnameableEntry) bool { return u.entry == e }) {
			continue
		}
		// The loader splits the path before anything else: an entry
		// given with a ':' (an appended one) is audited as the entries
		// the loader reads.
		for _, part := range strings.Split(e, ":") {
			if msg := c.Audit(part); msg != "" {
				d.Problems = append(d.Problems, fmt.Errorf("%w: RUNPATH entry %q %s", ErrAudit, part, msg))
			}
		}
	}
	d.AsRPath = d.RunPath != "" && c.ForceRPath
	if f.Interpreter != "" {
		d.Interpreter = c.Interpreter
	}
	return d
}

// Classify is what the dependencies of a file become as reported, with
// the names its note answers and whether it needs the driver link: a
// dlopen-string name found nowhere is unresolved, one found (or a
// library a dlopen prefix matched) under DlopenReport only found; under DlopenResolve one resolved to the store
// or the driver gets a note entry, as a .note.dlopen name does.
func Classify(deps []Dep, mode DlopenMode) []Dep {
	out, _, _ := classify(deps, mode)
	return out
}

func classify(deps []Dep, mode DlopenMode) (out []Dep, noteNames []string, needsDriver bool) {
	for _, dep := range deps {
		if dep.Source == SourceNeeded {
			noteNames = append(noteNames, dep.Name)
		}
	}
	for _, dep := range deps {
		if dep.Source == SourceStrings {
			switch {
			case dep.How == HowMissing:
				dep.How = HowUnresolved
			case mode == DlopenReport && dep.How == HowStore:
				dep.How = HowFound
			case mode == DlopenResolve && (dep.How == HowStore || dep.How == HowDriver):
				noteNames = append(noteNames, dep.Name)
			}
		}
		// A library a prefix matched gets no note entry: which name the
		// caller builds is not known, and the loader searches the RUNPATH
		// after a note without it.
		if dep.Source == SourcePrefix && mode == DlopenReport && dep.How == HowStore {
			dep.How = HowFound
		}
		// A .note.dlopen name gets its note entry as a DT_NEEDED does.
		if dep.Source == SourceDlopen && (dep.How == HowStore || dep.How == HowDriver) && !slices.Contains(noteNames, dep.Name) {
			noteNames = append(noteNames, dep.Name)
		}
		if dep.How == HowDriver && (dep.Source != SourceStrings || mode == DlopenResolve) {
			needsDriver = true
		}
		out = append(out, dep)
	}
	return out, noteNames, needsDriver
}

// runpath lists the RUNPATH entries of a file, in policy order, and sets
// the Entry of the deps it writes otherwise than as their directory. The
// cuda_compat directory and the driver link come first and are never made
// relative: they are not in the package's closure. unnameable are the
// directories no entry can name (ErrAudit): a ':' or a token the loader
// expands in the entry as it would be written (made relative, the part
// after $ORIGIN).
func (c *Config) runpath(f Facts, needsDriver bool, deps []Dep) (out []string, unnameable []unnameableEntry) {
	links := f.Links
	if links == nil {
		links = hostLinks{}
	}
	// named says, for entries made from a directory's path, whose
	// directory it is (the message's subject); "" for the others: the
	// appended ones (verbatim) and the old $ORIGIN ones (the file's own).
	var fixed, entries, named []string
	if c.DriverLinkFor == DriverLinkAll || c.DriverLinkFor == DriverLinkNeeded && needsDriver {
		if c.CudaCompat != "" && f.Machine != elf.EM_386 {
			fixed = append(fixed, c.CudaCompat)
		}
		if f.Machine == elf.EM_386 {
			fixed = append(fixed, c.DriverLink32)
		} else {
			fixed = append(fixed, c.DriverLink)
		}
	}
	for _, e := range fixed {
		if why := ldcache.Unnameable(e); why != "" {
			unnameable = append(unnameable, unnameableEntry{e, fmt.Errorf("%w: the driver directory %s cannot be a RUNPATH entry: %s", ErrAudit, e, why)})
		}
	}
	if f.Interpreter != "" {
		entries = append(entries, c.RuntimeDeps...)
		for _, e := range c.RuntimeDeps {
			named = append(named, "the runtime dependency "+e)
		}
	}
	for i, d := range deps {
		if d.How != HowStore && d.How != HowVersioned {
			continue
		}
		e, what := d.Dir, d.Name+" is in "+d.Dir+", which"
		if c.PreserveOrigin {
			if o := sameDirOrigin(links, f.Path, d.Dir, f.OldPath); o != "" {
				e, what = o, ""
			}
		}
		entries = append(entries, e)
		named = append(named, what)
		deps[i].Entry = e
	}
	entries = append(entries, c.AppendRunpaths...)
	if c.PreserveOrigin {
		// Every old $ORIGIN entry, also those no dependency needed (a
		// dlopen target), after the appended ones, as auto-patchelf does.
		for _, e := range f.OldPath {
			if isOrigin(e) {
				entries = append(entries, e)
			}
		}
	}
	if within := c.relativeWithin(f.Path, f.Root); within != "" {
		for i, e := range entries {
			entries[i] = relativeEntry(links, f.Path, e, within)
		}
		for i, d := range deps {
			if d.Entry != "" {
				deps[i].Entry = relativeEntry(links, f.Path, d.Entry, within)
			}
		}
	}
	for i, d := range deps {
		if d.Entry == d.Dir {
			deps[i].Entry = ""
		}
	}
	// Checked as written: a relative entry leaves out the part of the
	// path the file's directory shares, which $ORIGIN stands for.
	for i, what := range named {
		why := ldcache.Unnameable(ldcache.OriginRest(entries[i]))
		if what == "" || why == "" {
			continue
		}
		var err error
		if strings.HasSuffix(what, ", which") {
			err = fmt.Errorf("%w: %s no RUNPATH entry can name: %s", ErrAudit, what, why)
		} else {
			err = fmt.Errorf("%w: %s cannot be a RUNPATH entry: %s", ErrAudit, what, why)
		}
		unnameable = append(unnameable, unnameableEntry{entries[i], err})
	}
	return dedupe(append(fixed, entries...)), unnameable
}

// unnameableEntry is an entry made from a directory no entry can name,
// and the audit's error naming the directory.
type unnameableEntry struct {
	entry string
	err   error
}

// Audit says what is wrong with a RUNPATH entry, or "".
func (c *Config) Audit(e string) string {
	if strings.HasPrefix(e, "$ORIGIN") || strings.HasPrefix(e, "${ORIGIN}") {
		return ""
	}
	if !filepath.IsAbs(e) {
		return "is relative: the loader resolves it against the current directory"
	}
	for _, b := range c.BuildDirs {
		if b != "" && (e == b || strings.HasPrefix(e, strings.TrimSuffix(b, "/")+"/")) {
			return "points into the build directory " + b
		}
	}
	if IsStubDir(e) {
		return "is a stub directory: its libcuda would be loaded instead of the driver's"
	}
	return ""
}

// dedupe drops empty and repeated entries; the first of each wins.
func dedupe(entries []string) []string {
	seen := map[string]bool{}
	return slices.DeleteFunc(slices.Clone(entries), func(e string) bool {
		if e == "" || seen[e] {
			return true
		}
		seen[e] = true
		return false
	})
}

// hostLinks are the links of the host's file system.
type hostLinks struct{}

func (hostLinks) EvalSymlinks(p string) (string, error) { return filepath.EvalSymlinks(p) }

func (hostLinks) SameDir(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return true
	}
	sb, err := os.Stat(b)
	if err != nil {
		return true
	}
	return os.SameFile(sa, sb)
}
