package elfedit

import (
	"debug/elf"
	"slices"
)

// symbolSpan is what the file tells of the length of its dynamic symbol
// table at symtab. With a .dynsym section header or DT_HASH, both are the
// count they state. Otherwise (DT_GNU_HASH alone) n covers every symbol
// the loader can reach: the hashed ones and symoffset (which GNU hash
// leaves out: the undefined symbols of an executable that defines none),
// and every symbol a dynamic relocation names. bound (at least n) is
// where the table must end: the nearest table or segment boundary after
// it (and after DT_VERSYM, which has one entry per symbol); the entries
// from n on are symbols up to the first whose name lies outside the
// string table. ok is false when nothing bounds the table: its names
// cannot all be known.
func (f *File) symbolSpan(symtab, es uint64) (n, bound uint64, ok bool, err error) {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM && s.Addr == symtab && s.Entsize == es {
			return s.Size / es, s.Size / es, true, nil
		}
	}
	if h, ok := f.dynVal(elf.DT_HASH); ok {
		off, ok := f.vaddrToOff(h, 8)
		if !ok {
			return 0, 0, false, formatErr(-1, "DT_HASH 0x%x maps to no PT_LOAD", h)
		}
		b, err := readAt(f.r, f.size, off, 8, "DT_HASH")
		if err != nil {
			return 0, 0, false, err
		}
		n := uint64(f.order.Uint32(b[4:]))
		if n > uint64(f.size)/es {
			return 0, 0, false, formatErr(int64(off), "DT_HASH nchain %d exceeds the file", n)
		}
		return n, n, true, nil
	}
	h, ok := f.dynVal(elf.DT_GNU_HASH)
	if !ok {
		return 0, 0, false, errUnknownRefs
	}
	if n, err = f.gnuHashCount(h); err != nil {
		return 0, 0, false, err
	}
	if f.Header.Machine == elf.EM_MIPS {
		// MIPS states the count (DT_MIPS_SYMTABNO), and its r_info
		// differs from every other machine's.
		if c, ok := f.dynVal(elf.DT_MIPS_SYMTABNO); ok && c <= uint64(f.size)/es {
			return max(n, c), max(n, c), true, nil
		}
		return n, n, false, nil
	}
	if r := f.relocSymbols(); r > n {
		if end := f.loadEnd(symtab); end <= symtab || r > (end-symtab)/es {
			return 0, 0, false, formatErr(-1, "a dynamic relocation names symbol %d, past the dynamic symbol table's PT_LOAD", r-1)
		}
		n = r
	}
	end := f.tableEnd(symtab)
	if end <= symtab {
		return n, n, false, nil
	}
	bound = (end - symtab) / es
	if off, ok := f.vaddrToOff(symtab, 0); ok && off <= uint64(f.size) {
		bound = min(bound, (uint64(f.size)-off)/es) // a PT_LOAD may claim more than the file holds
	}
	if v, ok := f.dynVal(elf.DT_VERSYM); ok {
		if end := f.tableEnd(v); end > v {
			bound = min(bound, (end-v)/2)
		}
	}
	if bound < n {
		return n, n, false, nil
	}
	return n, bound, true, nil
}

// symbolCount is the number of dynamic symbols the file states, or else
// those the loader can reach (symbolSpan's n).
func (f *File) symbolCount(symtab, es uint64) (uint64, error) {
	n, _, _, err := f.symbolSpan(symtab, es)
	return n, err
}

// loadEnd is where the file image of the first PT_LOAD that holds addr
// ends; addr itself when none holds it.
func (f *File) loadEnd(addr uint64) uint64 {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr <= addr && addr-p.Vaddr < p.Filesz {
			return p.Vaddr + p.Filesz
		}
	}
	return addr
}

// tableEnd is the nearest address after addr where something else the
// file describes starts (a table the dynamic section points to, a
// segment other than PT_LOAD), or where the file image of the PT_LOAD
// holding addr ends; addr itself when no PT_LOAD holds it.
func (f *File) tableEnd(addr uint64) uint64 {
	end := f.loadEnd(addr)
	if end == addr {
		return addr
	}
	for _, d := range f.Dynamic[:max(f.dynLen, 0)] {
		if d.Val > addr && d.Val < end && (slices.Contains(pointerTags[:], d.Tag) || d.Tag == elf.DT_SYMTAB_SHNDX) {
			end = d.Val
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD && p.Vaddr > addr && p.Vaddr < end {
			end = p.Vaddr
		}
	}
	return end
}

// relocSymbols is one more than the largest symbol index a dynamic
// relocation (DT_RELA, DT_REL, DT_JMPREL) names, 0 when none does. A table
// that does not map into the file is passed over: the count it would add
// is a lower bound only, and symbolSpan's bound covers the table anyway.
func (f *File) relocSymbols() uint64 {
	is64 := f.Header.Class == elf.ELFCLASS64
	word := uint64(4)
	if is64 {
		word = 8
	}
	type table struct {
		addr, size, ent elf.DynTag
		rela            bool
	}
	tables := []table{{elf.DT_RELA, elf.DT_RELASZ, elf.DT_RELAENT, true}, {elf.DT_REL, elf.DT_RELSZ, elf.DT_RELENT, false}}
	if t, ok := f.dynVal(elf.DT_PLTREL); ok {
		tables = append(tables, table{elf.DT_JMPREL, elf.DT_PLTRELSZ, 0, elf.DynTag(t) == elf.DT_RELA})
	}
	var n uint64
	for _, t := range tables {
		addr, ok := f.dynVal(t.addr)
		size, _ := f.dynVal(t.size)
		if !ok || size == 0 || size > uint64(f.size) {
			continue
		}
		ent := 2 * word // r_offset, r_info (and r_addend)
		if t.rela {
			ent = 3 * word
		}
		if e, ok := f.dynVal(t.ent); ok && t.ent != 0 && e >= ent && e <= 64 {
			ent = e
		}
		off, ok := f.vaddrToOff(addr, size)
		if !ok || inFile(f.size, off, size, "relocations") != nil {
			continue
		}
		buf := f.scratchToRead(min(size, 64<<10) / ent * ent)
		if len(buf) == 0 {
			continue
		}
		for at := uint64(0); at+ent <= size; {
			m := min(size-at, uint64(len(buf))) / ent * ent
			if readInto(f.r, buf[:m], off+at, "relocations") != nil {
				break
			}
			for j := uint64(0); j < m; j += ent {
				var sym uint64
				if is64 {
					sym = f.order.Uint64(buf[j+8:]) >> 32
				} else {
					sym = uint64(f.order.Uint32(buf[j+4:]) >> 8)
				}
				n = max(n, sym+1)
			}
			at += m
		}
	}
	return n
}

// tableExtent is how many bytes from addr the loader may read of the
// table that the dynamic tag names there (one of addrTags, bar
// DT_STRTAB): the symbols it can reach, one version index each, the hash
// tables as their headers size them, the version records as their chains
// link them.
func (f *File) tableExtent(tag elf.DynTag, addr uint64) (uint64, error) {
	es, word := uint64(sym64Size), uint64(8)
	if f.Header.Class == elf.ELFCLASS32 {
		es, word = sym32Size, 4
	}
	symbols := func() (uint64, error) {
		symtab, ok := f.dynVal(elf.DT_SYMTAB)
		if !ok {
			return 0, nil
		}
		return f.symbolCount(symtab, es)
	}
	header := func(n uint64) ([]byte, error) {
		off, ok := f.vaddrToOff(addr, n)
		if !ok {
			return nil, formatErr(-1, "%v 0x%x maps to no PT_LOAD", tag, addr)
		}
		return readAt(f.r, f.size, off, n, tag.String())
	}
	switch tag {
	case elf.DT_SYMTAB:
		n, err := symbols()
		return n * es, err
	case elf.DT_VERSYM:
		n, err := symbols()
		return n * 2, err
	case elf.DT_HASH:
		h, err := header(8)
		if err != nil {
			return 0, err
		}
		return 8 + 4*(uint64(f.order.Uint32(h))+uint64(f.order.Uint32(h[4:]))), nil
	case elf.DT_GNU_HASH:
		h, err := header(16)
		if err != nil {
			return 0, err
		}
		n, err := f.gnuHashCount(addr)
		if err != nil {
			return 0, err
		}
		nbuckets, symoff, bloom := uint64(f.order.Uint32(h)), uint64(f.order.Uint32(h[4:])), uint64(f.order.Uint32(h[8:]))
		return 16 + bloom*word + 4*nbuckets + 4*(max(n, symoff)-symoff), nil
	case elf.DT_VERNEED, elf.DT_VERDEF:
		return f.versionExtent(tag, addr)
	}
	return 0, formatErr(-1, "%v: no table size known", tag)
}

// versionExtent is the span of the version records the chain at addr
// links (Elf_Verneed and Elf_Vernaux, or Elf_Verdef and Elf_Verdaux),
// walked as the loader walks them, to a next offset of 0, within the
// engine's budget of records.
func (f *File) versionExtent(tag elf.DynTag, addr uint64) (uint64, error) {
	recSize, auxSize, budget := uint64(16), uint64(16), uint64(f.size)/16
	cntAt, auxAt, nextAt := 2, 8, 12 // vn_cnt, vn_aux, vn_next
	if tag == elf.DT_VERDEF {
		recSize, auxSize, budget = 20, 8, uint64(f.size)/8
		cntAt, auxAt, nextAt = 6, 12, 16 // vd_cnt, vd_aux, vd_next
	}
	read := func(at, n uint64) ([]byte, error) {
		if budget == 0 {
			return nil, formatErr(-1, "%v: more version records than the file can hold (overlapping chains)", tag)
		}
		budget--
		off, ok := f.vaddrToOff(at, n)
		if !ok {
			return nil, formatErr(-1, "%v record 0x%x maps to no PT_LOAD", tag, at)
		}
		return readAt(f.r, f.size, off, n, tag.String())
	}
	end := addr
	for at := addr; ; {
		r, err := read(at, recSize)
		if err != nil {
			return 0, err
		}
		end = max(end, at+recSize)
		a := at + uint64(f.order.Uint32(r[auxAt:]))
		for range f.order.Uint16(r[cntAt:]) {
			ar, err := read(a, auxSize)
			if err != nil {
				return 0, err
			}
			end = max(end, a+auxSize)
			next := uint64(f.order.Uint32(ar[auxSize-4:])) // vna_next, vda_next: the last word
			if next == 0 {
				break
			}
			a += next
		}
		next := uint64(f.order.Uint32(r[nextAt:]))
		if next == 0 {
			return end - addr, nil
		}
		at += next
	}
}
