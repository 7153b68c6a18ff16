package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
)

// renameTag marks the planned entries that only carry a renamed symbol's
// new name through the string layout; they are taken out again before
// .dynamic is encoded.
const renameTag = elf.DynTag(-0x52454e)

// symbolRename is what renaming dynamic symbols (Edit.RenameSymbols) needs:
// the dynamic symbol table as it is, and the symbols that get a new name.
type symbolRename struct {
	symtab, es uint64 // DT_SYMTAB and the size of one symbol
	syms       []byte // the whole table, as read
	names      []string
	renamed    []int // indices of the symbols renamed
	newName    map[int]string
}

// planRename reads the dynamic symbol table and picks the symbols renamed;
// nil when none is (a map that names no symbol changes nothing, as in
// patchelf).
func (f *File) planRename(m map[string]string) (*symbolRename, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if !f.IsDynamic() {
		return nil, ErrNotDynamic
	}
	symtab, ok := f.dynVal(elf.DT_SYMTAB)
	if !ok {
		return nil, nil
	}
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es = sym32Size
	}
	n, err := f.symbolCount(symtab, es)
	if err != nil {
		return nil, fmt.Errorf("counting dynamic symbols: %w", err)
	}
	off, ok := f.vaddrToOff(symtab, n*es)
	if !ok {
		return nil, formatErr(-1, "DT_SYMTAB 0x%x with %d symbols maps to no PT_LOAD", symtab, n)
	}
	syms, err := readAt(f.r, f.size, off, n*es, "dynamic symbol table")
	if err != nil {
		return nil, err
	}
	r := &symbolRename{symtab: symtab, es: es, syms: bytes.Clone(syms), newName: map[int]string{}}
	for i := uint64(0); i < n; i++ {
		name, _ := cstring(f.strtab, uint64(f.order.Uint32(r.syms[i*es:])))
		r.names = append(r.names, name)
		if to, ok := m[name]; ok && i > 0 && name != "" && to != name {
			r.renamed = append(r.renamed, int(i))
			r.newName[int(i)] = to
		}
	}
	if len(r.renamed) == 0 {
		return nil, nil
	}
	return r, nil
}

// pseudo returns one planned string entry per renamed symbol, for the
// string layout to place.
func (r *symbolRename) pseudo() []dent {
	out := make([]dent, len(r.renamed))
	for k, i := range r.renamed {
		out[k] = dent{tag: renameTag, isStr: true, str: r.newName[i], origOff: -1, changed: true}
	}
	return out
}

// renameTables returns the rewritten dynamic symbol table (st_name of the
// renamed symbols at offs, their new names' offsets) and the hash tables
// rebuilt for the new names. The symbols keep their order, so nothing that
// refers to them by index changes. DT_HASH keeps its bucket count;
// DT_GNU_HASH, whose buckets need the symbols sorted, is rebuilt with one
// bucket (its Bloom filter recomputed): any order satisfies it, at the
// price of a chain walk per lookup, where keeping the buckets would mean
// reordering .dynsym and every relocation, as patchelf does.
func (f *File) renameTables(r *symbolRename, offs []uint64) ([]*tableCopy, error) {
	o := f.order
	names := slices.Clone(r.names)
	for k, i := range r.renamed {
		o.PutUint32(r.syms[uint64(i)*r.es:], uint32(offs[k]))
		names[i] = r.newName[i]
	}
	copies := []*tableCopy{{tag: elf.DT_SYMTAB, secType: elf.SHT_DYNSYM, addr: r.symtab, data: r.syms}}
	if addr, ok := f.dynVal(elf.DT_GNU_HASH); ok {
		t, err := f.gnuHashTable(addr, names)
		if err != nil {
			return nil, err
		}
		copies = append(copies, &tableCopy{tag: elf.DT_GNU_HASH, secType: elf.SHT_GNU_HASH, addr: addr, data: t})
	}
	if addr, ok := f.dynVal(elf.DT_HASH); ok {
		t, err := f.sysvHashTable(addr, names)
		if err != nil {
			return nil, err
		}
		copies = append(copies, &tableCopy{tag: elf.DT_HASH, secType: elf.SHT_HASH, addr: addr, data: t})
	}
	return copies, nil
}

// GNUHash is the hash of a name in DT_GNU_HASH (glibc's dl_new_hash).
func GNUHash[S string | []byte](s S) uint32 {
	h := uint32(5381)
	for i := 0; i < len(s); i++ {
		h = h*33 + uint32(s[i])
	}
	return h
}

// SysVHash is the hash of a name in DT_HASH (the System V ABI's elf_hash).
func SysVHash(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		h = h<<4 + uint32(s[i])
		g := h & 0xf0000000
		h ^= g >> 24
		h &^= g
	}
	return h
}

// gnuHashTable rebuilds DT_GNU_HASH for names with one bucket, keeping
// symoffset, the Bloom filter's size and its shift.
func (f *File) gnuHashTable(addr uint64, names []string) ([]byte, error) {
	o := f.order
	off, ok := f.vaddrToOff(addr, 16)
	if !ok {
		return nil, formatErr(-1, "DT_GNU_HASH 0x%x maps to no PT_LOAD", addr)
	}
	hdr, err := readAt(f.r, f.size, off, 16, "DT_GNU_HASH")
	if err != nil {
		return nil, err
	}
	symoff, maskwords, shift := uint64(o.Uint32(hdr[4:])), uint64(o.Uint32(hdr[8:])), o.Uint32(hdr[12:])
	n := uint64(len(names))
	if maskwords == 0 || maskwords&(maskwords-1) != 0 || maskwords > uint64(f.size) || symoff > n {
		return nil, formatErr(int64(off), "DT_GNU_HASH header (symoffset %d, %d Bloom words) does not describe %d symbols", symoff, maskwords, n)
	}
	word := uint64(8)
	if f.Header.Class == elf.ELFCLASS32 {
		word = 4
	}
	bits := uint32(word * 8)
	t := make([]byte, 16+maskwords*word+4+(n-symoff)*4)
	o.PutUint32(t[0:], 1)
	o.PutUint32(t[4:], uint32(symoff))
	o.PutUint32(t[8:], uint32(maskwords))
	o.PutUint32(t[12:], shift)
	bloom := t[16 : 16+maskwords*word]
	buckets := 16 + maskwords*word
	chain := buckets + 4
	if n > symoff {
		o.PutUint32(t[buckets:], uint32(symoff))
	}
	for i := symoff; i < n; i++ {
		h := GNUHash(names[i])
		w := uint64(h/bits) % maskwords
		set := uint64(1)<<(h%bits) | uint64(1)<<((h>>shift)%bits)
		if word == 8 {
			o.PutUint64(bloom[w*8:], o.Uint64(bloom[w*8:])|set)
		} else {
			o.PutUint32(bloom[w*4:], o.Uint32(bloom[w*4:])|uint32(set))
		}
		v := h &^ 1
		if i == n-1 {
			v |= 1
		}
		o.PutUint32(t[chain+(i-symoff)*4:], v)
	}
	return t, nil
}

// sysvHashTable rebuilds DT_HASH for names with its bucket count.
func (f *File) sysvHashTable(addr uint64, names []string) ([]byte, error) {
	o := f.order
	off, ok := f.vaddrToOff(addr, 8)
	if !ok {
		return nil, formatErr(-1, "DT_HASH 0x%x maps to no PT_LOAD", addr)
	}
	hdr, err := readAt(f.r, f.size, off, 8, "DT_HASH")
	if err != nil {
		return nil, err
	}
	nbucket, n := uint64(o.Uint32(hdr)), uint64(len(names))
	if nbucket == 0 || nbucket > uint64(f.size) {
		return nil, formatErr(int64(off), "DT_HASH has %d buckets", nbucket)
	}
	t := make([]byte, 8+(nbucket+n)*4)
	o.PutUint32(t[0:], uint32(nbucket))
	o.PutUint32(t[4:], uint32(n))
	bucket := func(b uint64) []byte { return t[8+b*4:] }
	chain := func(i uint64) []byte { return t[8+(nbucket+i)*4:] }
	for i := uint64(1); i < n; i++ {
		b := uint64(SysVHash(names[i])) % nbucket
		o.PutUint32(chain(i), o.Uint32(bucket(b)))
		o.PutUint32(bucket(b), uint32(i))
	}
	return t, nil
}

// checkRename reads back the renamed symbols' names, for checkResult.
func checkRename(before, after *File, e *Edit) []string {
	if len(e.RenameSymbols) == 0 {
		return nil
	}
	r, err := before.planRename(e.RenameSymbols)
	if err != nil || r == nil {
		return nil
	}
	es := r.es
	symtab, ok := after.dynVal(elf.DT_SYMTAB)
	if !ok {
		return []string{"DT_SYMTAB missing"}
	}
	off, ok := after.vaddrToOff(symtab, uint64(len(r.names))*es)
	if !ok {
		return []string{"DT_SYMTAB maps to no PT_LOAD"}
	}
	syms, err := readAt(after.r, after.size, off, uint64(len(r.names))*es, "dynamic symbol table")
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for i, old := range r.names {
		want := old
		if to, ok := r.newName[i]; ok {
			want = to
		}
		if got, _ := cstring(after.strtab, uint64(after.order.Uint32(syms[uint64(i)*es:]))); got != want {
			bad = append(bad, fmt.Sprintf("dynamic symbol %d reads back as %q, want %q", i, got, want))
			if len(bad) > 3 {
				break
			}
		}
	}
	return bad
}
