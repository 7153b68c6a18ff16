package symcheck

import (
	"debug/elf"
	"fmt"
	"sort"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// Status is the outcome of one symbol reference or version need.
type Status string

const (
	// Bound: a definition was found.
	Bound Status = "bound"
	// WeakUnbound: a weak reference (or a weak version need) nothing
	// defines; the loader leaves it zero, never an error.
	WeakUnbound Status = "weak"
	// NoVersionInfo: a version need of a library that defines no versions;
	// the loader accepts it (ldd says "no version information available").
	NoVersionInfo Status = "no-version-info"
	// Unchecked: the answer depends on a file not read: a library that is
	// missing, or one left opaque (the driver's, with no stand-in).
	Unchecked Status = "unchecked"
	// FailsAtLoad: the loader stops before the program runs (a missing
	// version, an unresolved data reference, or any unresolved reference
	// of an object bound now).
	FailsAtLoad Status = "fails-at-load"
	// FailsWhenCalled: an unresolved function under lazy binding: the
	// program runs until the first call.
	FailsWhenCalled Status = "fails-when-called"
)

// Failing reports statuses that are a loader error.
func (s Status) Failing() bool { return s == FailsAtLoad || s == FailsWhenCalled }

// Object is one loaded object, in load order.
type Object struct {
	Path string `json:"path"`
	// Names are the names it was requested as (DT_NEEDED strings).
	Names []string `json:"names,omitempty"`
	// Opaque: not read; StandIn, when set, was read in its place.
	Opaque  bool   `json:"opaque,omitempty"`
	StandIn string `json:"stand_in,omitempty"`
	BindNow bool   `json:"bind_now,omitempty"`
}

// VersionNeed is one .gnu.version_r entry of one object.
type VersionNeed struct {
	Object   string `json:"object"`
	File     string `json:"file"` // vn_file, a DT_NEEDED name
	Version  string `json:"version"`
	Weak     bool   `json:"weak,omitempty"`
	Provider string `json:"provider,omitempty"`
	Status   Status `json:"status"`
}

// Binding is one undefined dynamic symbol of one object a relocation uses.
type Binding struct {
	Object  string `json:"object"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Weak    bool   `json:"weak,omitempty"`
	// Use is "function" (PLT slots only), "data" or "copy".
	Use             string `json:"use"`
	Provider        string `json:"provider,omitempty"`
	ProviderVersion string `json:"provider_version,omitempty"`
	Status          Status `json:"status"`
	// Message is the loader's own words for a failure.
	Message string `json:"message,omitempty"`
}

// Result is the symbol check of one file's closure.
type Result struct {
	Path     string        `json:"path"`
	Objects  []Object      `json:"objects"`
	Versions []VersionNeed `json:"versions,omitempty"`
	Symbols  []Binding     `json:"symbols,omitempty"`
	// Incomplete names the needed libraries not found or not read: their
	// symbols are not known, so what they could define is Unchecked.
	Incomplete []string `json:"incomplete,omitempty"`
	// Unsupported is set when the machine's binding is not modelled
	// (MIPS's GOT); nothing was checked.
	Unsupported string `json:"unsupported,omitempty"`
}

// Failures returns the version needs and bindings that are loader errors.
func (r *Result) Failures() (vs []VersionNeed, bs []Binding) {
	for _, v := range r.Versions {
		if v.Status.Failing() {
			vs = append(vs, v)
		}
	}
	for _, b := range r.Symbols {
		if b.Status.Failing() {
			bs = append(bs, b)
		}
	}
	return vs, bs
}

// Options tune a Checker.
type Options struct {
	// BindNow binds every function at load, as LD_BIND_NOW (and ldd -r)
	// do.
	BindNow bool
	// Opaque reports needed names whose file is not read (the driver's
	// libraries, which come with the machine): what they could define is
	// Unchecked.
	Opaque func(name string) bool
	// StandIn gives, for an opaque name, a host file to read in its place
	// (a toolkit's link-time stub); "" leaves it opaque.
	StandIn func(name string) string
}

// Checker binds symbols over closures, reading each file once however many
// closures it is part of. It is safe for concurrent use.
type Checker struct {
	opts  Options
	mu    sync.Mutex
	files map[string]*entry
}

type entry struct {
	once sync.Once
	o    *object
	err  error
}

// New returns a Checker.
func New(opts Options) *Checker {
	return &Checker{opts: opts, files: map[string]*entry{}}
}

func (c *Checker) read(path string) (*object, error) {
	c.mu.Lock()
	e := c.files[path]
	if e == nil {
		e = &entry{}
		c.files[path] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.o, e.err = readObject(path) })
	return e.o, e.err
}

// loadedObj is an object of the load order with its tables.
type loadedObj struct {
	Object
	names map[string]bool
	o     *object // nil when opaque or unreadable
}

// Check binds every relocated undefined symbol of the closure tree
// describes (ldso.Resolve under cfg) as glibc's loader does, and checks
// every version need. The error is for a file of the closure that cannot
// be read.
func (c *Checker) Check(cfg ldso.Config, tree *ldso.Tree) (*Result, error) {
	res := &Result{Path: tree.Path}
	var order []*loadedObj
	byPath := map[string]*loadedObj{}
	add := func(path, name string) *loadedObj {
		if l := byPath[path]; l != nil {
			if name != "" && !l.names[name] {
				l.names[name] = true
				l.Names = append(l.Names, name)
			}
			return l
		}
		l := &loadedObj{Object: Object{Path: path}, names: map[string]bool{path: true}}
		if name != "" {
			l.names[name] = true
			l.Names = append(l.Names, name)
		}
		byPath[path] = l
		order = append(order, l)
		return l
	}
	add(tree.Path, "")
	missing := false
	for _, n := range tree.Needs {
		if !n.Found() {
			missing = true
			res.Incomplete = append(res.Incomplete, n.Name)
			continue
		}
		l := add(n.Path, n.Name)
		if c.opts.Opaque != nil && c.opts.Opaque(n.Name) {
			l.Opaque = true
		}
	}
	for i, l := range order {
		if l.Opaque {
			if c.opts.StandIn != nil {
				for _, nm := range l.Names {
					if s := c.opts.StandIn(nm); s != "" {
						l.StandIn = s
						break
					}
				}
			}
			if l.StandIn == "" {
				res.Incomplete = append(res.Incomplete, l.Path)
				missing = true
				continue
			}
		}
		hp := l.StandIn
		if hp == "" {
			var err error
			if hp, err = ldso.HostPath(cfg, l.Path); err != nil {
				return nil, fmt.Errorf("%s: %w", l.Path, err)
			}
		}
		o, err := c.read(hp)
		if err != nil {
			return nil, err
		}
		l.o = o
		l.BindNow = o.bindNow
		if i == 0 {
			if o.mach == elf.EM_MIPS {
				res.Unsupported = "MIPS binds through its GOT (DT_MIPS_GOTSYM), not modelled"
			}
		}
	}
	for _, l := range order {
		res.Objects = append(res.Objects, l.Object)
	}
	if res.Unsupported != "" {
		return res, nil
	}
	// A loaded object is also known by its DT_SONAME.
	named := func(name string) *loadedObj {
		for _, l := range order {
			if l.names[name] {
				return l
			}
		}
		return nil
	}
	for _, l := range order {
		if l.o == nil {
			continue
		}
		for _, n := range l.o.needs {
			p := named(n.file)
			for _, v := range n.vers {
				vn := VersionNeed{Object: l.Path, File: n.file, Version: v.name, Weak: v.weak}
				switch {
				case p == nil || p.o == nil:
					vn.Status = Unchecked
				case !p.o.hasDefs:
					vn.Provider, vn.Status = p.Path, NoVersionInfo
				default:
					vn.Provider = p.Path
					vn.Status = FailsAtLoad
					if v.weak {
						vn.Status = WeakUnbound
					}
					for _, d := range p.o.verdefs {
						if d.hash == v.hash && d.name == v.name {
							vn.Status = Bound
						}
					}
				}
				res.Versions = append(res.Versions, vn)
			}
		}
	}
	for _, l := range order {
		if l.o == nil {
			continue
		}
		res.Symbols = append(res.Symbols, c.bind(l, order, named, missing)...)
	}
	return res, nil
}

// bind resolves the references of l's relocations over the global scope.
func (c *Checker) bind(l *loadedObj, order []*loadedObj, named func(string) *loadedObj, incomplete bool) []Binding {
	o := l.o
	idx := make([]uint32, 0, len(o.refs))
	for i := range o.refs {
		if int(i) < o.nsyms() {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	var out []Binding
	for _, i := range idx {
		k := o.refs[i]
		s := o.sym(int(i))
		if s.bind() == elf.STB_LOCAL || (s.shndx != uint16(elf.SHN_UNDEF) && k&refCopy == 0) {
			continue
		}
		if v := s.vis(); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
			continue
		}
		name := o.str(s.name)
		var ver *version
		if vi := o.verIndex(int(i)) & 0x7fff; vi >= 2 {
			if v := o.versionAt(vi); v.hash != 0 {
				ver = &v
			}
		}
		b := Binding{Object: l.Path, Name: name, Weak: s.bind() == elf.STB_WEAK}
		if ver != nil {
			b.Version = ver.name
		}
		switch {
		case k&refCopy != 0:
			b.Use = "copy"
		case k&refData != 0:
			b.Use = "data"
		default:
			b.Use = "function"
		}
		q := newQuery(name, ver, b.Use == "function")
		scope := order
		if o.symbolic {
			scope = append([]*loadedObj{l}, order...)
		}
		asserted := false
		for _, d := range scope {
			if d.o == nil || (k&refCopy != 0 && d.o == order[0].o) {
				continue
			}
			j, a := d.o.find(q, ver != nil && d.names[ver.file])
			if a {
				asserted = true
				break
			}
			if j >= 0 {
				b.Provider = d.Path
				if d.o.versym != nil {
					if v := d.o.versionAt(d.o.verIndex(j) & 0x7fff); v.hash != 0 {
						b.ProviderVersion = v.name
					}
				}
				break
			}
		}
		// Since glibc 2.30 (BZ 24741) the file a version need names does
		// not restrict where the symbol is found.
		switch {
		case b.Provider != "":
			b.Status = Bound
		case asserted:
			b.Message = fmt.Sprintf("Inconsistency detected by ld.so: check_match: %s has no symbol versions (version %s required)", ver.file, ver.name)
			b.Status = c.failure(l, b.Use)
		case b.Weak:
			b.Status = WeakUnbound
		case incomplete:
			b.Status = Unchecked
		default:
			b.Message = "undefined symbol: " + name
			if ver != nil {
				b.Message += ", version " + ver.name
			}
			b.Status = c.failure(l, b.Use)
		}
		out = append(out, b)
	}
	return out
}

func (c *Checker) failure(l *loadedObj, use string) Status {
	if use == "function" && !c.opts.BindNow && !l.o.bindNow {
		return FailsWhenCalled
	}
	return FailsAtLoad
}
