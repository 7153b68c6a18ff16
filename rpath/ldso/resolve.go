package ldso

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// Object is what the search needs to know about one ELF file.
type Object struct {
	Class   elf.Class
	Machine elf.Machine
	OSABI   elf.OSABI
	Needed  []string
	// Soname is DT_SONAME, "" if absent. ld.so treats a DT_NEEDED equal to
	// a loaded object's SONAME as already loaded.
	Soname     string
	RPath      string // raw DT_RPATH value, "" if absent
	HasRPath   bool
	RunPath    string // raw DT_RUNPATH value
	HasRunPath bool
	Interp     string // PT_INTERP, "" if none
	Flags1     uint64 // DT_FLAGS_1 (DF_1_NODEFLIB matters)
	// Note is the resolution-cache note (.note.nixos.ldcache), nil when
	// the object has none.
	Note *Note
	// Dlopen are names the object may pass to dlopen, as the Reader
	// finds them; Resolve opens each as dlopen called from the object
	// would, once every DT_NEEDED is loaded.
	Dlopen []string
}

// Reader reads an Object from a file path (already joined with Root where
// relevant). A missing file must give an error matching fs.ErrNotExist.
type Reader func(path string) (*Object, error)

// Step names the part of the search that found a library.
type Step string

// Search steps, in ld.so's order.
const (
	// StepLoaded: the name matched an object already loaded (by DT_NEEDED
	// string, path or DT_SONAME); nothing was searched.
	StepLoaded Step = "loaded"
	// StepInterp: the name is the program interpreter's, which ld.so
	// counts as loaded from the start.
	StepInterp        Step = "interpreter"
	StepAbsolute      Step = "absolute"
	StepRPath         Step = "rpath"
	StepLDLibraryPath Step = "LD_LIBRARY_PATH"
	// StepNote: the requester's resolution-cache note (LoaderNixOS only).
	StepNote    Step = "ldcache"
	StepRunPath Step = "runpath"
	StepCache   Step = "ld.so.cache"
	StepDefault Step = "default"
)

// Result of one candidate file.
const (
	ResultFound        = "found"
	ResultMissing      = "missing"
	ResultWrongClass   = "wrong ELF class"
	ResultWrongMachine = "wrong machine"
	ResultNoDefLib     = "skipped: DF_1_NODEFLIB"
	ResultError        = "error"
)

// Attempt is one candidate file ld.so would try.
type Attempt struct {
	Step Step `json:"step"`
	// Owner is the object whose DT_RPATH, DT_RUNPATH or note held Dir.
	Owner string `json:"owner,omitempty"`
	// Element is, for StepNote, the note's element as written: "=FILE"
	// or "?DIR".
	Element string `json:"element,omitempty"`
	// Dir is the search directory, as expanded ("" for the cache).
	Dir string `json:"dir,omitempty"`
	// Path is the candidate file: Dir, a hwcaps subdirectory, the name.
	Path   string `json:"path"`
	Result string `json:"result"`
}

// Need is one DT_NEEDED entry of one loaded object, and its outcome.
type Need struct {
	Name string `json:"name"`
	// Requester is the path of the object whose DT_NEEDED lists Name.
	Requester string `json:"requester"`
	// Depth is 1 for the executable's own entries.
	Depth int `json:"depth"`
	// Path is the file as ld.so names it (search directory + name, not
	// symlink-resolved); "" when not found.
	Path string `json:"path,omitempty"`
	Step Step   `json:"step,omitempty"`
	// RPathOwner is, for StepRPath, the object whose DT_RPATH matched.
	RPathOwner string `json:"rpath_owner,omitempty"`
	// AlreadyLoaded is true when the object was loaded earlier (under this
	// or another name): it is not loaded again and its needs are listed
	// where it was first loaded.
	AlreadyLoaded bool `json:"already_loaded,omitempty"`
	// Tried lists every candidate, in order, up to the one that matched.
	Tried []Attempt `json:"tried,omitempty"`
	// Note says why the requester's resolution-cache note did not find
	// the library (NoteNoEntry…); empty when it did, when the requester
	// has no note, or when the note was not consulted.
	Note string `json:"note,omitempty"`
	// Hint is, for a name not found, a directory the requester's search
	// path seems meant to name that holds it, and why the loader reads
	// the path otherwise (a ':' splits it, a token in it is expanded).
	Hint string `json:"hint,omitempty"`
	// Error is set when ld.so would stop with an error on a candidate (not
	// an ELF file, bad OS ABI…); ld.so makes that fatal.
	Error string `json:"error,omitempty"`
	// Dlopen says Name is not a DT_NEEDED entry but one of the
	// requester's Object.Dlopen names: what dlopen(Name) from the
	// requester would open. Not finding it is no load failure.
	Dlopen bool `json:"dlopen,omitempty"`
}

// Found reports whether the need resolved to a file.
func (n *Need) Found() bool { return n.Path != "" }

// Tree is the result of Resolve: every DT_NEEDED in load order.
type Tree struct {
	Path   string  `json:"path"`
	Interp string  `json:"interp,omitempty"`
	Needs  []*Need `json:"needs"`
}

// Missing returns the DT_NEEDED entries that resolved to nothing (a
// dlopen the program may never make is not one).
func (t *Tree) Missing() []*Need {
	var out []*Need
	for _, n := range t.Needs {
		if !n.Found() && !n.Dlopen {
			out = append(out, n)
		}
	}
	return out
}

// loaded is one object in the simulated link map.
type loaded struct {
	path   string   // l_name: the path it was opened as
	id     string   // canonical path, for the file identity check
	names  []string // l_libname: names it was requested as
	obj    *Object
	origin string  // $ORIGIN, "" if unknown
	loader *loaded // l_loader: whose DT_NEEDED loaded it
	exe    bool

	rpath, runpath *[]string // expanded lazily (cache_rpath)
	noteDead       bool      // the loader stopped trusting its note
}

type resolver struct {
	cfg      Config
	read     Reader
	fs       *fsys
	class    elf.Class
	mach     elf.Machine
	main     *loaded
	list     []*loaded
	interp   []string            // names matching the interpreter
	interpID string              // the interpreter's identity
	llp      []string            // expanded LD_LIBRARY_PATH; nil: none
	dirs     []string            // default directories, with trailing '/'
	subs     []string            // hwcaps subdirectories, with trailing '/', then ""
	live     map[string][]string // subsIn's answers, by directory
}

// Resolve simulates ld.so loading the executable at path (a logical path,
// inside cfg.Root) and returns every DT_NEEDED with the file it resolves
// to. Missing libraries are recorded in the tree; the error is only for an
// executable that cannot be read.
func Resolve(cfg Config, read Reader, exe string) (*Tree, error) {
	fsy, err := newFsys(cfg)
	if err != nil {
		return nil, err
	}
	hp, err := fsy.host(exe)
	if err != nil {
		return nil, err
	}
	obj, err := read(hp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	r := &resolver{cfg: cfg, read: read, fs: fsy, class: obj.Class, mach: obj.Machine}
	for _, d := range cfg.DefaultDirs {
		r.dirs = append(r.dirs, dirSlash(d))
	}
	for _, h := range cfg.Hwcaps {
		r.subs = append(r.subs, "glibc-hwcaps/"+h+"/")
	}
	if cfg.Loader == LoaderStock {
		for _, h := range cfg.LegacyHwcaps {
			r.subs = append(r.subs, dirSlash(h))
		}
	}
	r.subs = append(r.subs, "")

	// A running program's $ORIGIN comes from /proc/self/exe: the
	// executable's path with every link resolved.
	r.main = &loaded{path: exe, id: fsy.identity(exe), names: []string{exe}, obj: obj, origin: path.Dir(fsy.canonical(exe)), exe: true}
	if obj.Soname != "" {
		r.main.names = append(r.main.names, obj.Soname)
	}
	r.list = []*loaded{r.main}

	t := &Tree{Path: exe, Interp: obj.Interp}
	if obj.Interp != "" {
		r.interp = []string{obj.Interp}
		r.interpID = fsy.identity(obj.Interp)
		if hp, err := fsy.host(obj.Interp); err == nil {
			if io, err := read(hp); err == nil && io.Soname != "" {
				r.interp = append(r.interp, io.Soname)
			}
		}
	}
	if !cfg.Secure && cfg.LDLibraryPath != "" {
		r.llp = r.expandPath(r.main, cfg.LDLibraryPath, ":;")
	}

	// Every DT_NEEDED breadth first; then, object by object in load
	// order, its dlopen names, each followed by the DT_NEEDED of what it
	// loaded (as dlopen loads them).
	depth := map[*loaded]int{r.main: 0}
	for i, j := 0, 0; ; {
		var l *loaded
		var names []string
		dl := false
		switch {
		case i < len(r.list):
			l, names = r.list[i], r.list[i].obj.Needed
			i++
		case j < len(r.list):
			l, names, dl = r.list[j], r.list[j].obj.Dlopen, true
			j++
		default:
			return t, nil
		}
		for _, name := range names {
			n := &Need{Name: name, Requester: l.path, Depth: depth[l] + 1, Dlopen: dl}
			if nl := r.mapObject(l, n); nl != nil {
				depth[nl] = n.Depth
			}
			t.Needs = append(t.Needs, n)
		}
	}
}

// mapObject is _dl_map_object: it fills n and returns the newly loaded
// object, if any.
func (r *resolver) mapObject(loader *loaded, n *Need) *loaded {
	name := n.Name
	for _, l := range r.list {
		if l.path == name || containsStr(l.names, name) {
			n.Path, n.Step, n.AlreadyLoaded = l.path, StepLoaded, true
			return nil
		}
		if l.obj.Soname == name {
			l.names = append(l.names, name)
			n.Path, n.Step, n.AlreadyLoaded = l.path, StepLoaded, true
			return nil
		}
	}
	for _, in := range r.interp {
		if name == in {
			n.Path, n.Step, n.AlreadyLoaded = r.main.obj.Interp, StepInterp, true
			return nil
		}
	}

	var c *candidate
	if strings.Contains(name, "/") {
		if p, ok := r.expand(loader, name); ok {
			c = r.try(n, Attempt{Step: StepAbsolute, Dir: path.Dir(p), Path: p})
		}
	} else {
		c = r.search(loader, n)
		if c == nil && n.Error == "" && !r.cfg.Untraced {
			n.Hint = r.misreadHint(loader, name)
		}
	}
	if c == nil {
		return nil
	}
	n.Path = c.path
	// The file may already be loaded under another name (ld.so compares
	// st_dev and st_ino after opening it).
	id := r.fs.identity(c.path)
	if r.interpID != "" && id == r.interpID {
		n.Path, n.AlreadyLoaded = r.main.obj.Interp, true
		return nil
	}
	for _, l := range r.list {
		if l.id == id {
			l.names = append(l.names, name)
			n.Path, n.AlreadyLoaded = l.path, true
			return nil
		}
	}
	origin := dirOf(r.fs.abs(c.path))
	nl := &loaded{path: c.path, id: id, names: []string{name}, obj: c.obj, origin: origin, loader: loader}
	r.list = append(r.list, nl)
	return nl
}

// misreadHint says where name is in a directory the loader's search path
// seems meant to name and the loader reads otherwise, "" when it is in none.
func (r *resolver) misreadHint(loader *loaded, name string) string {
	lo := loader.obj
	value := lo.RPath
	if lo.HasRunPath {
		value = lo.RunPath
	}
	if !strings.ContainsAny(value, "$:") {
		return ""
	}
	stat := func(p string) os.FileInfo {
		if rest := ldcache.OriginRest(p); rest != p {
			p = loader.origin + rest
		}
		if !path.IsAbs(p) {
			return nil
		}
		hp, err := r.fs.host(p)
		if err != nil {
			return nil
		}
		fi, err := os.Stat(hp)
		if err != nil {
			return nil
		}
		return fi
	}
	for _, m := range ldcache.MisreadDirs(value, func(d string) bool { fi := stat(d); return fi != nil && fi.IsDir() }) {
		if fi := stat(m.Dir + "/" + name); fi != nil && fi.Mode().IsRegular() {
			return fmt.Sprintf("%s/%s exists, but no RUNPATH entry can name %s: %s", m.Dir, name, m.Dir, m.Why)
		}
	}
	return ""
}

type candidate struct {
	path string
	obj  *Object
}

// search runs the path search for a name without '/'.
func (r *resolver) search(loader *loaded, n *Need) *candidate {
	lo := loader.obj
	if !lo.HasRunPath {
		didMain := false
		for l := loader; l != nil; l = l.loader {
			dirs := r.rpathOf(l)
			if len(dirs) == 0 {
				continue
			}
			if c := r.openPath(n, StepRPath, l.path, dirs); c != nil || n.Error != "" {
				if c != nil {
					n.RPathOwner = l.path
				}
				return c
			}
			didMain = didMain || l == r.main
		}
		if !didMain {
			if dirs := r.rpathOf(r.main); len(dirs) > 0 {
				if c := r.openPath(n, StepRPath, r.main.path, dirs); c != nil || n.Error != "" {
					if c != nil {
						n.RPathOwner = r.main.path
					}
					return c
				}
			}
		}
	}
	if r.llp != nil {
		if c := r.openPath(n, StepLDLibraryPath, "", r.llp); c != nil || n.Error != "" {
			return c
		}
	}
	if c := r.searchNote(loader, n); c != nil || n.Error != "" {
		return c
	}
	if dirs := r.runpathOf(loader); len(dirs) > 0 {
		if c := r.openPath(n, StepRunPath, loader.path, dirs); c != nil || n.Error != "" {
			return c
		}
	}
	nodeflib := elf.DynFlag1(lo.Flags1)&elf.DF_1_NODEFLIB != 0
	if p, ok := r.cfg.Cache.LookupHwcaps(n.Name, r.class, r.mach, r.cfg.Hwcaps); ok {
		a := Attempt{Step: StepCache, Path: p}
		excluded := false
		if nodeflib {
			for _, d := range r.dirs {
				if strings.HasPrefix(p, d) {
					excluded = true
				}
			}
		}
		if excluded {
			a.Result = ResultNoDefLib
			r.trace(n, a)
		} else if c := r.try(n, a); c != nil || n.Error != "" {
			return c
		}
	}
	if !nodeflib {
		return r.openPath(n, StepDefault, "", r.dirs)
	}
	return nil
}

// openPath is open_path: every directory of dirs, each with the hwcaps
// subdirectories first.
func (r *resolver) openPath(n *Need, step Step, owner string, dirs []string) *candidate {
	return r.openPathAs(n, step, owner, "", dirs)
}

// openPathAs is openPath for the dirs of one note element.
func (r *resolver) openPathAs(n *Need, step Step, owner, elem string, dirs []string) *candidate {
	for _, d := range dirs {
		for _, sub := range r.subsIn(d) {
			a := Attempt{Step: step, Owner: owner, Element: elem, Dir: strings.TrimSuffix(d, "/"), Path: d + sub + n.Name}
			if d == "/" {
				a.Dir = "/"
			}
			if c := r.try(n, a); c != nil || n.Error != "" {
				if c != nil {
					n.Step = step
				}
				return c
			}
		}
	}
	return nil
}

// subsIn is r.subs less those below a first component that Config.NoDir
// says is no directory in d: every name tried there is missing, as ld.so
// finds (and then marks that directory nonexisting). On an AVX-512 Intel
// CPU a stock loader before glibc 2.37 tries 18 subdirectories of each
// directory, most of them absent. A traced resolution tries them all, to
// record each attempt.
func (r *resolver) subsIn(d string) []string {
	if !r.cfg.Untraced || r.cfg.NoDir == nil || len(r.subs) == 1 {
		return r.subs
	}
	if s, ok := r.live[d]; ok {
		return s
	}
	var out []string
	var firsts []string
	var gone []bool
	for _, sub := range r.subs {
		first, _, _ := strings.Cut(sub, "/")
		if sub != "" {
			k := slices.Index(firsts, first)
			if k < 0 {
				hp, err := r.fs.host(d + first)
				firsts, gone = append(firsts, first), append(gone, err == nil && r.cfg.NoDir(hp))
				k = len(firsts) - 1
			}
			if gone[k] {
				continue
			}
		}
		out = append(out, sub)
	}
	if r.live == nil {
		r.live = map[string][]string{}
	}
	r.live[d] = out
	return out
}

// try is open_verify on one candidate; it records the attempt.
func (r *resolver) try(n *Need, a Attempt) *candidate {
	defer func() { r.trace(n, a) }()
	hp, err := r.fs.host(a.Path)
	var obj *Object
	if err == nil {
		obj, err = r.read(hp)
	}
	switch {
	case err != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOTDIR)):
		a.Result = ResultMissing
		return nil
	case err != nil:
		a.Result = ResultError
		n.Error = fmt.Sprintf("%s: %v", a.Path, err)
		return nil
	case obj.Class != r.class:
		a.Result = ResultWrongClass
		return nil
	case obj.Machine != r.mach:
		a.Result = ResultWrongMachine
		return nil
	case obj.OSABI != elf.ELFOSABI_NONE && obj.OSABI != elf.ELFOSABI_LINUX:
		a.Result = ResultError
		n.Error = fmt.Sprintf("%s: ELF file OS ABI invalid (%v)", a.Path, obj.OSABI)
		return nil
	}
	a.Result = ResultFound
	n.Step = a.Step
	return &candidate{path: a.Path, obj: obj}
}

// trace records an attempt in n.Tried, unless the resolution is untraced.
func (r *resolver) trace(n *Need, a Attempt) {
	if !r.cfg.Untraced {
		n.Tried = append(n.Tried, a)
	}
}

// rpathOf returns l's expanded DT_RPATH; an object with DT_RUNPATH has none.
func (r *resolver) rpathOf(l *loaded) []string {
	if l.rpath == nil {
		var dirs []string
		if l.obj.HasRPath && !l.obj.HasRunPath {
			dirs = r.expandPath(l, l.obj.RPath, ":")
		}
		l.rpath = &dirs
	}
	return *l.rpath
}

func (r *resolver) runpathOf(l *loaded) []string {
	if l.runpath == nil {
		var dirs []string
		if l.obj.HasRunPath {
			dirs = r.expandPath(l, l.obj.RunPath, ":")
		}
		l.runpath = &dirs
	}
	return *l.runpath
}

// expandPath is fillin_rpath: split on sep, expand each element, drop those
// that expand to nothing, keep a literal empty element as "" (the current
// directory), end each directory with one '/', drop repeats.
func (r *resolver) expandPath(l *loaded, s, sep string) []string {
	out := []string{}
	for _, e := range splitAny(s, sep) {
		if e != "" {
			var ok bool
			if e, ok = r.expand(l, e); !ok || e == "" {
				continue
			}
			e = dirSlash(e)
		}
		if !containsStr(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// expand is _dl_dst_substitute for one path element: $ORIGIN, $PLATFORM
// and $LIB, bare or in braces. An element using a known token that has no
// value is dropped (ok false); an unknown token stays literal.
func (r *resolver) expand(l *loaded, s string) (string, bool) {
	if !strings.Contains(s, "$") {
		return s, true
	}
	var b strings.Builder
	usedOrigin := false
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		var repl string
		var n int
		switch {
		case ldcache.TokenLen(rest, "ORIGIN") > 0:
			n = ldcache.TokenLen(rest, "ORIGIN")
			// Secure mode allows $ORIGIN only at the start of the element.
			if r.cfg.Secure && (i != 0 || (len(rest) > n && rest[n] != '/')) {
				return "", false
			}
			repl, usedOrigin = l.origin, true
		case ldcache.TokenLen(rest, "PLATFORM") > 0:
			n, repl = ldcache.TokenLen(rest, "PLATFORM"), r.cfg.Platform
		case ldcache.TokenLen(rest, "LIB") > 0:
			n, repl = ldcache.TokenLen(rest, "LIB"), r.cfg.Lib
		default:
			b.WriteByte('$')
			continue
		}
		if repl == "" {
			return "", false
		}
		b.WriteString(repl)
		i += n
	}
	out := b.String()
	if usedOrigin && r.cfg.Secure && l.exe && !r.trusted(out) {
		return "", false
	}
	return out, true
}

// trusted is is_trusted_path_normalize: p, normalized, lies in a default
// directory.
func (r *resolver) trusted(p string) bool {
	if !path.IsAbs(p) {
		return false
	}
	p = dirSlash(path.Clean(p))
	for _, d := range r.dirs {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// dirOf is the directory part of p as _dl_new_object computes l_origin:
// everything before the last '/', not cleaned ("/" for "/x").
func dirOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// dirSlash strips trailing slashes and adds one ("/" stays "/").
func dirSlash(d string) string {
	d = strings.TrimRight(d, "/")
	return d + "/"
}

// splitAny splits s at every byte in sep, keeping empty fields (strsep).
func splitAny(s, sep string) []string {
	var out []string
	for {
		i := strings.IndexAny(s, sep)
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i+1:]
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
