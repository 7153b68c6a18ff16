package symcheck

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

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
	refs     map[uint32]refKind // symbol index → how relocations use it
	bindNow  bool
	symbolic bool
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
	buckets   []uint32
	chain     []uint32 // from symoffset
}

type sysvHash struct {
	buckets []uint32
	chain   []uint32
}

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

// maxTable bounds one table read: a count taken from a hostile file ends in
// an error, not in a huge allocation (reads are also bounded by file size).
const maxTable = 1 << 30

// readObject reads the binding tables of the ELF file at path.
func readObject(path string) (*object, error) {
	f, err := elfedit.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o, err := newObject(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	o.path = path
	return o, nil
}

func newObject(f *elfedit.File) (*object, error) {
	o := &object{class: f.Header.Class, mach: f.Header.Machine, order: f.ByteOrder(), symsz: 24}
	if o.class == elf.ELFCLASS32 {
		o.symsz = 16
	}
	if !f.IsDynamic() {
		return o, nil
	}
	dv := f.DynValue
	strtab, ok1 := dv(elf.DT_STRTAB)
	strsz, ok2 := dv(elf.DT_STRSZ)
	if ok1 && ok2 {
		b, err := f.ReadMapped(strtab, strsz, "DT_STRTAB")
		if err != nil {
			return nil, err
		}
		o.strtab = b
	}
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
	symtab, ok := dv(elf.DT_SYMTAB)
	if !ok {
		return o, nil
	}
	if err := o.readHashes(f); err != nil {
		return nil, err
	}
	if err := o.readRelocs(f); err != nil {
		return nil, err
	}
	n, err := o.countSymbols()
	if err != nil {
		return nil, err
	}
	// An executable that exports nothing has an empty .gnu.hash: the
	// symbols its relocations use are the ones that matter.
	for i := range o.refs {
		n = max(n, uint64(i)+1)
	}
	if n > maxTable/uint64(o.symsz) {
		return nil, fmt.Errorf("DT_SYMTAB: %d symbols", n)
	}
	if o.symbols, err = f.ReadMapped(symtab, n*uint64(o.symsz), "DT_SYMTAB"); err != nil {
		return nil, err
	}
	if a, ok := dv(elf.DT_VERSYM); ok {
		if o.versym, err = f.ReadMapped(a, 2*n, "DT_VERSYM"); err != nil {
			return nil, err
		}
	}
	return o, o.readVersions(f)
}

// countSymbols is the number of dynamic symbols: DT_HASH's nchain, or past
// the last chain of .gnu.hash (the loader needs no count; the tables give
// none other).
func (o *object) countSymbols() (uint64, error) {
	if o.sysv != nil {
		return uint64(len(o.sysv.chain)), nil
	}
	if o.gnu == nil {
		return 0, fmt.Errorf("DT_SYMTAB without DT_GNU_HASH or DT_HASH")
	}
	last := uint32(0)
	for _, b := range o.gnu.buckets {
		last = max(last, b)
	}
	if last < o.gnu.symoffset {
		return uint64(o.gnu.symoffset), nil
	}
	for i := last - o.gnu.symoffset; ; i++ {
		if int(i) >= len(o.gnu.chain) {
			return 0, fmt.Errorf("DT_GNU_HASH: chain %d runs past the end of its segment", i)
		}
		if o.gnu.chain[i]&1 != 0 {
			return uint64(o.gnu.symoffset) + uint64(i) + 1, nil
		}
	}
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
		if head > size || size > maxTable {
			return fmt.Errorf("DT_GNU_HASH: %d buckets and %d Bloom words run past the end of its segment", nb, nbloom)
		}
		all, err := f.ReadMapped(a, size&^3, "DT_GNU_HASH")
		if err != nil {
			return err
		}
		g := &gnuHash{symoffset: symoff, shift: shift, bloom: make([]uint64, nbloom), buckets: make([]uint32, nb)}
		for i := range g.bloom {
			if ws == 8 {
				g.bloom[i] = o.order.Uint64(all[16+8*i:])
			} else {
				g.bloom[i] = uint64(o.order.Uint32(all[16+4*i:]))
			}
		}
		bk := all[16+ws*uint64(nbloom):]
		for i := range g.buckets {
			g.buckets[i] = o.word(bk, i)
		}
		ch := bk[4*uint64(nb):]
		g.chain = make([]uint32, len(ch)/4)
		for i := range g.chain {
			g.chain[i] = o.word(ch, i)
		}
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
		s := &sysvHash{buckets: make([]uint32, nb), chain: make([]uint32, nc)}
		for i := range s.buckets {
			s.buckets[i] = o.word(all, 2+i)
		}
		for i := range s.chain {
			s.chain[i] = o.word(all, 2+int(nb)+i)
		}
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
		b, err := f.ReadMapped(a, min(f.MappedSize(a), maxTable), "DT_VERNEED")
		if err != nil {
			return err
		}
		off := uint64(0)
		for range num {
			if off+16 > uint64(len(b)) {
				return fmt.Errorf("DT_VERNEED: entry at +0x%x runs past its segment", off)
			}
			cnt, file, aux, next := o.order.Uint16(b[off+2:]), o.word(b[off+4:], 0), o.word(b[off+8:], 0), o.word(b[off+12:], 0)
			n := verNeed{file: o.str(file)}
			ao := off + uint64(aux)
			for range cnt {
				if ao+16 > uint64(len(b)) {
					return fmt.Errorf("DT_VERNEED: auxiliary entry at +0x%x runs past its segment", ao)
				}
				hash, flags, other, name, anext := o.word(b[ao:], 0), o.order.Uint16(b[ao+4:]), o.order.Uint16(b[ao+6:]), o.word(b[ao+8:], 0), o.word(b[ao+12:], 0)
				v := version{name: o.str(name), hash: hash, hidden: other&0x8000 != 0, file: n.file, weak: flags&verFlgWeak != 0}
				n.vers = append(n.vers, v)
				set(other, v)
				if anext == 0 {
					break
				}
				ao += uint64(anext)
			}
			o.needs = append(o.needs, n)
			if next == 0 {
				break
			}
			off += uint64(next)
		}
	}
	if a, ok := f.DynValue(elf.DT_VERDEF); ok {
		o.hasDefs = true
		num, _ := f.DynValue(elf.DT_VERDEFNUM)
		b, err := f.ReadMapped(a, min(f.MappedSize(a), maxTable), "DT_VERDEF")
		if err != nil {
			return err
		}
		off := uint64(0)
		for range num {
			if off+20 > uint64(len(b)) {
				return fmt.Errorf("DT_VERDEF: entry at +0x%x runs past its segment", off)
			}
			flags, ndx, hash, aux, next := o.order.Uint16(b[off+2:]), o.order.Uint16(b[off+4:]), o.word(b[off+8:], 0), o.word(b[off+8:], 1), o.word(b[off+8:], 2)
			if off+uint64(aux)+8 > uint64(len(b)) {
				return fmt.Errorf("DT_VERDEF: auxiliary entry of +0x%x runs past its segment", off)
			}
			v := version{name: o.str(o.word(b[off+uint64(aux):], 0)), hash: hash}
			o.verdefs = append(o.verdefs, v)
			if flags&verFlgBase == 0 {
				set(ndx, v)
			}
			if next == 0 {
				break
			}
			off += uint64(next)
		}
	}
	return nil
}

const (
	verFlgBase = 1
	verFlgWeak = 2
)

// readRelocs classifies the symbols the relocations refer to.
func (o *object) readRelocs(f *elfedit.File) error {
	o.refs = map[uint32]refKind{}
	copyT, slotT := relocTypes(o.mach)
	pltRela := true
	if v, ok := f.DynValue(elf.DT_PLTREL); ok {
		pltRela = elf.DynTag(v) == elf.DT_RELA
	}
	tables := []struct {
		addr, size elf.DynTag
		rela, plt  bool
	}{
		{elf.DT_RELA, elf.DT_RELASZ, true, false},
		{elf.DT_REL, elf.DT_RELSZ, false, false},
		{elf.DT_JMPREL, elf.DT_PLTRELSZ, pltRela, true},
	}
	for _, t := range tables {
		a, ok1 := f.DynValue(t.addr)
		n, ok2 := f.DynValue(t.size)
		if !ok1 || !ok2 || n == 0 {
			continue
		}
		if n > maxTable {
			return fmt.Errorf("%v: size 0x%x", t.addr, n)
		}
		b, err := f.ReadMapped(a, n, t.addr.String())
		if err != nil {
			return err
		}
		es := 8
		if o.class == elf.ELFCLASS64 {
			es = 16
		}
		if t.rela {
			es += es / 2
		}
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
			o.refs[s] |= k
		}
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
