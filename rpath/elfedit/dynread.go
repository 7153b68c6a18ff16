package elfedit

import "debug/elf"

// DynValue returns the value of the dynamic entry with the tag, the last
// of a tag given twice, as the loader keeps it.
func (f *File) DynValue(tag elf.DynTag) (uint64, bool) { return f.dynVal(tag) }

// DynString returns the NUL-terminated string at offset off of DT_STRTAB,
// false when off lies outside the table or the string runs past its end.
// Like the rest of the table, it is not for use after Close.
func (f *File) DynString(off uint64) (string, bool) { return cstring(f.strtab, off) }

// DynStrTab returns DT_STRTAB's DT_STRSZ bytes as read with the dynamic
// section (nil when there is none). Like the rest of the table, it is not
// for use after Close.
func (f *File) DynStrTab() []byte { return f.strtab }

// MappedSize returns how many bytes of file image follow virtual address
// addr in the PT_LOAD that holds it (and the ones that continue it in memory
// and in the file): the most a table whose size the dynamic section does not
// give (.gnu.hash chains, version records) can span. It is 0 when no PT_LOAD
// maps addr.
func (f *File) MappedSize(addr uint64) uint64 {
	for i, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		n := p.Filesz - (addr - p.Vaddr)
		endV, endO := p.Vaddr+p.Filesz, p.Off+p.Filesz
		for _, q := range f.Progs[i+1:] {
			if q.Type != elf.PT_LOAD {
				continue
			}
			if q.Vaddr != endV || q.Off != endO {
				break
			}
			n += q.Filesz
			endV, endO = q.Vaddr+q.Filesz, q.Off+q.Filesz
		}
		return n
	}
	return 0
}

// ReadMapped reads the n bytes at virtual address addr, mapped through the
// PT_LOAD that holds them in its file image, as the loader sees them. A
// range no PT_LOAD maps, or one past the end of the file, is an error
// naming what; nothing is allocated before the range is checked.
func (f *File) ReadMapped(addr, n uint64, what string) ([]byte, error) {
	off, err := f.mappedOff(addr, n, what)
	if err != nil {
		return nil, err
	}
	return readAt(f.r, f.size, off, n, what)
}

// mappedOff is the file offset of the n bytes at virtual address addr, or
// the error a read of them is.
func (f *File) mappedOff(addr, n uint64, what string) (uint64, error) {
	off, ok := f.vaddrToOff(addr, n)
	if !ok {
		return 0, formatErr(0, "%s: address 0x%x (size 0x%x) maps to no PT_LOAD", what, addr, n)
	}
	return off, nil
}

// CheckMapped reports the error ReadMapped would for the range, without
// reading it: for a reader that reads a table an entry at a time.
func (f *File) CheckMapped(addr, n uint64, what string) error {
	_, err := f.checkedOff(addr, n, what)
	return err
}

// checkedOff is mappedOff, the range also checked to lie in the file.
func (f *File) checkedOff(addr, n uint64, what string) (uint64, error) {
	off, err := f.mappedOff(addr, n, what)
	if err != nil {
		return 0, err
	}
	return off, inFile(f.size, off, n, what)
}

// ReadMappedInto is ReadMapped into buf's storage when its capacity holds n
// bytes (a new slice otherwise), copied from the file's read cache when it
// holds them all and otherwise read past it, adding nothing to it: for a
// reader of many files' tables that keeps what it derives from them, not
// the tables, and reads each once. The bytes are not among those a plan's
// fingerprint covers (an edit does not depend on them).
func (f *File) ReadMappedInto(buf []byte, addr, n uint64, what string) ([]byte, error) {
	off, err := f.checkedOff(addr, n, what)
	if err != nil {
		return nil, err
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	r := f.r
	if c, ok := r.(*readCache); ok {
		if c.cachedOnly(buf, int64(off)) {
			return buf, nil
		}
		r = c.f
	}
	if err := readInto(r, buf, off, what); err != nil {
		return nil, err
	}
	return buf, nil
}
