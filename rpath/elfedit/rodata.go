package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
	"strings"
)

// ImportedSymbols reports, for each of names, whether the dynamic symbol
// table has an undefined symbol (st_shndx SHN_UNDEF, not the null symbol
// at index 0) with that name. The table is found as the loader finds it,
// through DT_SYMTAB and DT_STRTAB; its size from the .dynsym header at
// that address or DT_HASH's nchain, else as told below. The string table
// is scanned once for all the names, for the longest text they share
// ("open" in dlopen, dlmopen and g_module_open); a file whose string
// table holds none of the names is answered without reading the symbols.
func (f *File) ImportedSymbols(names ...string) ([]bool, error) {
	imported, err := f.importedNames(names)
	if err != nil {
		return nil, err
	}
	got := make([]bool, len(names))
	for k, n := range names {
		got[k] = imported[n]
	}
	return got, nil
}

// importedNames is ImportedSymbols as the set of the names imported.
func (f *File) importedNames(names []string) (map[string]bool, error) {
	// The string table offsets at which one of the names starts: a
	// symbol has one of the names exactly when its st_name is one of them.
	at := f.namesAt(names)
	imported := map[string]bool{}
	if len(at) == 0 {
		return imported, nil
	}
	symtab, ok := f.dynVal(elf.DT_SYMTAB)
	if !ok {
		return imported, nil
	}
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es = sym32Size
	}
	n, bound, bounded, err := f.symbolSpan(symtab, es)
	if err != nil && err != errUnknownRefs {
		return nil, err
	}
	// Without a .dynsym header or DT_HASH, the table is read on to where
	// it must end (symbolSpan's bound: the next table or segment), and
	// ends at the first record whose name lies outside the string table.
	// Where nothing bounds it, it is taken to run up to DT_STRTAB, where
	// linkers place the string table after it, within its PT_LOAD: an
	// edit that grew the string table moved it elsewhere.
	guessed := !f.sizedSymtab(symtab, es)
	switch {
	case guessed && bounded:
		n = bound
	case guessed && f.strAddr > symtab:
		end := min(f.strAddr, f.loadEnd(symtab))
		n = max(n, min((end-symtab)/es, uint64(f.size)/es))
	}
	if n == 0 {
		return imported, nil
	}
	off, ok := f.vaddrToOff(symtab, n*es)
	if !ok {
		return nil, formatErr(-1, "DT_SYMTAB 0x%x with %d symbols maps to no PT_LOAD", symtab, n)
	}
	if err := inFile(f.size, off, n*es, "dynamic symbol table"); err != nil {
		return nil, err
	}
	shndx := uint64(6) // st_shndx: after st_name, st_info, st_other
	if es == sym32Size {
		shndx = 14 // after st_name, st_value, st_size, st_info, st_other
	}
	// The names the string table holds: the reading stops when all are
	// found imported.
	held := map[string]bool{}
	for _, name := range at {
		held[name] = true
	}
	buf := f.scratchToRead(min(n*es, 340*sym64Size)) // a multiple of both entry sizes
	for i := uint64(0); i < n; {
		m := min(n-i, uint64(len(buf))/es)
		if err := readInto(f.r, buf[:m*es], off+i*es, "dynamic symbol table"); err != nil {
			return nil, err
		}
		for j := uint64(0); j < m; j++ {
			if i+j == 0 {
				continue
			}
			rec := buf[j*es:]
			nameOff := uint64(f.order.Uint32(rec))
			if guessed && nameOff >= uint64(len(f.strtab)) {
				return imported, nil
			}
			if name, ok := at[nameOff]; ok && f.order.Uint16(rec[shndx:]) == uint16(elf.SHN_UNDEF) {
				if imported[name] = true; len(imported) == len(held) {
					return imported, nil
				}
			}
		}
		i += m
	}
	return imported, nil
}

// namesAt maps each string table offset at which one of names starts
// (followed by its NUL) to that name. It scans the table once for the
// longest text all the names share: every occurrence of a name holds one
// of it, in the string that ends at the name's NUL.
func (f *File) namesAt(names []string) map[uint64]string {
	var at map[uint64]string
	key := commonText(names)
	if key == "" {
		return nil
	}
	tab, k := f.strtab, []byte(key)
	for i := 0; i < len(tab); {
		j := bytes.Index(tab[i:], k)
		if j < 0 {
			break
		}
		end := bytes.IndexByte(tab[i+j:], 0)
		if end < 0 {
			break
		}
		end += i + j
		for _, n := range names {
			if len(n) <= end && string(tab[end-len(n):end]) == n {
				if at == nil {
					at = map[uint64]string{}
				}
				at[uint64(end-len(n))] = n
			}
		}
		i = end + 1
	}
	return at
}

// commonText is the longest text every one of names holds, "" when they
// share none or one is empty.
func commonText(names []string) string {
	if len(names) == 0 {
		return ""
	}
	short := slices.MinFunc(names, func(a, b string) int { return len(a) - len(b) })
	for n := len(short); n > 0; n-- {
		for i := 0; i+n <= len(short); i++ {
			sub := short[i : i+n]
			if !slices.ContainsFunc(names, func(s string) bool { return !strings.Contains(s, sub) }) {
				return sub
			}
		}
	}
	return ""
}

// roChunk is how much of the read-only data ReadOnlyStrings reads at once:
// what it holds in memory, whatever the file's size.
const roChunk = 1 << 20

// ReadOnlyStrings calls fn with each NUL-terminated string of the file's
// read-only data that contains sub (which holds no NUL), in file order,
// until fn returns false. The read-only data is the .rodata and .rodata.*
// sections (allocated, PROGBITS, neither writable nor executable) where
// the section headers name them, else every PT_LOAD segment without PF_W
// (older layouts keep .rodata in the text segment) less the dynamic
// string table. It is streamed in
// chunks of at most roChunk bytes, read past the file's read cache; s is
// valid only during the call, and a string of roChunk bytes or more is
// not reported. Data before a string with no NUL between them is read as
// part of it, and the part of a string before the start of a range as no
// string at all.
func (f *File) ReadOnlyStrings(sub []byte, fn func(s []byte) bool) error {
	return f.readOnlyStrings(sub, roChunk, fn)
}

// readOnlyStrings is ReadOnlyStrings in chunks of the given size.
func (f *File) readOnlyStrings(sub []byte, chunk uint64, fn func(s []byte) bool) error {
	type span struct{ off, n uint64 }
	var spans []span
	for _, s := range f.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&(elf.SHF_WRITE|elf.SHF_EXECINSTR) == 0 &&
			(s.Name == ".rodata" || strings.HasPrefix(s.Name, ".rodata.")) && s.Size > 0 {
			spans = append(spans, span{s.Offset, s.Size})
		}
	}
	if spans == nil {
		// The dynamic string table lies in such a segment too: its
		// names (DT_NEEDED, DT_SONAME, symbols) are the loader's, not
		// strings the code hands to dlopen, and an edit moves it.
		var rs []rng
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 && p.Filesz > 0 {
				rs = append(rs, rng{p.Off, p.Off + p.Filesz})
			}
		}
		if len(f.strtab) > 0 {
			rs = without(rs, rng{f.strOff, f.strOff + uint64(len(f.strtab))})
		}
		for _, r := range rs {
			spans = append(spans, span{r.lo, r.hi - r.lo})
		}
	}
	var largest uint64
	for _, s := range spans {
		if err := inFile(f.size, s.off, s.n, "read-only data"); err != nil {
			return err
		}
		largest = max(largest, s.n)
	}
	if largest == 0 {
		return nil
	}
	buf := f.scratchToRead(min(largest, chunk))
	for _, s := range spans {
		pos, end := s.off, s.off+s.n
		atStart := true // pos begins a string
		for pos < end {
			b := buf[:min(uint64(len(buf)), end-pos)]
			if err := f.readUncached(b, pos); err != nil {
				return fmt.Errorf("read-only data: %w", err)
			}
			last := bytes.LastIndexByte(b, 0)
			if last < 0 { // no string ends here: skip to the next one
				pos += uint64(len(b))
				atStart = false
				continue
			}
			if !scanStrings(b[:last+1], sub, atStart, fn) {
				return nil
			}
			pos += uint64(last + 1)
			atStart = true
		}
	}
	return nil
}

// scanStrings calls fn with each NUL-terminated string of b (which ends in
// a NUL) that contains sub; the first string only when whole says b
// starts with it.
func scanStrings(b, sub []byte, whole bool, fn func(s []byte) bool) bool {
	from, k := 0, rarest(b, sub)
	for from < len(b) {
		var lo, hi int
		if len(sub) == 0 {
			lo = from
			hi = lo + bytes.IndexByte(b[lo:], 0)
		} else {
			i := indexAt(b[from:], sub, k)
			if i < 0 {
				return true
			}
			hit := from + i
			lo = bytes.LastIndexByte(b[:hit], 0) + 1
			hi = hit + bytes.IndexByte(b[hit:], 0)
		}
		if (lo > 0 || whole) && !fn(b[lo:hi]) {
			return false
		}
		from = hi + 1
	}
	return true
}

// rarest returns the position in sub of the byte that occurs least often
// in the first rareSample bytes of b. Read-only data is mostly tables, in
// which sub is rare and its bytes are not: a search stops at each
// occurrence of the byte it looks for, and those stops, not the bytes
// passed over, are what a scan costs (bench/HISTORY.md, "The rarest byte").
func rarest(b, sub []byte) int {
	sample := b[:min(len(b), rareSample)]
	k, least := 0, -1
	for i, c := range sub {
		if n := bytes.Count(sample, []byte{c}); least < 0 || n < least {
			k, least = i, n
		}
	}
	return k
}

// rareSample is how much of a chunk rarest counts in.
const rareSample = 64 << 10

// indexAt is bytes.Index(b, sub) for a non-empty sub, looking for its
// byte at k first.
func indexAt(b, sub []byte, k int) int {
	c := sub[k]
	for i := k; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], c)
		if j < 0 {
			return -1
		}
		i += j
		if at := i - k; at+len(sub) <= len(b) && bytes.Equal(b[at:at+len(sub)], sub) {
			return at
		}
	}
	return -1
}

// readUncached fills b from off without keeping the bytes in the read
// cache: they are read once, and the cache's windows hold what an edit
// reads again.
func (f *File) readUncached(b []byte, off uint64) error {
	if err := inFile(f.size, off, uint64(len(b)), "read"); err != nil {
		return err
	}
	r := f.r
	if c, ok := r.(*readCache); ok {
		if v, ok := c.view(int64(off), int64(len(b))); ok {
			copy(b, v)
			return nil
		}
		r = c.f
	}
	return readInto(r, b, off, "read")
}

// sizedSymtab says whether the file states the size of its dynamic symbol
// table: a .dynsym section header at its address, or DT_HASH's nchain.
func (f *File) sizedSymtab(symtab, es uint64) bool {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM && s.Addr == symtab && s.Entsize == es {
			return true
		}
	}
	_, ok := f.dynVal(elf.DT_HASH)
	return ok
}
