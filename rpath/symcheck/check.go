package symcheck

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
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
	// CacheBytes bounds what is kept of the files read (references,
	// versions, summaries; the least recently used go first); 0 means
	// 16 MiB.
	CacheBytes int
	// Open opens a file to read (nil: elfedit.Open); a caller that reads
	// many files lends its buffers (elfedit.Buffers.Open).
	Open func(path string) (*elfedit.File, error)
	// OpenTables opens a file whose symbol tables are read whole, after
	// the Reader's open: by Read, for a summary made again for names
	// learned since, and for references read late (nil:
	// elfedit.OpenDynamic).
	OpenTables func(path string) (*elfedit.File, error)
	// Binding reads every file's binding tables in the Reader's open, not
	// only an executable's: for a check that binds every closure's
	// symbols, not only versions.
	Binding bool
}

// Checker binds symbols over closures, reading each file once however many
// closures it is part of. It is safe for concurrent use.
type Checker struct {
	opts    Options
	names   names
	scratch scratchPool
	mu      sync.Mutex
	files   map[fileID]*entry // by fileKey
	alias   map[string]fileID // path → fileKey
	memo    map[string][]int  // library and the set it reaches → references it leaves unresolved
	bytes   int               // kept by the entries read
	tick    uint64
	ids     uint32 // identities given to the objects read
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
	if opts.OpenTables == nil {
		opts.OpenTables = elfedit.OpenDynamic
	}
	return &Checker{opts: opts, files: map[fileID]*entry{}, alias: map[string]fileID{}, memo: map[string][]int{}}
}

// entry is the cache entry of path, made if new, marked as just used.
func (c *Checker) entry(path string) *entry {
	c.mu.Lock()
	key, ok := c.alias[path]
	c.mu.Unlock()
	if !ok {
		key = fileKey(path)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alias[path] = key
	e := c.files[key]
	if e == nil {
		e = &entry{}
		c.files[key] = e
	}
	c.tick++
	e.used = c.tick
	return e
}

// fileID is a file's identity (ldso.IdentityOf), or its path when it
// cannot be stat'ed.
type fileID struct {
	ldso.FileID
	path string
}

// fileKey is the file at path's identity: one file found under several
// paths (a library by its soname's link and by its own name) is read once.
func fileKey(path string) fileID {
	id, err := ldso.IdentityOf(path)
	if err != nil {
		return fileID{path: path}
	}
	return fileID{FileID: id}
}

func (c *Checker) read(path string, binding bool) (*object, error) {
	what := readVersions
	if binding {
		what = readRefs
	}
	return c.readWith(c.opts.Open, path, what)
}

func (c *Checker) readWith(open func(string) (*elfedit.File, error), path string, what reading) (*object, error) {
	e := c.entry(path)
	e.once.Do(func() {
		s := c.scratch.get()
		e.o, e.err = readObject(open, path, what, &c.names, s)
		c.scratch.put(s)
		c.account(e)
	})
	return e.o, e.err
}

// Reader returns an ldso.Reader that also reads, in the same open, what
// the version check needs of each file (and, of an executable, what binding
// needs; with Options.Binding, of every file, with its summary as Read
// makes it), for later checks of this Checker: give it to ldso.Resolve.
func (c *Checker) Reader() ldso.Reader {
	return ldso.ElfReaderOpen(c.opts.Open, func(path string, f *elfedit.File) {
		what := readVersions
		switch {
		case c.opts.Binding:
			// Every file is bound and most are looked in: the summary
			// too, while the tables are at hand.
			what = readSummary
		case f.Kind() == elfedit.KindExecutable:
			what = readRefs
		}
		c.readOpen(path, f, what)
	})
}

// readOpen reads what of the file at path through f, open, unless it was
// read already, and returns the entry.
func (c *Checker) readOpen(path string, f *elfedit.File, what reading) *entry {
	e := c.entry(path)
	e.once.Do(func() {
		s := c.scratch.get()
		e.o, e.err = newObject(f, what, &c.names, s)
		c.scratch.put(s)
		if e.err != nil {
			e.err = fmt.Errorf("%s: %w", path, e.err)
		} else {
			e.o.path = path
		}
		c.account(e)
	})
	return e
}

// account adds a newly read entry to the kept bytes.
func (c *Checker) account(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.size = 256
	if e.o != nil {
		c.ids++
		e.o.id = c.ids
		e.size = e.o.size()
	}
	c.bytes += e.size
	c.evict()
}

// evict drops the least recently used entries read until the kept tables
// fit the budget; a check holding one keeps it until it returns.
func (c *Checker) evict() {
	for c.bytes > c.opts.CacheBytes {
		var old fileID
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

// scopeKey names l and the set of objects its closure holds, by the
// objects' identities in this Checker (an object read again is another).
func scopeKey(l *loadedObj, own []*loadedObj) string {
	ids := make([]uint32, 0, len(own))
	for _, d := range own {
		if d.o != nil {
			ids = append(ids, d.o.id)
		}
	}
	slices.Sort(ids)
	b := make([]byte, 0, 4*(len(ids)+1))
	b = binary.LittleEndian.AppendUint32(b, l.o.id)
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return string(b)
}

// loadedObj is an object of the load order with its tables.
type loadedObj struct {
	Object
	o *object // nil when opaque or unreadable
}

// named says the object was loaded as name (or is the file at that path).
func (l *loadedObj) named(name string) bool {
	return name == l.Path || slices.Contains(l.Names, name)
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

// Read reads what a check reads of the file at path, unless it was read
// already: a file its caller has read and judged (an output, as decided),
// opened with Options.OpenTables. The names its references use are known
// from then on, and its summary of its definitions is made from the same
// tables, for the names known then: a caller that reads every file it will
// check first opens few of them again (summaryOf).
func (c *Checker) Read(path string) error {
	_, err := c.readWith(c.opts.OpenTables, path, readSummary)
	return err
}

// ReadFile is Read of the file at path through f, which its caller has
// open and closes: a caller that opens every output to decide it reads
// their tables in that open, not in one of their own.
func (c *Checker) ReadFile(path string, f *elfedit.File) error {
	return c.readOpen(path, f, readSummary).err
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
			if name != "" && !l.named(name) {
				l.Names = append(l.Names, name)
			}
			return l
		}
		l := &loadedObj{Object: Object{Path: path}}
		if name != "" {
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
			if l.named(name) {
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
		var p *loadedObj
		for i, v := range l.o.needs {
			if i == 0 || v.file != l.o.needs[i-1].file {
				p = named(v.file)
			}
			vn := VersionNeed{Object: l.Path, File: v.file, Version: v.name, Weak: v.weak}
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
						break
					}
				}
			}
			if !onlyProblems || vn.Status == FailsAtLoad || vn.Status == Unchecked {
				out = append(out, vn)
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
		if err := l.o.loadBinding(c.opts.OpenTables, &c.names, &c.scratch); err != nil {
			return nil, err
		}
		c.resized(l.o)
	}
	if !c.opts.OnlyProblems {
		var out []Binding
		for _, l := range order {
			if l.o != nil {
				bs, err := c.bind(l, order, missing, nil)
				if err != nil {
					return nil, err
				}
				out = append(out, bs...)
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
			bs, err := c.bind(l, order, missing, nil)
			if err != nil {
				return nil, err
			}
			out = append(out, bs...)
			continue
		}
		own := reach[i]
		key := scopeKey(l, own)
		c.mu.Lock()
		idx, ok := c.memo[key]
		c.mu.Unlock()
		if !ok {
			var err error
			if idx, err = c.unresolvedOwn(l, own); err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.memo[key] = idx
			c.mu.Unlock()
		}
		if len(idx) > 0 {
			bs, err := c.bind(l, order, missing, idx)
			if err != nil {
				return nil, err
			}
			out = append(out, bs...)
		}
	}
	return out, nil
}

// reachable gives, for each object of order (by position), the objects
// its DT_NEEDED entries reach in tree (itself first), in load order.
func reachable(tree *ldso.Tree, order []*loadedObj) [][]*loadedObj {
	pos := make(map[string]int, len(order))
	for i, l := range order {
		pos[l.Path] = i
	}
	edges := make([][]int, len(order))
	for _, n := range tree.Needs {
		from, ok1 := pos[n.Requester]
		to, ok2 := pos[n.Path]
		if n.Requester == tree.Path {
			from, ok1 = 0, true
		}
		if ok1 && ok2 && from != to {
			edges[from] = append(edges[from], to)
		}
	}
	out := make([][]*loadedObj, len(order))
	seen := make([]bool, len(order))
	var list []int
	for i := range order {
		clear(seen)
		seen[i] = true
		list = append(list[:0], i)
		for k := 0; k < len(list); k++ {
			for _, t := range edges[list[k]] {
				if !seen[t] {
					seen[t] = true
					list = append(list, t)
				}
			}
		}
		slices.Sort(list[1:])
		r := make([]*loadedObj, len(list))
		for k, j := range list {
			r[k] = order[j]
		}
		out[i] = r
	}
	return out
}

// unresolvedOwn lists the references of l that no object of own (l's
// closure) defines, and those whose outcome may depend on the rest of the
// scope: copy relocations, and versioned references to a file without
// symbol versions (the loader's assertion depends on the order).
func (c *Checker) unresolvedOwn(l *loadedObj, own []*loadedObj) ([]int, error) {
	var out []int
	for i, r := range l.o.refs {
		if r.kind&refCopy != 0 {
			out = append(out, i)
			continue
		}
		q := l.o.query(r, &c.names)
		found, order := false, false
		for _, d := range own {
			if d.o == nil {
				continue
			}
			if q.ver != nil && !d.o.hasVersym && d.named(q.ver.file) {
				order = true
				break
			}
			if !d.o.mayHave(q.n) {
				continue
			}
			// Not named: an object named without versions ended the walk.
			_, ok, _, err := c.find(d.o, q, false)
			if err != nil {
				return nil, err
			}
			if ok {
				found = true
				break
			}
		}
		if order || !found {
			out = append(out, i)
		}
	}
	return out, nil
}

// bind resolves the references of l's relocations (those of idx, or all
// when idx is nil) over the global scope.
func (c *Checker) bind(l *loadedObj, order []*loadedObj, incomplete bool, idx []int) ([]Binding, error) {
	o := l.o
	var out []Binding
	refs := o.refs
	if idx != nil {
		refs = make([]ref, len(idx))
		for k, i := range idx {
			refs[k] = o.refs[i]
		}
	}
	scope := order
	if o.symbolic {
		scope = append([]*loadedObj{l}, order...)
	}
	for _, r := range refs {
		q := o.query(r, &c.names)
		use := "function"
		switch {
		case r.kind&refCopy != 0:
			use = "copy"
		case r.kind&refData != 0:
			use = "data"
		}
		var provider *loadedObj
		var def cand
		asserted := false
		for _, d := range scope {
			if d.o == nil || (r.kind&refCopy != 0 && d.o == order[0].o) || !d.o.mayHave(q.n) {
				continue
			}
			// named matters only in an object without symbol versions.
			found, ok, a, err := c.find(d.o, q, q.ver != nil && !d.o.hasVersym && d.named(q.ver.file))
			if err != nil {
				return nil, err
			}
			if a {
				asserted = true
				break
			}
			if ok {
				provider, def = d, found
				break
			}
		}
		// Since glibc 2.30 (BZ 24741) the file a version need names does
		// not restrict where the symbol is found.
		var status Status
		switch {
		case provider != nil:
			status = Bound
		case asserted:
			status = c.failure(l, use)
		case r.weak():
			status = WeakUnbound
		case incomplete:
			status = Unchecked
		default:
			status = c.failure(l, use)
		}
		if c.opts.OnlyProblems && (status == Bound || status == WeakUnbound) {
			continue // most references: no record made
		}
		b := Binding{Object: l.Path, Name: q.n.s, Weak: r.weak(), Use: use, Status: status}
		if q.ver != nil {
			b.Version, b.File = q.ver.name, q.ver.file
		}
		switch {
		case provider != nil:
			b.Provider = provider.Path
			if provider.o.hasVersym {
				if v := provider.o.versionAt(def.vi & 0x7fff); v.hash != 0 {
					b.ProviderVersion = v.name
				}
			}
		case asserted:
			b.Message = fmt.Sprintf("Inconsistency detected by ld.so: check_match: %s has no symbol versions (version %s required)", q.ver.file, q.ver.name)
		case status.Failing():
			b.Message = "undefined symbol: " + q.n.s
			if q.ver != nil {
				b.Message += ", version " + q.ver.name
			}
		}
		out = append(out, b)
	}
	return out, nil
}

func (c *Checker) failure(l *loadedObj, use string) Status {
	if use == "function" && !c.opts.BindNow && !l.o.bindNow {
		return FailsWhenCalled
	}
	return FailsAtLoad
}

// find looks q up in o, through o's summary. Its callers test mayHave
// first, in their loops (summaryOf answers none past it anyway).
func (c *Checker) find(o *object, q query, named bool) (def cand, ok, assert bool, err error) {
	s, err := c.summaryOf(o, q.n)
	if err != nil {
		return cand{}, false, false, err
	}
	def, ok, assert = o.find(s, q, named)
	return def, ok, assert, nil
}

// summaryOf is a summary of o that answers for n. Unless Read made it, it
// is made at the first lookup in o that its Bloom filter passes (a file
// only searched is never read again), and made again when one asks a name
// interned since.
func (c *Checker) summaryOf(o *object, n *symName) (*summary, error) {
	if s := o.sum.Load(); s != nil && n.id < s.covered {
		return s, nil
	}
	if !o.hasSymtab {
		return all, nil
	}
	if !o.mayDefine(n) {
		return none, nil
	}
	return c.makeSummary(o, n)
}

// makeSummary makes o's summary for the names interned now, unless another
// job just made one that answers for n. Apart from summaryOf, whose
// answer is most often at hand: the defers here would cost each of its
// calls.
func (c *Checker) makeSummary(o *object, n *symName) (*summary, error) {
	o.sumMu.Lock()
	defer o.sumMu.Unlock()
	if s := o.sum.Load(); s != nil && n.id < s.covered {
		return s, nil
	}
	sc := c.scratch.get()
	defer c.scratch.put(sc)
	// The string table is read with the others, or a name at a time.
	f, err := c.opts.OpenTables(o.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := o.readTables(f, sc, 0, maxKept, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.path, err)
	}
	s := t.summarize(&c.names)
	if err := t.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", o.path, err)
	}
	o.sum.Store(s)
	c.resized(o)
	return s, nil
}

// resized accounts for what o keeps now, if it is still in the cache.
func (c *Checker) resized(o *object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.files[c.alias[o.path]]; e != nil && e.o == o && e.size != o.size() {
		c.bytes += o.size() - e.size
		e.size = o.size()
		c.evict()
	}
}
