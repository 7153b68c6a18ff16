package symcheck

import (
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
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
	// File is the file the version need of a versioned reference names
	// (vn_file).
	File string `json:"file,omitempty"`
	Weak bool   `json:"weak,omitempty"`
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
	// OnlyProblems leaves bound and weak unbound references out of the
	// result: what a check over a tree needs, at a fraction of the cost.
	OnlyProblems bool
	// CacheBytes bounds the tables kept between checks (the least recently
	// used go first); 0 means 16 MiB.
	CacheBytes int
	// Open opens a file to read (nil: elfedit.Open); a caller that reads
	// many files lends its buffers (elfedit.Buffers.Open).
	Open func(path string) (*elfedit.File, error)
	// Binding reads every file's binding tables in the Reader's open, not
	// only an executable's: for a check that binds every closure's
	// symbols, not only versions.
	Binding bool
}

// Checker binds symbols over closures, reading each file once however many
// closures it is part of. It is safe for concurrent use.
type Checker struct {
	opts  Options
	mu    sync.Mutex
	files map[string]*entry
	memo  map[string][]int // library and the set it reaches → references it leaves unresolved
	bytes int              // kept by the entries read
	tick  uint64
}

type entry struct {
	once sync.Once
	o    *object
	err  error
	size int // 0 until read
	used uint64
}

// New returns a Checker.
func New(opts Options) *Checker {
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 16 << 20
	}
	if opts.Open == nil {
		opts.Open = elfedit.Open
	}
	return &Checker{opts: opts, files: map[string]*entry{}, memo: map[string][]int{}}
}

// entry is the cache entry of path, made if new, marked as just used.
func (c *Checker) entry(path string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.files[path]
	if e == nil {
		e = &entry{}
		c.files[path] = e
	}
	c.tick++
	e.used = c.tick
	return e
}

func (c *Checker) read(path string, binding bool) (*object, error) {
	e := c.entry(path)
	e.once.Do(func() {
		e.o, e.err = readObject(c.opts.Open, path, binding)
		c.account(e)
	})
	return e.o, e.err
}

// Reader returns an ldso.Reader that also reads, in the same open, what
// the version check needs of each file (and, of an executable, what binding
// needs), for later checks of this Checker: give it to ldso.Resolve.
func (c *Checker) Reader() ldso.Reader {
	return ldso.ElfReaderOpen(c.opts.Open, func(path string, f *elfedit.File) {
		e := c.entry(path)
		e.once.Do(func() {
			e.o, e.err = newObject(f, c.opts.Binding || f.Kind() == elfedit.KindExecutable)
			if e.err != nil {
				e.err = fmt.Errorf("%s: %w", path, e.err)
			} else {
				e.o.path = path
			}
			c.account(e)
		})
	})
}

// account adds a newly read entry to the kept bytes.
func (c *Checker) account(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.size = 256
	if e.o != nil {
		e.size = e.o.size()
	}
	c.bytes += e.size
	c.evict()
}

// evict drops the least recently used entries read until the kept tables
// fit the budget; a check holding one keeps it until it returns.
func (c *Checker) evict() {
	for c.bytes > c.opts.CacheBytes {
		var old string
		var oe *entry
		for p, e := range c.files {
			if e.size > 0 && (oe == nil || e.used < oe.used) {
				old, oe = p, e
			}
		}
		if oe == nil || len(c.files) == 1 {
			return
		}
		delete(c.files, old)
		c.bytes -= oe.size
	}
}

// scopeKey names the set of objects in a scope.
func scopeKey(order []*loadedObj, incomplete bool) string {
	ps := make([]string, 0, len(order)+1)
	for _, l := range order {
		if l.o != nil {
			ps = append(ps, l.Path)
		}
	}
	slices.Sort(ps)
	if incomplete {
		ps = append(ps, "\x00incomplete")
	}
	sum := sha256.Sum256([]byte(strings.Join(ps, "\x00")))
	return string(sum[:])
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
	return c.check(cfg, tree, true)
}

// CheckVersions checks the version needs only, which reads no symbol,
// hash or relocation table.
func (c *Checker) CheckVersions(cfg ldso.Config, tree *ldso.Tree) (*Result, error) {
	return c.check(cfg, tree, false)
}

func (c *Checker) check(cfg ldso.Config, tree *ldso.Tree, symbols bool) (*Result, error) {
	res := &Result{Path: tree.Path}
	order, missing := c.loadOrder(tree, res)
	if err := c.readObjects(cfg, order, symbols, res, &missing); err != nil {
		return nil, err
	}
	for _, l := range order {
		res.Objects = append(res.Objects, l.Object)
	}
	if res.Unsupported != "" {
		return res, nil
	}
	res.Versions = checkVersions(order, c.opts.OnlyProblems)
	if !symbols {
		return res, nil
	}
	syms, err := c.bindAll(tree, order, missing)
	if err != nil {
		return nil, err
	}
	res.Symbols = syms
	return res, nil
}

// loadOrder lists the objects of tree in the loader's order: the file,
// then each needed name that loaded a new object (breadth first, as
// tree.Needs is). A name found nowhere makes the result incomplete, unless
// it is a driver library whose stand-in is checked in its place.
func (c *Checker) loadOrder(tree *ldso.Tree, res *Result) (order []*loadedObj, missing bool) {
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
	for _, n := range tree.Needs {
		if !n.Found() {
			// A driver library is found at run time only; its stand-in,
			// when there is one, is checked in its place.
			if c.opts.Opaque != nil && c.opts.Opaque(n.Name) && c.opts.StandIn != nil && c.opts.StandIn(n.Name) != "" {
				add(n.Name, n.Name).Opaque = true
				continue
			}
			missing = true
			res.Incomplete = append(res.Incomplete, n.Name)
			continue
		}
		l := add(n.Path, n.Name)
		if c.opts.Opaque != nil && c.opts.Opaque(n.Name) {
			l.Opaque = true
		}
	}
	return order, missing
}

// readObjects reads the tables of every object of order (a driver
// library's stand-in in its place; one without is not read, and makes
// the result incomplete).
func (c *Checker) readObjects(cfg ldso.Config, order []*loadedObj, symbols bool, res *Result, missing *bool) error {
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
				*missing = true
				continue
			}
		}
		hp := l.StandIn
		if hp == "" {
			var err error
			if hp, err = ldso.HostPath(cfg, l.Path); err != nil {
				return fmt.Errorf("%s: %w", l.Path, err)
			}
		}
		o, err := c.read(hp, symbols)
		if err != nil {
			return err
		}
		l.o = o
		l.BindNow = o.bindNow
		if i == 0 && o.mach == elf.EM_MIPS {
			res.Unsupported = "MIPS binds through its GOT (DT_MIPS_GOTSYM), not modelled"
		}
	}
	return nil
}

// checkVersions matches every version need of every object against the
// definitions of the loaded object its file name (or DT_SONAME) names;
// with onlyProblems, the needs that bind are left out.
func checkVersions(order []*loadedObj, onlyProblems bool) []VersionNeed {
	named := func(name string) *loadedObj {
		for _, l := range order {
			if l.names[name] {
				return l
			}
		}
		return nil
	}
	var out []VersionNeed
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
				if !onlyProblems || vn.Status == FailsAtLoad || vn.Status == Unchecked {
					out = append(out, vn)
				}
			}
		}
	}
	return out
}

// bindAll binds the references of every object of order, reading their
// binding tables first. With OnlyProblems, a library of the closure
// (not its first object) binds only the references its own closure does
// not define (unresolvedOwn): what binds among the objects a library
// reaches binds in every scope holding them.
func (c *Checker) bindAll(tree *ldso.Tree, order []*loadedObj, missing bool) ([]Binding, error) {
	for _, l := range order {
		if l.o == nil {
			continue
		}
		if err := l.o.loadBinding(c.opts.Open); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if e := c.files[l.o.path]; e != nil && e.o == l.o && e.size != l.o.size() {
			c.bytes += l.o.size() - e.size
			e.size = l.o.size()
			c.evict()
		}
		c.mu.Unlock()
	}
	if !c.opts.OnlyProblems {
		var out []Binding
		for _, l := range order {
			if l.o != nil {
				out = append(out, c.bind(l, order, missing, nil)...)
			}
		}
		return out, nil
	}
	reach := reachable(tree, order)
	var out []Binding
	for i, l := range order {
		if l.o == nil {
			continue
		}
		if i == 0 {
			out = append(out, c.bind(l, order, missing, nil)...)
			continue
		}
		own := reach[l]
		key := l.Path + "\x00" + scopeKey(own, false)
		c.mu.Lock()
		idx, ok := c.memo[key]
		c.mu.Unlock()
		if !ok {
			idx = c.unresolvedOwn(l, own)
			c.mu.Lock()
			c.memo[key] = idx
			c.mu.Unlock()
		}
		if len(idx) > 0 {
			out = append(out, c.bind(l, order, missing, idx)...)
		}
	}
	return out, nil
}

// reachable gives, for each object of order, the objects its DT_NEEDED
// entries reach in tree (itself first), in load order.
func reachable(tree *ldso.Tree, order []*loadedObj) map[*loadedObj][]*loadedObj {
	byPath := make(map[string]*loadedObj, len(order))
	pos := make(map[*loadedObj]int, len(order))
	for i, l := range order {
		byPath[l.Path] = l
		pos[l] = i
	}
	edges := map[*loadedObj][]*loadedObj{}
	for _, n := range tree.Needs {
		from, to := byPath[n.Requester], byPath[n.Path]
		if n.Requester == tree.Path {
			from = order[0]
		}
		if from != nil && to != nil && from != to {
			edges[from] = append(edges[from], to)
		}
	}
	out := make(map[*loadedObj][]*loadedObj, len(order))
	for _, l := range order {
		seen := map[*loadedObj]bool{l: true}
		list := []*loadedObj{l}
		for i := 0; i < len(list); i++ {
			for _, t := range edges[list[i]] {
				if !seen[t] {
					seen[t] = true
					list = append(list, t)
				}
			}
		}
		slices.SortFunc(list[1:], func(a, b *loadedObj) int { return pos[a] - pos[b] })
		out[l] = list
	}
	return out
}

// unresolvedOwn lists the references of l that no object of own (l's
// closure) defines, and those whose outcome may depend on the rest of the
// scope: copy relocations, and versioned references to a file without
// symbol versions (the loader's assertion depends on the order).
func (c *Checker) unresolvedOwn(l *loadedObj, own []*loadedObj) []int {
	var out []int
	for i, r := range l.o.refList {
		q := r.q
		if r.kind&refCopy != 0 {
			out = append(out, i)
			continue
		}
		found, order := false, false
		for _, d := range own {
			if d.o == nil {
				continue
			}
			named := q.ver != nil && d.names[q.ver.file]
			if named && d.o.versym == nil {
				order = true
				break
			}
			if j, _ := d.o.find(q, named); j >= 0 {
				found = true
				break
			}
		}
		if order || !found {
			out = append(out, i)
		}
	}
	return out
}

// bind resolves the references of l's relocations (those of idx, or all
// when idx is nil) over the global scope.
func (c *Checker) bind(l *loadedObj, order []*loadedObj, incomplete bool, idx []int) []Binding {
	o := l.o
	var out []Binding
	refs := o.refList
	if idx != nil {
		refs = make([]ref, len(idx))
		for k, i := range idx {
			refs[k] = o.refList[i]
		}
	}
	for _, r := range refs {
		q := r.q
		b := Binding{Object: l.Path, Name: q.name, Weak: r.weak}
		if q.ver != nil {
			b.Version, b.File = q.ver.name, q.ver.file
		}
		switch {
		case r.kind&refCopy != 0:
			b.Use = "copy"
		case r.kind&refData != 0:
			b.Use = "data"
		default:
			b.Use = "function"
		}
		scope := order
		if o.symbolic {
			scope = append([]*loadedObj{l}, order...)
		}
		asserted := false
		for _, d := range scope {
			if d.o == nil || (r.kind&refCopy != 0 && d.o == order[0].o) {
				continue
			}
			j, a := d.o.find(q, q.ver != nil && d.names[q.ver.file])
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
			b.Message = fmt.Sprintf("Inconsistency detected by ld.so: check_match: %s has no symbol versions (version %s required)", q.ver.file, q.ver.name)
			b.Status = c.failure(l, b.Use)
		case b.Weak:
			b.Status = WeakUnbound
		case incomplete:
			b.Status = Unchecked
		default:
			b.Message = "undefined symbol: " + q.name
			if q.ver != nil {
				b.Message += ", version " + q.ver.name
			}
			b.Status = c.failure(l, b.Use)
		}
		if c.opts.OnlyProblems && (b.Status == Bound || b.Status == WeakUnbound) {
			continue
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
