package symcheck

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// object is what binding needs of one loaded file: its dynamic symbol
// table, symbol versions, hash table and the references its relocations
// make, read through the dynamic section only.
type object struct {
	path    string
	class   elf.Class
	mach    elf.Machine
	order   binary.ByteOrder
	exe     bool
	symbols []byte // DT_SYMTAB, nsyms entries
	symsz   int
	strtab  []byte
	versym  []byte // DT_VERSYM, 2 bytes a symbol; nil when absent
	// versions is glibc's l_versions: index → version, from DT_VERNEED
	// (vna_other) and the non-base DT_VERDEF entries (vd_ndx).
	versions []version
	verdefs  []version // every DT_VERDEF entry, the base one included
	hasDefs  bool      // DT_VERDEF present
	needs    []verNeed
	gnu      *gnuHash
	sysv     *sysvHash
	refs     []symRef // the symbols relocations use, by index; nil once refList is built
	refList  []ref    // the references binding looks up, in symbol order
	bindNow  bool
	symbolic bool

	bindOnce sync.Once
	bound    bool // the binding tables were read with the rest
	bindErr  error
}

type version struct {
	name   string
	hash   uint32
	hidden bool
	file   string // vn_file for a needed version
	weak   bool
}

type verNeed struct {
	file string
	vers []version
}

type gnuHash struct {
	symoffset uint32
	shift     uint32
	bloom     []uint64
	buckets   u32s
	chain     u32s // from symoffset
}

type sysvHash struct {
	buckets u32s
	chain   u32s
}

// u32s is a table of 32-bit words as the file has them, read where used.
type u32s struct {
	b     []byte
	order binary.ByteOrder
}

func (w u32s) len() int        { return len(w.b) / 4 }
func (w u32s) at(i int) uint32 { return w.order.Uint32(w.b[4*i:]) }

// refKind is how an object's relocations use a symbol.
type refKind uint8

const (
	refFunc refKind = 1 << iota // a PLT slot (JUMP_SLOT in DT_JMPREL): bound when called, under lazy binding
	refData                     // any other relocation: bound at load
	refCopy                     // a copy relocation (data the executable copies)
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
func (o *object) nsyms() int    { return len(o.symbols) / o.symsz }
func (o *object) str(off uint32) string {
	if uint64(off) >= uint64(len(o.strtab)) {
		return ""
	}
	b := o.strtab[off:]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (o *object) sym(i int) sym {
	b := o.symbols[i*o.symsz:]
	if o.class == elf.ELFCLASS64 {
		return sym{name: o.order.Uint32(b), info: b[4], other: b[5], shndx: o.order.Uint16(b[6:]), value: o.order.Uint64(b[8:])}
	}
	return sym{name: o.order.Uint32(b), value: uint64(o.order.Uint32(b[4:])), info: b[12], other: b[13], shndx: o.order.Uint16(b[14:])}
}

// strBytes is the string at off of the string table, as its bytes.
func (o *object) strBytes(off uint32) []byte {
	if uint64(off) >= uint64(len(o.strtab)) {
		return nil
	}
	b := o.strtab[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// verIndex is the symbol's .gnu.version entry (hidden bit included); 1
// (global, unversioned) when the object has none.
func (o *object) verIndex(i int) uint16 {
	if o.versym == nil || 2*i+2 > len(o.versym) {
		return 1
	}
	return o.order.Uint16(o.versym[2*i:])
}

func (o *object) versionAt(ndx uint16) version {
	if int(ndx) < len(o.versions) {
		return o.versions[ndx]
	}
	return version{}
}

// dynStr is the string at off of f's DT_STRTAB, "" when there is none
// (elfedit read the table with the dynamic section).
func dynStr(f *elfedit.File, off uint32) string {
	s, _ := f.DynString(uint64(off))
	return s
}

// maxTable bounds one table read: a count taken from a hostile file ends in
// an error, not in a huge allocation (reads are also bounded by file size).
const maxTable = 1 << 30

// readObject reads what the version check needs of the ELF file at path,
// and with binding the rest, in the same open; else loadBinding reads the
// rest when symbols are bound.
func readObject(open func(string) (*elfedit.File, error), path string, binding bool) (*object, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o, err := newObject(f, binding)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	o.path = path
	return o, nil
}

// loadBinding reads the symbol, hash and relocation tables, once.
func (o *object) loadBinding(open func(string) (*elfedit.File, error)) error {
	o.bindOnce.Do(func() {
		if o.bound {
			return
		}
		f, err := open(o.path)
		if err != nil {
			o.bindErr = err
			return
		}
		defer f.Close()
		if err := o.readBinding(f); err != nil {
			o.bindErr = fmt.Errorf("%s: %w", o.path, err)
		}
	})
	return o.bindErr
}

// newObject reads the dynamic section's flags, the string table and the
// version tables; with binding, also what loadBinding reads.
func newObject(f *elfedit.File, binding bool) (*object, error) {
	o := &object{class: f.Header.Class, mach: f.Header.Machine, order: f.ByteOrder(), symsz: 24}
	if o.class == elf.ELFCLASS32 {
		o.symsz = 16
	}
	if !f.IsDynamic() {
		o.bound = true
		return o, nil
	}
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
	if err := o.readVersions(f); err != nil {
		return nil, err
	}
	if binding {
		if err := o.readBinding(f); err != nil {
			return nil, err
		}
		o.bound = true
	}
	return o, nil
}

func (o *object) readBinding(f *elfedit.File) error {
	dv := f.DynValue
	symtab, ok := dv(elf.DT_SYMTAB)
	if !ok {
		return nil
	}
	strtab, ok1 := dv(elf.DT_STRTAB)
	strsz, ok2 := dv(elf.DT_STRSZ)
	if ok1 && ok2 {
		b, err := f.ReadMapped(strtab, strsz, "DT_STRTAB")
		if err != nil {
			return err
		}
		o.strtab = b
	}
	if err := o.readHashes(f); err != nil {
		return err
	}
	if err := o.readRelocs(f); err != nil {
		return err
	}
	n, err := o.countSymbols()
	if err != nil {
		return err
	}
	// An executable that exports nothing has an empty .gnu.hash: the
	// symbols its relocations use are the ones that matter.
	if len(o.refs) > 0 {
		n = max(n, uint64(o.refs[len(o.refs)-1].idx)+1)
	}
	if n > maxTable/uint64(o.symsz) {
		return fmt.Errorf("DT_SYMTAB: %d symbols", n)
	}
	if o.symbols, err = f.ReadMapped(symtab, n*uint64(o.symsz), "DT_SYMTAB"); err != nil {
		return err
	}
	if a, ok := dv(elf.DT_VERSYM); ok {
		if o.versym, err = f.ReadMapped(a, 2*n, "DT_VERSYM"); err != nil {
			return err
		}
	}
	o.buildRefs()
	return nil
}

// ref is one reference a relocation makes, ready to look up.
type ref struct {
	q    *query
	weak bool
	kind refKind
}

// buildRefs turns the relocations' symbols into lookups once, however many
// closures the object is part of: references to local or hidden symbols,
// and to symbols the object defines (bar a copy relocation's), need none.
// The lookups share one allocation, and their names one string.
func (o *object) buildRefs() {
	var names []byte
	keep := o.refs[:0]
	for _, r := range o.refs {
		if int(r.idx) >= o.nsyms() {
			break
		}
		s := o.sym(int(r.idx))
		if s.bind() == elf.STB_LOCAL || (s.shndx != uint16(elf.SHN_UNDEF) && r.kind&refCopy == 0) {
			continue
		}
		if v := s.vis(); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
			continue
		}
		names = append(names, o.strBytes(s.name)...)
		r.end, r.weak = uint32(len(names)), s.bind() == elf.STB_WEAK
		keep = append(keep, r)
	}
	all := string(names)
	qs := make([]query, len(keep))
	o.refList = make([]ref, len(keep))
	start := uint32(0)
	for j, r := range keep {
		var ver *version
		if vi := o.verIndex(int(r.idx)) & 0x7fff; vi >= 2 && int(vi) < len(o.versions) && o.versions[vi].hash != 0 {
			ver = &o.versions[vi]
		}
		name := all[start:r.end]
		start = r.end
		qs[j] = query{name: name, gnu: elfedit.GNUHash(name), sysv: elfedit.SysVHash(name), ver: ver, plt: r.kind&(refData|refCopy) == 0}
		o.refList[j] = ref{q: &qs[j], weak: r.weak, kind: r.kind}
	}
	o.refs = nil
}

// symRef is a symbol relocations use and how.
type symRef struct {
	idx  uint32
	end  uint32 // in buildRefs: where its name ends in the names
	kind refKind
	weak bool // in buildRefs
}

// size is about how many bytes the object keeps, for the cache's budget.
func (o *object) size() int {
	n := len(o.symbols) + len(o.strtab) + len(o.versym) + 64*len(o.refList) + 48*(len(o.versions)+len(o.verdefs))
	if o.gnu != nil {
		n += 8*len(o.gnu.bloom) + len(o.gnu.buckets.b) + len(o.gnu.chain.b)
	}
	if o.sysv != nil {
		n += len(o.sysv.buckets.b) + len(o.sysv.chain.b)
	}
	return n + 256
}

// countSymbols is the number of dynamic symbols: DT_HASH's nchain, or past
// the last chain of .gnu.hash (the loader needs no count; the tables give
// none other).
func (o *object) countSymbols() (uint64, error) {
	if o.sysv != nil {
		return uint64(o.sysv.chain.len()), nil
	}
	if o.gnu == nil {
		return 0, fmt.Errorf("DT_SYMTAB without DT_GNU_HASH or DT_HASH")
	}
	last := uint32(0)
	for i := range o.gnu.buckets.len() {
		last = max(last, o.gnu.buckets.at(i))
	}
	if last < o.gnu.symoffset {
		return uint64(o.gnu.symoffset), nil
	}
	return uint64(o.gnu.symoffset) + uint64(o.gnu.chain.len()), nil
}

func (o *object) word(b []byte, i int) uint32 { return o.order.Uint32(b[4*i:]) }

func (o *object) readHashes(f *elfedit.File) error {
	if a, ok := f.DynValue(elf.DT_GNU_HASH); ok {
		h, err := f.ReadMapped(a, 16, "DT_GNU_HASH")
		if err != nil {
			return err
		}
		nb, symoff, nbloom, shift := o.word(h, 0), o.word(h, 1), o.word(h, 2), o.word(h, 3)
		ws := uint64(4)
		if o.class == elf.ELFCLASS64 {
			ws = 8
		}
		if nbloom == 0 || nbloom&(nbloom-1) != 0 {
			return fmt.Errorf("DT_GNU_HASH: %d Bloom filter words, not a power of two", nbloom)
		}
		size := f.MappedSize(a)
		head := 16 + ws*uint64(nbloom) + 4*uint64(nb)
		if head > size || head > maxTable {
			return fmt.Errorf("DT_GNU_HASH: %d buckets and %d Bloom words run past the end of its segment", nb, nbloom)
		}
		all, err := f.ReadMapped(a, head, "DT_GNU_HASH")
		if err != nil {
			return err
		}
		g := &gnuHash{symoffset: symoff, shift: shift, bloom: make([]uint64, nbloom)}
		for i := range g.bloom {
			if ws == 8 {
				g.bloom[i] = o.order.Uint64(all[16+8*i:])
			} else {
				g.bloom[i] = uint64(o.order.Uint32(all[16+4*i:]))
			}
		}
		bk := all[16+ws*uint64(nbloom):]
		last := uint32(0)
		g.buckets = u32s{bk[:4*uint64(nb)], o.order}
		for i := range g.buckets.len() {
			last = max(last, g.buckets.at(i))
		}
		// The chains run to the end bit of the last bucket's chain: read
		// up to it, a window at a time, never past the segment.
		chains := a + head
		n := uint64(0)
		if last >= symoff {
			room := (size - head) / 4
			start := uint64(last - symoff)
			for w := uint64(1024); n == 0; w *= 8 {
				if start >= room {
					return fmt.Errorf("DT_GNU_HASH: chain %d runs past the end of its segment", start)
				}
				end := min(start+w, room)
				b, err := f.ReadMapped(chains+4*start, 4*(end-start), "DT_GNU_HASH chains")
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
					return fmt.Errorf("DT_GNU_HASH: chain %d runs past the end of its segment", start)
				}
			}
		}
		ch, err := f.ReadMapped(chains, 4*n, "DT_GNU_HASH chains")
		if err != nil {
			return err
		}
		g.chain = u32s{ch, o.order}
		o.gnu = g
	}
	if a, ok := f.DynValue(elf.DT_HASH); ok {
		h, err := f.ReadMapped(a, 8, "DT_HASH")
		if err != nil {
			return err
		}
		nb, nc := uint64(o.word(h, 0)), uint64(o.word(h, 1))
		if 8+4*(nb+nc) > f.MappedSize(a) {
			return fmt.Errorf("DT_HASH: %d buckets and %d chains run past the end of its segment", nb, nc)
		}
		all, err := f.ReadMapped(a, 8+4*(nb+nc), "DT_HASH")
		if err != nil {
			return err
		}
		s := &sysvHash{buckets: u32s{all[8 : 8+4*nb], o.order}, chain: u32s{all[8+4*nb:], o.order}}
		o.sysv = s
	}
	return nil
}

// readVersions reads DT_VERNEED and DT_VERDEF into l_versions, as glibc's
// _dl_check_map_versions fills it.
func (o *object) readVersions(f *elfedit.File) error {
	set := func(ndx uint16, v version) {
		ndx &= 0x7fff
		for int(ndx) >= len(o.versions) {
			o.versions = append(o.versions, version{})
		}
		o.versions[ndx] = v
	}
	if a, ok := f.DynValue(elf.DT_VERNEED); ok {
		num, _ := f.DynValue(elf.DT_VERNEEDNUM)
		err := versionRecords(f, a, versionWindow(num, 16+2*16), "DT_VERNEED", func(b []byte) error {
			o.needs = nil
			off := uint64(0)
			for range num {
				if off+16 > uint64(len(b)) {
					return errShort{fmt.Sprintf("entry at +0x%x", off)}
				}
				cnt, file, aux, next := o.order.Uint16(b[off+2:]), o.word(b[off+4:], 0), o.word(b[off+8:], 0), o.word(b[off+12:], 0)
				n := verNeed{file: dynStr(f, file)}
				ao := off + uint64(aux)
				for range cnt {
					if ao+16 > uint64(len(b)) {
						return errShort{fmt.Sprintf("auxiliary entry at +0x%x", ao)}
					}
					hash, flags, other, name, anext := o.word(b[ao:], 0), o.order.Uint16(b[ao+4:]), o.order.Uint16(b[ao+6:]), o.word(b[ao+8:], 0), o.word(b[ao+12:], 0)
					v := version{name: dynStr(f, name), hash: hash, hidden: other&0x8000 != 0, file: n.file, weak: flags&verFlgWeak != 0}
					n.vers = append(n.vers, v)
					set(other, v)
					if anext == 0 {
						break
					}
					ao += uint64(anext)
				}
				if len(n.vers) > 0 { // a record naming no version asks nothing
					o.needs = append(o.needs, n)
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
		return versionRecords(f, a, versionWindow(num, 20+2*8), "DT_VERDEF", func(b []byte) error {
			o.verdefs = nil
			off := uint64(0)
			for range num {
				if off+20 > uint64(len(b)) {
					return errShort{fmt.Sprintf("entry at +0x%x", off)}
				}
				flags, ndx, hash, aux, next := o.order.Uint16(b[off+2:]), o.order.Uint16(b[off+4:]), o.word(b[off+8:], 0), o.word(b[off+8:], 1), o.word(b[off+8:], 2)
				if off+uint64(aux)+8 > uint64(len(b)) {
					return errShort{fmt.Sprintf("auxiliary entry of +0x%x", off)}
				}
				v := version{name: dynStr(f, o.word(b[off+uint64(aux):], 0)), hash: hash}
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

// errShort is a version record that runs past the bytes read.
type errShort struct{ what string }

func (e errShort) Error() string { return e.what + " runs past its segment" }

// versionRecords reads the version records at a, a window first (they are
// small and together), the rest of their segment when the window is short,
// and parses them.
func versionRecords(f *elfedit.File, a, window uint64, what string, parse func([]byte) error) error {
	size := min(f.MappedSize(a), maxTable)
	for n := min(window, size); ; n = size {
		b, err := f.ReadMapped(a, n, what)
		if err != nil {
			return err
		}
		err = parse(b)
		if _, short := err.(errShort); !short || n == size {
			if err != nil {
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

// readRelocs classifies the symbols the relocations refer to.
func (o *object) readRelocs(f *elfedit.File) error {
	var all []uint64 // symbol index << 8 | kind
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
			return fmt.Errorf("%v: size 0x%x", t.addr, n)
		}
		b, err := f.ReadMapped(a, n, t.addr.String())
		if err != nil {
			return err
		}
		all = slices.Grow(all, len(b)/es)
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
			case t.plt && (typ == slotT || slotT == 0):
				k = refFunc
			}
			all = append(all, uint64(s)<<8|uint64(k))
		}
	}
	// One entry a symbol, in index order, with every use its relocations
	// make.
	slices.Sort(all)
	o.refs = make([]symRef, 0, len(all))
	for _, v := range all {
		i, k := uint32(v>>8), refKind(v)
		if n := len(o.refs); n > 0 && o.refs[n-1].idx == i {
			o.refs[n-1].kind |= k
			continue
		}
		o.refs = append(o.refs, symRef{idx: i, kind: k})
	}
	return nil
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
