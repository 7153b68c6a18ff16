package symcheck

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// object is what binding needs of one loaded file, read through the
// dynamic section only: its flags, symbol versions and the references its
// relocations make, kept; and, made at its first lookup, a summary of its
// definitions of the names references use (summary). The symbol, string
// and hash tables themselves are read into scratch buffers and not kept:
// kept, they would be most of what a check over a tree allocates, and
// under the job's heap limit the collections they cause would be most of
// its time.
type object struct {
	id      uint32 // its identity in the Checker (scopeKey)
	path    string
	class   elf.Class
	mach    elf.Machine
	order   endian
	dynamic bool
	// versions is glibc's l_versions: index → version, from DT_VERNEED
	// (vna_other) and the non-base DT_VERDEF entries (vd_ndx).
	// Its entries, and those of verdefs and needs, are interned
	// (names.version): most files need the same few versions of libc.
	versions  []*version // nil where no record sets the index
	verdefs   []*version // every DT_VERDEF entry, the base one included
	hasDefs   bool       // DT_VERDEF present
	hasSymtab bool       // DT_SYMTAB present
	hasVersym bool       // DT_VERSYM present, with DT_SYMTAB
	needs     []*version // every DT_VERNEED auxiliary entry, in file order
	refs      []ref      // the references binding looks up, in symbol order
	bindNow   bool
	symbolic  bool
	// filter is the .gnu.hash Bloom filter, folded; nil without one.
	filter *filter

	bindOnce sync.Once
	bound    bool // the references were read with the rest
	bindErr  error

	sumMu sync.Mutex
	sum   atomic.Pointer[summary]
}

type version struct {
	name   string
	hash   uint32
	hidden bool
	file   string // vn_file for a needed version
	weak   bool
}

// tables are an object's symbol, string, version-index and hash tables as
// read for one pass over them, in scratch buffers.
type tables struct {
	o       *object
	symbols []byte // DT_SYMTAB, nsyms entries
	symsz   int
	strs    *strTable
	versym  []byte // DT_VERSYM, 2 bytes a symbol; nil when absent
	gnu     *gnuHash
	sysv    *sysvHash
	lazy    *lazyTables // set: the tables are read an entry at a time
}

type gnuHash struct {
	symoffset uint32
	shift     uint32
	bloom     u64s
	buckets   u32s
	chain     u32s // from symoffset
}

type sysvHash struct {
	buckets u32s
	chain   u32s
}

// endian is a file's byte order as a value. binary.ByteOrder is an
// interface, a call through it for every word read; these methods are
// inlined, and a lookup reads a word of the hash table or the symbol
// table at each step.
type endian struct{ big bool }

func endianOf(o binary.ByteOrder) endian { return endian{big: o == binary.ByteOrder(binary.BigEndian)} }

func (e endian) Uint16(b []byte) uint16 {
	if e.big {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

func (e endian) Uint32(b []byte) uint32 {
	if e.big {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (e endian) Uint64(b []byte) uint64 {
	if e.big {
		return binary.BigEndian.Uint64(b)
	}
	return binary.LittleEndian.Uint64(b)
}

// u32s is a table of 32-bit words as the file has them, read where used.
type u32s struct {
	b     []byte
	order endian
}

func (w u32s) len() int        { return len(w.b) / 4 }
func (w u32s) at(i int) uint32 { return w.order.Uint32(w.b[4*i:]) }

// u64s is the Bloom filter's words: 64 or 32 bits as the class has them.
type u64s struct {
	b     []byte
	size  int // 8 or 4
	order endian
}

func (w u64s) len() int { return len(w.b) / w.size }
func (w u64s) at(i int) uint64 {
	if w.size == 8 {
		return w.order.Uint64(w.b[8*i:])
	}
	return uint64(w.order.Uint32(w.b[4*i:]))
}

// refKind is how an object's relocations use a symbol.
type refKind uint8

const (
	refFunc refKind = 1 << iota // a PLT slot (JUMP_SLOT in DT_JMPREL): bound when called, under lazy binding
	refData                     // any other relocation: bound at load
	refCopy                     // a copy relocation (data the executable copies)
	refWeak refKind = 1 << 7    // in a ref: the symbol is weak
)

// sym is one decoded dynamic symbol.
type sym struct {
	name  uint32
	info  uint8
	other uint8
	shndx uint16
	value uint64
}

func (s sym) bind() elf.SymBind { return elf.ST_BIND(s.info) }
func (s sym) typ() elf.SymType  { return elf.ST_TYPE(s.info) }
func (s sym) vis() elf.SymVis   { return elf.ST_VISIBILITY(s.other) }
func (t *tables) nsyms() int {
	if t.lazy != nil {
		return t.lazy.n
	}
	return len(t.symbols) / t.symsz
}

func (t *tables) sym(i int) sym {
	var b []byte
	if z := t.lazy; z != nil {
		if b = z.at(&z.syms, z.sym+uint64(i)*z.symsz, z.symsz, z.sym+uint64(z.n)*z.symsz, "DT_SYMTAB"); b == nil {
			return sym{}
		}
	} else {
		b = t.symbols[i*t.symsz:]
	}
	o := t.o
	if o.class == elf.ELFCLASS64 {
		return sym{name: o.order.Uint32(b), info: b[4], other: b[5], shndx: o.order.Uint16(b[6:]), value: o.order.Uint64(b[8:])}
	}
	return sym{name: o.order.Uint32(b), value: uint64(o.order.Uint32(b[4:])), info: b[12], other: b[13], shndx: o.order.Uint16(b[14:])}
}

// strBytes is the string at off of the string table, as its bytes: to its
// NUL, or to the table's end.
func (t *tables) strBytes(off uint32) []byte { return t.strs.bytes(uint64(off)) }

// strTable is a file's dynamic string table: read whole (the one elfedit
// read with the dynamic section, or into scratch), or a string at a time
// for a big one a pass needs a few strings of.
type strTable struct {
	b          []byte // the whole table; nil when read a string at a time
	f          *elfedit.File
	addr, size uint64
	win        window // of offsets into the table
	err        error  // the first read that failed (the file changed since it was checked)
}

// newStrTable is f's string table: elfedit's if it read it, else read
// into s's buffer, or a string at a time when larger than sparseOver (if
// not 0).
func newStrTable(f *elfedit.File, s *scratch, sparseOver uint64) (*strTable, error) {
	addr, ok1 := f.DynValue(elf.DT_STRTAB)
	size, ok2 := f.DynValue(elf.DT_STRSZ)
	if !ok1 || !ok2 {
		return &strTable{}, nil
	}
	if b := f.DynStrTab(); uint64(len(b)) == size {
		return &strTable{b: b}, nil
	}
	if sparseOver > 0 && size > sparseOver {
		if err := f.CheckMapped(addr, size, "DT_STRTAB"); err != nil {
			return nil, outOfBounds(err)
		}
		return &strTable{f: f, addr: addr, size: size}, nil
	}
	b, err := s.read(f, bufStr, addr, size, "DT_STRTAB")
	if err != nil {
		return nil, err
	}
	return &strTable{b: b}, nil
}

func (st *strTable) bytes(off uint64) []byte {
	if st.f == nil {
		if off >= uint64(len(st.b)) {
			return nil
		}
		b := st.b[off:]
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return b[:i]
		}
		return b
	}
	if off >= st.size {
		return nil
	}
	// Through a window: a pass in table order meets the names in about
	// the order the linker wrote them.
	if off >= st.win.start && off < st.win.end {
		b := st.win.buf[off-st.win.start:]
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return b[:i]
		}
		if st.win.end == st.size {
			return b
		}
	}
	for w := uint64(lazyWindow); ; w *= 4 {
		n := min(w, st.size-off)
		b, err := st.win.fill(st.f, st.addr, off, n, "DT_STRTAB")
		if err != nil {
			if st.err == nil {
				st.err = err
			}
			return nil
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return b[:i]
		}
		if off+n == st.size {
			return b
		}
	}
}

// cstr is the NUL-terminated string at off, "" when there is none (as
// elfedit's DynString reads one).
func (st *strTable) cstr(off uint32) string {
	b := st.bytes(uint64(off))
	if uint64(off)+uint64(len(b)) >= st.len() {
		return ""
	}
	return string(b)
}

func (st *strTable) len() uint64 {
	if st.f == nil {
		return uint64(len(st.b))
	}
	return st.size
}

// verIndex is the symbol's .gnu.version entry (hidden bit included); 1
// (global, unversioned) when the object has none.
func (t *tables) verIndex(i int) uint16 {
	if z := t.lazy; z != nil {
		if !z.hasVersym || i >= z.n {
			return 1
		}
		if b := z.at(&z.vers, z.versym+2*uint64(i), 2, z.versym+2*uint64(z.n), "DT_VERSYM"); b != nil {
			return t.o.order.Uint16(b)
		}
		return 1
	}
	if t.versym == nil || 2*i+2 > len(t.versym) {
		return 1
	}
	return t.o.order.Uint16(t.versym[2*i:])
}

func (o *object) versionAt(ndx uint16) version {
	if int(ndx) < len(o.versions) && o.versions[ndx] != nil {
		return *o.versions[ndx]
	}
	return version{}
}

// maxTable bounds one table read: a count taken from a hostile file ends in
// an error, not in a huge allocation (reads are also bounded by file size).
const maxTable = 1 << 30

// readObject reads what the version check needs of the ELF file at path,
// and with binding its references, in the same open; else loadBinding
// reads them when symbols are bound.
func readObject(open func(string) (*elfedit.File, error), path string, what reading, ns *names, s *scratch) (*object, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o, err := newObject(f, what, ns, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	o.path = path
	return o, nil
}

// loadBinding reads the references, once, from a file read before.
func (o *object) loadBinding(open func(string) (*elfedit.File, error), ns *names, sp *scratchPool) error {
	o.bindOnce.Do(func() {
		if o.bound {
			return
		}
		s := sp.get()
		defer sp.put(s)
		f, err := open(o.path)
		if err != nil {
			o.bindErr = err
			return
		}
		defer f.Close()
		st, err := newStrTable(f, s, maxKept)
		if err == nil {
			err = o.readBinding(f, ns, s, st, false)
		}
		if err != nil {
			o.bindErr = fmt.Errorf("%s: %w", o.path, err)
		}
	})
	return o.bindErr
}

// reading says what newObject reads of a file.
type reading uint8

const (
	readVersions reading = iota // the version records: the version check
	readRefs                    // and the references: binding too
	// and a summary of its definitions for the names interned so far,
	// made from the tables read for the references when they are read
	// whole (Checker.Read).
	readSummary
)

// newObject reads the dynamic section's flags and the version tables, and
// with readRefs and readSummary, what loadBinding reads.
func newObject(f *elfedit.File, what reading, ns *names, s *scratch) (*object, error) {
	o := &object{class: f.Header.Class, mach: f.Header.Machine, order: endianOf(f.ByteOrder())}
	if !f.IsDynamic() {
		o.bound = true
		return o, nil
	}
	o.dynamic = true
	dv := f.DynValue
	if v, ok := dv(elf.DT_FLAGS); ok && elf.DynFlag(v)&elf.DF_BIND_NOW != 0 {
		o.bindNow = true
	}
	if v, ok := dv(elf.DT_FLAGS); ok && elf.DynFlag(v)&elf.DF_SYMBOLIC != 0 {
		o.symbolic = true
	}
	if v, ok := dv(elf.DT_FLAGS_1); ok && elf.DynFlag1(v)&elf.DF_1_NOW != 0 {
		o.bindNow = true
	}
	if _, ok := dv(elf.DT_BIND_NOW); ok {
		o.bindNow = true
	}
	if _, ok := dv(elf.DT_SYMBOLIC); ok {
		o.symbolic = true
	}
	_, o.hasSymtab = dv(elf.DT_SYMTAB)
	_, versym := dv(elf.DT_VERSYM)
	o.hasVersym = versym && o.hasSymtab
	st, err := newStrTable(f, s, maxKept)
	if err != nil {
		return nil, err
	}
	if err := o.readVersions(f, ns, s, st); err != nil {
		return nil, err
	}
	if st.err != nil {
		return nil, st.err
	}
	if what >= readRefs {
		if err := o.readBinding(f, ns, s, st, what == readSummary); err != nil {
			return nil, err
		}
		o.bound = true
	}
	return o, nil
}

// readTables reads the symbol, string, version-index and hash tables into
// s's buffers. extra is the number of symbols to read at least (past the
// last the hash tables count: the ones relocations use). With sparseOver,
// a file with a symbol or string table larger has them read an entry at a
// time instead (sparse).
func (o *object) readTables(f *elfedit.File, s *scratch, extra, sparseOver uint64, st *strTable) (*tables, error) {
	t := &tables{o: o, symsz: 24}
	if o.class == elf.ELFCLASS32 {
		t.symsz = 16
	}
	dv := f.DynValue
	symtab, ok := dv(elf.DT_SYMTAB)
	if !ok {
		return t, nil
	}
	if err := t.readHashes(f, s); err != nil {
		return nil, err
	}
	n, err := t.countSymbols()
	if err != nil {
		return nil, err
	}
	// An executable that exports nothing has an empty .gnu.hash: the
	// symbols its relocations use are the ones that matter.
	n = max(n, extra)
	if n > maxTable/uint64(t.symsz) {
		return nil, fmt.Errorf("DT_SYMTAB: %d symbols", n)
	}
	if t.strs = st; st == nil {
		if t.strs, err = newStrTable(f, s, sparseOver); err != nil {
			return nil, err
		}
	}
	versym, hasVersym := dv(elf.DT_VERSYM)
	if sparseOver > 0 && n*uint64(t.symsz) > sparseOver {
		return t.sparse(f, symtab, n, versym, hasVersym)
	}
	if t.symbols, err = s.read(f, bufSym, symtab, n*uint64(t.symsz), "DT_SYMTAB"); err != nil {
		return nil, err
	}
	if hasVersym {
		if t.versym, err = s.read(f, bufVersym, versym, 2*n, "DT_VERSYM"); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// sparse makes t read its symbol, string and version-index tables an
// entry at a time, for a summary of a file whose tables are larger than a
// scratch keeps: the summary reads the few percent of them that the hash
// table's chain values say may have a name looked up. The ranges are
// checked as a whole read would check them.
func (t *tables) sparse(f *elfedit.File, symtab, n, versym uint64, hasVersym bool) (*tables, error) {
	if err := f.CheckMapped(symtab, n*uint64(t.symsz), "DT_SYMTAB"); err != nil {
		return nil, outOfBounds(err)
	}
	if hasVersym {
		if err := f.CheckMapped(versym, 2*n, "DT_VERSYM"); err != nil {
			return nil, outOfBounds(err)
		}
	}
	t.lazy = &lazyTables{f: f, n: int(n), sym: symtab, symsz: uint64(t.symsz), versym: versym, hasVersym: hasVersym}
	return t, nil
}

// lazyTables reads a file's symbol and version-index tables a window at
// a time (tables.sparse): a pass over them in table order reads each byte
// once, through a buffer of lazyWindow bytes. A read that fails (the file
// changed since it was checked) reads as nothing, and is the pass's error.
type lazyTables struct {
	f           *elfedit.File
	n           int
	sym, versym uint64
	symsz       uint64
	hasVersym   bool
	syms, vers  window
	err         error
}

// lazyWindow is how much of a big table a pass reads at once.
const lazyWindow = 64 << 10

// window is the bytes of a table at [start, end), as last read.
type window struct {
	buf        []byte
	start, end uint64
}

// at is the n bytes at addr of the table that ends at limit, through w.
func (z *lazyTables) at(w *window, addr, n, limit uint64, what string) []byte {
	if addr >= w.start && addr+n <= w.end {
		return w.buf[addr-w.start : addr-w.start+n]
	}
	b, err := w.fill(z.f, 0, addr, min(max(n, lazyWindow), limit-addr), what)
	if err != nil {
		if z.err == nil {
			z.err = err
		}
		return nil
	}
	return b[:n]
}

// fill reads the n bytes at virtual address base+off into w, which then
// holds [off, off+n); on an error it holds nothing.
func (w *window) fill(f *elfedit.File, base, off, n uint64, what string) ([]byte, error) {
	b, err := f.ReadMappedInto(w.buf, base+off, n, what)
	if err != nil {
		*w = window{}
		return nil, outOfBounds(err)
	}
	*w = window{b, off, off + n}
	return b, nil
}

// readBinding reads the references relocations make, and checks that the
// tables a lookup reads can be read (a file whose tables cannot is an
// error of every check it is part of, not only of those that look in it);
// with summarize, makes the summary from the same tables.
func (o *object) readBinding(f *elfedit.File, ns *names, s *scratch, st *strTable, summarize bool) error {
	if _, ok := f.DynValue(elf.DT_SYMTAB); !ok {
		return nil
	}
	rs, err := o.readRelocs(f, s)
	if err != nil {
		return err
	}
	extra := uint64(0)
	if len(rs) > 0 {
		extra = uint64(rs[len(rs)-1].idx) + 1
	}
	t, err := o.readTables(f, s, extra, maxKept, st)
	if err != nil {
		return err
	}
	o.buildRefs(t, rs, ns, s)
	if err := t.err(); err != nil {
		return err
	}
	// A summary costs one pass over tables already read; a file whose
	// tables are read a window at a time (the largest libraries) waits
	// for its first lookup, when every output's names are known, not to
	// be read twice over.
	if summarize && o.hasSymtab && t.lazy == nil {
		sum := t.summarize(ns)
		if err := t.err(); err != nil {
			return err
		}
		o.sum.Store(sum)
	}
	if t.gnu != nil {
		o.filter = newFilter(t.gnu, wordLog(o.class))
	}
	return nil
}

// ref is one reference a relocation makes, ready to look up: 8 bytes and
// no pointer, since every file of a tree keeps its references for the
// whole check (hundreds of thousands over a system's libraries) and the
// collector would scan them.
type ref struct {
	id   uint32  // the name's (names.byID)
	vi   uint16  // its version need's index in versions; 0: unversioned
	kind refKind // with refWeak
}

// weak says the reference is weak (STB_WEAK).
func (r ref) weak() bool { return r.kind&refWeak != 0 }

// query is the lookup r of o asks for.
func (o *object) query(r ref, ns *names) query {
	q := query{n: ns.byID(r.id), plt: r.kind&(refData|refCopy) == 0}
	if r.vi != 0 {
		q.ver = o.versions[r.vi]
	}
	return q
}

// buildRefs turns the relocations' symbols into lookups once, however many
// closures the object is part of: references to local or hidden symbols,
// and to symbols the object defines (bar a copy relocation's), need none.
// Their names are interned in ns; they are built in s and kept in a slice
// of their own size (most relocations of a library are to its own symbols).
func (o *object) buildRefs(t *tables, rs []symRef, ns *names, sc *scratch) {
	refs, uses := sc.built[:0], sc.uses[:0]
	defer func() { sc.built, sc.uses = refs[:0], uses[:0] }()
	for _, r := range rs {
		if int(r.idx) >= t.nsyms() {
			break
		}
		s := t.sym(int(r.idx))
		if s.bind() == elf.STB_LOCAL || (s.shndx != uint16(elf.SHN_UNDEF) && r.kind&refCopy == 0) {
			continue
		}
		if v := s.vis(); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
			continue
		}
		uses = append(uses, refUse{s, r})
	}
	// The names, interned in the order of their offsets when the string
	// table is read a string at a time (each of its windows read once;
	// the symbols' order is the hash table's, not the string table's).
	sc.ids, sc.order = sized(sc.ids, len(uses)), sized(sc.order, len(uses))
	ids, order := sc.ids, sc.order
	for k := range order {
		order[k] = k
	}
	if t.strs.f != nil {
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(uses[a].s.name, uses[b].s.name) })
	}
	for _, k := range order {
		ids[k] = ns.intern(t.strBytes(uses[k].s.name)).id
	}
	for k, u := range uses {
		rf := ref{id: ids[k], kind: u.r.kind}
		if vi := t.verIndex(int(u.r.idx)) & 0x7fff; vi >= 2 && int(vi) < len(o.versions) && o.versions[vi] != nil && o.versions[vi].hash != 0 {
			rf.vi = vi
		}
		if u.s.bind() == elf.STB_WEAK {
			rf.kind |= refWeak
		}
		refs = append(refs, rf)
	}
	if len(refs) > 0 {
		o.refs = slices.Clone(refs)
	}
}

// refUse is a symbol a relocation uses, before its name is interned.
type refUse struct {
	s sym
	r symRef
}

// symRef is a symbol relocations use and how.
type symRef struct {
	idx  uint32
	kind refKind
}

// size is about how many bytes the object keeps, for the cache's budget.
func (o *object) size() int {
	n := 8*len(o.refs) + 8*(len(o.versions)+len(o.verdefs)+len(o.needs))
	if s := o.sum.Load(); s != nil {
		n += 12*len(s.cands) + 8*len(s.at)
	}
	if o.filter != nil {
		n += 8 * len(o.filter.words)
	}
	return n + 256
}

// countSymbols is the number of dynamic symbols: DT_HASH's nchain, or past
// the last chain of .gnu.hash (the loader needs no count; the tables give
// none other).
func (t *tables) countSymbols() (uint64, error) {
	if t.sysv != nil {
		return uint64(t.sysv.chain.len()), nil
	}
	if t.gnu == nil {
		return 0, fmt.Errorf("DT_SYMTAB without DT_GNU_HASH or DT_HASH")
	}
	last := uint32(0)
	for i := range t.gnu.buckets.len() {
		last = max(last, t.gnu.buckets.at(i))
	}
	if last < t.gnu.symoffset {
		return uint64(t.gnu.symoffset), nil
	}
	return uint64(t.gnu.symoffset) + uint64(t.gnu.chain.len()), nil
}

func (o *object) word(b []byte, i int) uint32 { return o.order.Uint32(b[4*i:]) }

func (t *tables) readHashes(f *elfedit.File, s *scratch) error {
	o := t.o
	if a, ok := f.DynValue(elf.DT_GNU_HASH); ok {
		h, err := s.read(f, bufHash, a, 16, "DT_GNU_HASH")
		if err != nil {
			return err
		}
		nb, symoff, nbloom, shift := o.word(h, 0), o.word(h, 1), o.word(h, 2), o.word(h, 3)
		ws := uint64(4)
		if o.class == elf.ELFCLASS64 {
			ws = 8
		}
		switch {
		case nbloom == 0:
			// The loader masks a word index with nbloom-1: any index.
			return outOfBounds(errors.New("DT_GNU_HASH: no Bloom filter words"))
		case nbloom&(nbloom-1) != 0:
			return fmt.Errorf("DT_GNU_HASH: %d Bloom filter words, not a power of two", nbloom)
		}
		size := f.MappedSize(a)
		head := 16 + ws*uint64(nbloom) + 4*uint64(nb)
		if head > size {
			return outOfBounds(fmt.Errorf("DT_GNU_HASH: %d buckets and %d Bloom words run past the end of its segment", nb, nbloom))
		}
		if head > maxTable {
			return fmt.Errorf("DT_GNU_HASH: %d buckets and %d Bloom words", nb, nbloom)
		}
		// The chains run to the end bit of the last bucket's chain: find
		// its end a window at a time, never past the segment, then read
		// the head and the chains in one.
		bk, err := s.read(f, bufHash, a+16+ws*uint64(nbloom), 4*uint64(nb), "DT_GNU_HASH")
		if err != nil {
			return err
		}
		last := uint32(0)
		for i := range int(nb) {
			b := o.word(bk, i)
			if b != 0 && b < symoff {
				// The loader reads chain entry b - symoffset: before
				// the chains, as far as symoffset reaches.
				return outOfBounds(fmt.Errorf("DT_GNU_HASH: bucket %d starts at symbol %d, below symoffset %d", i, b, symoff))
			}
			last = max(last, b)
		}
		chains := a + head
		n := uint64(0)
		if last >= symoff {
			room := (size - head) / 4
			start := uint64(last - symoff)
			for w := uint64(1024); n == 0; w *= 8 {
				if start >= room {
					return outOfBounds(fmt.Errorf("DT_GNU_HASH: chain %d runs past the end of its segment", start))
				}
				end := min(start+w, room)
				b, err := s.read(f, bufHash, chains+4*start, 4*(end-start), "DT_GNU_HASH chains")
				if err != nil {
					return err
				}
				for i := range end - start {
					if o.word(b, int(i))&1 != 0 {
						n = start + i + 1
						break
					}
				}
				if n == 0 && end == room {
					return outOfBounds(fmt.Errorf("DT_GNU_HASH: chain %d runs past the end of its segment", start))
				}
			}
		}
		all, err := s.read(f, bufHash, a, head+4*n, "DT_GNU_HASH")
		if err != nil {
			return err
		}
		t.gnu = &gnuHash{
			symoffset: symoff,
			shift:     shift,
			bloom:     u64s{all[16 : 16+ws*uint64(nbloom)], int(ws), o.order},
			buckets:   u32s{all[16+ws*uint64(nbloom) : head], o.order},
			chain:     u32s{all[head:], o.order},
		}
	}
	if a, ok := f.DynValue(elf.DT_HASH); ok {
		h, err := s.read(f, bufSysv, a, 8, "DT_HASH")
		if err != nil {
			return err
		}
		nb, nc := uint64(o.word(h, 0)), uint64(o.word(h, 1))
		if 8+4*(nb+nc) > f.MappedSize(a) {
			return outOfBounds(fmt.Errorf("DT_HASH: %d buckets and %d chains run past the end of its segment", nb, nc))
		}
		all, err := s.read(f, bufSysv, a, 8+4*(nb+nc), "DT_HASH")
		if err != nil {
			return err
		}
		t.sysv = &sysvHash{buckets: u32s{all[8 : 8+4*nb], o.order}, chain: u32s{all[8+4*nb:], o.order}}
	}
	return nil
}

// readVersions reads DT_VERNEED and DT_VERDEF into l_versions, as glibc's
// _dl_check_map_versions fills it.
func (o *object) readVersions(f *elfedit.File, ns *names, s *scratch, st *strTable) error {
	set := func(ndx uint16, v *version) {
		ndx &= 0x7fff
		for int(ndx) >= len(o.versions) {
			o.versions = append(o.versions, nil)
		}
		o.versions[ndx] = v
	}
	if a, ok := f.DynValue(elf.DT_VERNEED); ok {
		num, _ := f.DynValue(elf.DT_VERNEEDNUM)
		err := versionRecords(f, s, a, versionWindow(num, 16+2*16), "DT_VERNEED", func(b []byte) error {
			o.needs = nil
			visits := newVisits(f, 16)
			off := uint64(0)
			for range num {
				if off+16 > uint64(len(b)) {
					return errShort{fmt.Sprintf("entry at +0x%x", off)}
				}
				if err := visits.take(off); err != nil {
					return err
				}
				cnt, file, aux, next := o.order.Uint16(b[off+2:]), o.word(b[off+4:], 0), o.word(b[off+8:], 0), o.word(b[off+12:], 0)
				vnFile := ns.str(st.cstr(file))
				ao := off + uint64(aux)
				for range cnt {
					if ao+16 > uint64(len(b)) {
						return errShort{fmt.Sprintf("auxiliary entry at +0x%x", ao)}
					}
					if err := visits.take(ao); err != nil {
						return err
					}
					hash, flags, other, name, anext := o.word(b[ao:], 0), o.order.Uint16(b[ao+4:]), o.order.Uint16(b[ao+6:]), o.word(b[ao+8:], 0), o.word(b[ao+12:], 0)
					v := ns.version(version{name: st.cstr(name), hash: hash, hidden: other&0x8000 != 0, file: vnFile, weak: flags&verFlgWeak != 0})
					o.needs = append(o.needs, v)
					set(other, v)
					if anext == 0 {
						break
					}
					ao += uint64(anext)
				}
				if next == 0 {
					break
				}
				off += uint64(next)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if a, ok := f.DynValue(elf.DT_VERDEF); ok {
		o.hasDefs = true
		num, _ := f.DynValue(elf.DT_VERDEFNUM)
		return versionRecords(f, s, a, versionWindow(num, 20+2*8), "DT_VERDEF", func(b []byte) error {
			o.verdefs = nil
			visits := newVisits(f, 8)
			off := uint64(0)
			for range num {
				if off+20 > uint64(len(b)) {
					return errShort{fmt.Sprintf("entry at +0x%x", off)}
				}
				if err := visits.take(off); err != nil {
					return err
				}
				flags, ndx, hash, aux, next := o.order.Uint16(b[off+2:]), o.order.Uint16(b[off+4:]), o.word(b[off+8:], 0), o.word(b[off+8:], 1), o.word(b[off+8:], 2)
				if off+uint64(aux)+8 > uint64(len(b)) {
					return errShort{fmt.Sprintf("auxiliary entry of +0x%x", off)}
				}
				v := ns.version(version{name: st.cstr(o.word(b[off+uint64(aux):], 0)), hash: hash})
				o.verdefs = append(o.verdefs, v)
				if flags&verFlgBase == 0 {
					set(ndx, v)
				}
				if next == 0 {
					break
				}
				off += uint64(next)
			}
			return nil
		})
	}
	return nil
}

// visits is the budget of a walk over version records: records that do
// not overlap are 16 bytes at least (Elf_Verneed, Elf_Vernaux; 8 for
// Elf_Verdaux), so a walk of a well-formed file visits at most the file's
// size over that many; chains that overlap (each record's auxiliary chain
// running over the records after it) would cost time and memory
// quadratic in the file's size. The engine's walk has the same budget.
type visits struct{ left uint64 }

func newVisits(f *elfedit.File, recSize uint64) visits {
	return visits{uint64(max(f.Size(), 0)) / recSize}
}

// take charges one visit, of the record at +off.
func (v *visits) take(off uint64) error {
	if v.left == 0 {
		return fmt.Errorf("record at +0x%x: more version records than the file can hold (overlapping chains)", off)
	}
	v.left--
	return nil
}

// ErrOutOfBounds marks a file whose tables the loader would read out of
// their bounds: a table, or what its header makes the loader read, lies
// past the segment that maps it (or the file). The loader then crashes or
// binds from other bytes: the program does not load as checked. The
// errors that wrap it name the table; errors.Is finds it.
var ErrOutOfBounds = errors.New("a table the loader reads out of its bounds")

// boundsError is an error of a table read out of its bounds: it reads
// as err, and is ErrOutOfBounds too.
type boundsError struct{ err error }

func (e boundsError) Error() string   { return e.err.Error() }
func (e boundsError) Unwrap() []error { return []error{e.err, ErrOutOfBounds} }

// outOfBounds marks err as ErrOutOfBounds.
func outOfBounds(err error) error { return boundsError{err} }

// errShort is a version record that runs past the bytes read.
type errShort struct{ what string }

func (e errShort) Error() string { return e.what + " runs past its segment" }

// versionRecords reads the version records at a, a window first (they are
// small and together), the rest of their segment when the window is short,
// and parses them.
func versionRecords(f *elfedit.File, s *scratch, a, window uint64, what string, parse func([]byte) error) error {
	size := min(f.MappedSize(a), maxTable)
	for n := min(window, size); ; n = size {
		b, err := s.read(f, bufHash, a, n, what)
		if err != nil {
			return err
		}
		err = parse(b)
		if _, short := err.(errShort); !short || n == size {
			switch {
			case short:
				return outOfBounds(fmt.Errorf("%s: %w", what, err))
			case err != nil:
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
}

// versionWindow is how many bytes of version records to read for num
// entries: generous for the linkers' layouts (each entry followed by its
// auxiliary ones), bounded by the segment and maxTable at the caller.
func versionWindow(num uint64, per uint64) uint64 {
	return min(num, maxTable/1024)*per*8 + 4096
}

const (
	verFlgBase = 1
	verFlgWeak = 2
)

// readRelocs lists the symbols the relocations refer to and how, one
// entry a symbol, in index order.
func (o *object) readRelocs(f *elfedit.File, s *scratch) ([]symRef, error) {
	all := s.relocs[:0] // symbol index << 8 | kind
	defer func() { s.relocs = all[:0] }()
	copyT, slotT := relocTypes(o.mach)
	pltRela := true
	if v, ok := f.DynValue(elf.DT_PLTREL); ok {
		pltRela = elf.DynTag(v) == elf.DT_RELA
	}
	tables := []struct {
		addr, size, relative elf.DynTag
		rela, plt            bool
	}{
		{elf.DT_RELA, elf.DT_RELASZ, elf.DT_RELACOUNT, true, false},
		{elf.DT_REL, elf.DT_RELSZ, elf.DT_RELCOUNT, false, false},
		{elf.DT_JMPREL, elf.DT_PLTRELSZ, elf.DT_NULL, pltRela, true},
	}
	for _, t := range tables {
		a, ok1 := f.DynValue(t.addr)
		n, ok2 := f.DynValue(t.size)
		if !ok1 || !ok2 || n == 0 {
			continue
		}
		es := 8
		if o.class == elf.ELFCLASS64 {
			es = 16
		}
		if t.rela {
			es += es / 2
		}
		// The linkers put the relative relocations first and count them
		// (DT_RELACOUNT): they name no symbol, and are most of the table.
		if c, ok := f.DynValue(t.relative); ok && t.relative != elf.DT_NULL && c <= n/uint64(es) {
			a, n = a+c*uint64(es), n-c*uint64(es)
		}
		if n > maxTable {
			return nil, fmt.Errorf("%v: size 0x%x", t.addr, n)
		}
		if err := f.CheckMapped(a, n, t.addr.String()); err != nil {
			return nil, outOfBounds(err)
		}
		// A window at a time: the tables of a big library are MiBs.
		win := uint64(relocWindow / es * es)
		for at := uint64(0); at < n; at += win {
			b, err := s.read(f, bufReloc, a+at, min(win, n-at), t.addr.String())
			if err != nil {
				return nil, err
			}
			all = o.relocRefs(all, b, es, t.plt, copyT, slotT)
		}
	}
	return s.symRefs(all), nil
}

// symRefs merges the relocations' uses (symbol index << 8 | kind) into one
// entry a symbol, in index order, in s's storage. Most symbols are used by
// a relocation or two and the indices are dense: the kinds are gathered by
// index in one pass; sparse ones (an index far past the others, as only a
// hostile file has) are sorted.
func (s *scratch) symRefs(all []uint64) []symRef {
	out := s.refs[:0]
	defer func() { s.refs = out[:0] }()
	top := uint32(0)
	for _, v := range all {
		top = max(top, uint32(v>>8))
	}
	if len(all) > 0 && denseIndices(top, len(all)) {
		if cap(s.kinds) <= int(top) {
			s.kinds = make([]refKind, int(top)+1)
		}
		kinds := s.kinds[:int(top)+1]
		clear(kinds)
		for _, v := range all {
			kinds[v>>8] |= refKind(v)
		}
		for i, k := range kinds {
			if k != 0 {
				out = append(out, symRef{idx: uint32(i), kind: k})
			}
		}
		return out
	}
	slices.Sort(all)
	for _, v := range all {
		i, k := uint32(v>>8), refKind(v)
		if n := len(out); n > 0 && out[n-1].idx == i {
			out[n-1].kind |= k
			continue
		}
		out = append(out, symRef{idx: i, kind: k})
	}
	return out
}

// denseIndices says whether symbol indices up to top, used by uses
// relocations, are few enough to gather in an array indexed by symbol:
// at most eight entries a use, and a page's worth whatever the count.
func denseIndices(top uint32, uses int) bool {
	return uint64(top) < uint64(uses)*8+4096
}

// relocWindow is how much of a relocation table readRelocs reads at once.
const relocWindow = 256 << 10

// relocRefs appends the symbol each relocation of b uses, with its kind.
func (o *object) relocRefs(all []uint64, b []byte, es int, plt bool, copyT, slotT uint32) []uint64 {
	for i := 0; i+es <= len(b); i += es {
		var s, typ uint32
		if o.class == elf.ELFCLASS64 {
			info := o.order.Uint64(b[i+8:])
			s, typ = uint32(info>>32), uint32(info)
		} else {
			info := o.order.Uint32(b[i+4:])
			s, typ = info>>8, info&0xff
		}
		if s == 0 {
			continue
		}
		k := refData
		switch {
		case typ == copyT:
			k = refCopy
		case plt && (typ == slotT || slotT == 0):
			k = refFunc
		}
		all = append(all, uint64(s)<<8|uint64(k))
	}
	return all
}

// relocTypes gives the machine's copy and PLT-slot relocation types; 0, 0
// for a machine not known here, whose PLT relocations are taken as lazy.
func relocTypes(m elf.Machine) (copyT, slotT uint32) {
	switch m {
	case elf.EM_X86_64:
		return uint32(elf.R_X86_64_COPY), uint32(elf.R_X86_64_JMP_SLOT)
	case elf.EM_386:
		return uint32(elf.R_386_COPY), uint32(elf.R_386_JMP_SLOT)
	case elf.EM_AARCH64:
		return uint32(elf.R_AARCH64_COPY), uint32(elf.R_AARCH64_JUMP_SLOT)
	case elf.EM_ARM:
		return uint32(elf.R_ARM_COPY), uint32(elf.R_ARM_JUMP_SLOT)
	case elf.EM_PPC64, elf.EM_PPC:
		return uint32(elf.R_PPC64_COPY), uint32(elf.R_PPC64_JMP_SLOT)
	case elf.EM_RISCV:
		return uint32(elf.R_RISCV_COPY), uint32(elf.R_RISCV_JUMP_SLOT)
	case elf.EM_S390:
		return 9, 11
	}
	return 0, 0
}

// err is the first read of an entry at a time that failed.
func (t *tables) err() error {
	if t.lazy != nil && t.lazy.err != nil {
		return t.lazy.err
	}
	if t.strs != nil {
		return t.strs.err
	}
	return nil
}
