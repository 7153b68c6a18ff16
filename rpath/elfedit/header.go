package elfedit

import (
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoGnuStack means the stack flag of a file without PT_GNU_STACK was to
// change. The loaders then take an architecture default (executable on
// x86); adding the header would grow the program header table, which this
// edit does not do.
var ErrNoGnuStack = errors.New("no PT_GNU_STACK program header")

// addFlagEntries applies AddDebug and NoDefaultLib to the planned dynamic
// entries: non-string entries, placed like any other added entry (a spare
// DT_NULL slot, else a moved .dynamic).
func addFlagEntries(ents []dent, e *Edit) []dent {
	if e.AddDebug && !slices.ContainsFunc(ents, func(d dent) bool { return d.tag == elf.DT_DEBUG }) {
		ents = append(ents, dent{tag: elf.DT_DEBUG, origOff: -1})
	}
	if e.NoDefaultLib {
		if i := slices.IndexFunc(ents, func(d dent) bool { return d.tag == elf.DT_FLAGS_1 }); i >= 0 {
			ents[i].val |= uint64(elf.DF_1_NODEFLIB)
		} else {
			ents = append(ents, dent{tag: elf.DT_FLAGS_1, val: uint64(elf.DF_1_NODEFLIB), origOff: -1})
		}
	}
	return ents
}

// planField plans an edit of fixed-size fields that stay where they are:
// EI_OSABI (one byte of the ELF header), the p_flags word of PT_GNU_STACK,
// or entries of .gnu.version (two bytes each, written as the one span from
// the first to the last that changes). The write is the commit: nothing
// moves, nothing else refers to these bytes, and a crash leaves the old or
// the new field.
func (f *File) planField(e *Edit) (*Plan, error) {
	noop := &Plan{Strategy: NoOp, OldSize: f.size, NewSize: f.size, f: f}
	var off uint64
	var data []byte
	var what string
	switch {
	case e.OSABI != nil:
		if f.Header.OSABI == *e.OSABI {
			return noop, nil
		}
		off, data, what = uint64(elf.EI_OSABI), []byte{byte(*e.OSABI)}, "EI_OSABI"
	case e.ExecStack != nil:
		i := slices.IndexFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_GNU_STACK })
		if i < 0 {
			return nil, ErrNoGnuStack
		}
		flags := f.Progs[i].Flags &^ elf.PF_X
		if *e.ExecStack {
			flags |= elf.PF_X
		}
		if flags == f.Progs[i].Flags {
			return noop, nil
		}
		field := uint64(4) // p_flags: second word of Elf64_Phdr, seventh of Elf32_Phdr
		if f.Header.Class == elf.ELFCLASS32 {
			field = 24
		}
		off = f.Header.Phoff + uint64(i)*uint64(f.Header.Phentsize) + field
		data = make([]byte, 4)
		f.order.PutUint32(data, uint32(flags))
		what = "PT_GNU_STACK p_flags"
	default:
		var err error
		if off, data, err = f.clearVersions(e.ClearSymbolVersion); err != nil {
			return nil, err
		}
		if data == nil {
			return noop, nil
		}
		what = ".gnu.version entries"
	}
	b := &builder{f: f}
	b.add(StepCommit, what, off, data)
	return b.finish(InPlace, f.size), nil
}

// clearVersions finds the .gnu.version entries (DT_VERSYM, one 16-bit
// index per dynamic symbol) of the symbols named in names that are not 1
// yet, and returns the span from the first to the last of them, with
// those set to 1; nil when none changes. It reads the dynamic symbol table
// and the version table, which clearing a version needs.
func (f *File) clearVersions(names []string) (uint64, []byte, error) {
	if !f.IsDynamic() {
		return 0, nil, ErrNotDynamic
	}
	versym, ok := f.dynVal(elf.DT_VERSYM)
	if !ok {
		return 0, nil, nil // no versions: nothing to clear
	}
	symtab, ok := f.dynVal(elf.DT_SYMTAB)
	if !ok {
		return 0, nil, formatErr(-1, "DT_VERSYM without DT_SYMTAB")
	}
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es = sym32Size
	}
	n, err := f.symbolCount(symtab, es)
	if err != nil {
		return 0, nil, fmt.Errorf("counting dynamic symbols: %w", err)
	}
	if n == 0 {
		return 0, nil, nil
	}
	soff, ok := f.vaddrToOff(symtab, n*es)
	if !ok {
		return 0, nil, formatErr(-1, "DT_SYMTAB 0x%x with %d symbols maps to no PT_LOAD", symtab, n)
	}
	voff, ok := f.vaddrToOff(versym, n*2)
	if !ok {
		return 0, nil, formatErr(-1, "DT_VERSYM 0x%x with %d entries maps to no PT_LOAD", versym, n)
	}
	syms, err := readAt(f.r, f.size, soff, n*es, "dynamic symbol table")
	if err != nil {
		return 0, nil, err
	}
	vers, err := readAt(f.r, f.size, voff, n*2, "symbol version table")
	if err != nil {
		return 0, nil, err
	}
	lo, hi := n, uint64(0)
	for i := uint64(1); i < n; i++ {
		name, _ := cstring(f.strtab, uint64(f.order.Uint32(syms[i*es:])))
		if !slices.Contains(names, name) || f.order.Uint16(vers[i*2:]) == 1 {
			continue
		}
		f.order.PutUint16(vers[i*2:], 1)
		lo, hi = min(lo, i), max(hi, i+1)
	}
	if lo >= hi {
		return 0, nil, nil
	}
	return voff + lo*2, vers[lo*2 : hi*2], nil
}

// checkKept: what an edit does not ask to change reads as before. EI_OSABI,
// PT_GNU_STACK, DT_DEBUG and DF_1_NODEFLIB, and every program header of a
// type no layout writes (PT_TLS, PT_GNU_RELRO, PT_GNU_EH_FRAME, the OS- and
// processor-specific ones): a step that strayed over the program header
// table (hygiene of a .dynstr that a mutated PT_LOAD mapped there) turned
// PT_GNU_STACK into a PT_TLS of garbage, and nothing else asked.
func checkKept(before, after *File, e *Edit) []string {
	var bad []string
	if e.OSABI == nil && after.Header.OSABI != before.Header.OSABI {
		bad = append(bad, fmt.Sprintf("EI_OSABI changed from %v to %v", before.Header.OSABI, after.Header.OSABI))
	}
	written := func(t elf.ProgType) bool {
		switch t {
		case elf.PT_NULL, elf.PT_LOAD, elf.PT_PHDR, elf.PT_INTERP, elf.PT_DYNAMIC, elf.PT_NOTE, elf.PT_GNU_PROPERTY:
			return true
		}
		return t == elf.PT_GNU_STACK && e.ExecStack != nil
	}
	// Where such a header describes bytes a region moves (a note the
	// linker typed otherwise), it moves with them: its place may change,
	// nothing else.
	kept := func(f *File) []elf.ProgHeader {
		var out []elf.ProgHeader
		for _, p := range f.Progs {
			if !written(p.Type) {
				p.Off, p.Vaddr, p.Paddr = 0, 0, 0
				out = append(out, p)
			}
		}
		slices.SortStableFunc(out, func(a, b elf.ProgHeader) int { return cmp.Compare(a.Type, b.Type) })
		return out
	}
	if kb, ka := kept(before), kept(after); !slices.Equal(kb, ka) {
		show := func(ps []elf.ProgHeader) string {
			var b strings.Builder
			for i, p := range ps {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%v %v 0x%x/0x%x", p.Type, p.Flags, p.Filesz, p.Memsz)
			}
			return b.String()
		}
		bad = append(bad, fmt.Sprintf("program headers no edit writes changed from [%s] to [%s]", show(kb), show(ka)))
	}
	if _, had := before.dynVal(elf.DT_DEBUG); !e.AddDebug {
		if _, has := after.dynVal(elf.DT_DEBUG); has != had {
			bad = append(bad, fmt.Sprintf("DT_DEBUG present %v, was %v", has, had))
		}
	}
	if !e.NoDefaultLib {
		fb, _ := before.dynVal(elf.DT_FLAGS_1)
		fa, _ := after.dynVal(elf.DT_FLAGS_1)
		if fb&uint64(elf.DF_1_NODEFLIB) != fa&uint64(elf.DF_1_NODEFLIB) {
			bad = append(bad, "DF_1_NODEFLIB changed")
		}
	}
	return bad
}

// checkFields reads back what the edit asked of the fields and entries of
// this file, for checkResult.
func checkFields(after *File, e *Edit) []string {
	var bad []string
	if e.OSABI != nil && after.Header.OSABI != *e.OSABI {
		bad = append(bad, fmt.Sprintf("EI_OSABI reads back as %v, want %v", after.Header.OSABI, *e.OSABI))
	}
	if e.ExecStack != nil {
		i := slices.IndexFunc(after.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_GNU_STACK })
		if i < 0 || (after.Progs[i].Flags&elf.PF_X != 0) != *e.ExecStack {
			bad = append(bad, "PT_GNU_STACK does not read back with the stack flag asked for")
		}
	}
	if len(e.ClearSymbolVersion) > 0 {
		if _, data, err := after.clearVersions(e.ClearSymbolVersion); err != nil || data != nil {
			bad = append(bad, fmt.Sprintf("symbol versions of %q not cleared (%v)", e.ClearSymbolVersion, err))
		}
	}
	if e.AddDebug {
		if _, ok := after.dynVal(elf.DT_DEBUG); !ok {
			bad = append(bad, "DT_DEBUG missing")
		}
	}
	if e.NoDefaultLib {
		if v, _ := after.dynVal(elf.DT_FLAGS_1); v&uint64(elf.DF_1_NODEFLIB) == 0 {
			bad = append(bad, "DF_1_NODEFLIB not set")
		}
	}
	// A renamed library's version requirement follows it: glibc asserts
	// that every vn_file names a loaded object.
	if len(e.ReplaceNeeded) > 0 && after.IsDynamic() {
		files, err := after.verneedFiles()
		if err != nil {
			bad = append(bad, err.Error())
		}
		needed := after.Needed()
		for _, r := range e.ReplaceNeeded {
			// A name RemoveNeeded also names is removed, not renamed
			// (removals come first, as in patchelf): nothing to follow.
			if r.Old != r.New && !slices.Contains(e.RemoveNeeded, r.Old) && slices.Contains(files, r.Old) && !slices.Contains(needed, r.Old) {
				bad = append(bad, fmt.Sprintf(".gnu.version_r still names %q", r.Old))
			}
		}
	}
	return bad
}

// verneedFiles returns the file names of the DT_VERNEED records
// (Elf_Verneed.vn_file): the libraries this file needs symbol versions
// from. The walk is bounded by DT_VERNEEDNUM and by the file.
func (f *File) verneedFiles() ([]string, error) {
	addr, ok := f.dynVal(elf.DT_VERNEED)
	if !ok {
		return nil, nil
	}
	num, _ := f.dynVal(elf.DT_VERNEEDNUM)
	num = min(num, uint64(f.size)/16)
	var out []string
	for i := uint64(0); i < num; i++ {
		off, ok := f.vaddrToOff(addr, 16)
		if !ok {
			return out, formatErr(-1, "DT_VERNEED record 0x%x maps to no PT_LOAD", addr)
		}
		b, err := readAt(f.r, f.size, off, 16, "DT_VERNEED record")
		if err != nil {
			return out, err
		}
		// A vn_file outside the string table names nothing (and no
		// rename can follow it); an empty string is a name like another.
		if name, ok := cstring(f.strtab, uint64(f.order.Uint32(b[4:]))); ok {
			out = append(out, name)
		}
		next := uint64(f.order.Uint32(b[12:]))
		if next == 0 {
			break
		}
		addr += next
	}
	return out, nil
}

// tableCopy is a dynamic-linking table rewritten by an edit: it goes into
// the region's carried bytes with the new .dynamic, whose entry tag points
// at it, so the program header table write that switches .dynamic switches
// the table too, and later regions carry it like the tables they move.
// Used for .gnu.version_r when a library is renamed (glibc's
// _dl_check_map_versions asserts that each vn_file names a loaded object,
// so DT_NEEDED and vn_file must never disagree on disk), and for the
// symbol and hash tables when dynamic symbols are renamed.
type tableCopy struct {
	tag     elf.DynTag      // the entry that points at it
	secType elf.SectionType // the section header that describes it
	addr    uint64          // the original's address
	data    []byte
}

// renamedVerneed returns the copy of the version-needed records a rename
// of DT_NEEDED entries needs, or nil when no vn_file names a renamed
// library (or the strings kept their offsets). ents are the planned
// entries with their final string offsets. It reads the records, which
// renaming a needed library requires.
func (f *File) renamedVerneed(e *Edit, ents []dent) (*tableCopy, error) {
	if len(e.ReplaceNeeded) == 0 || !f.IsDynamic() {
		return nil, nil
	}
	addr, ok := f.dynVal(elf.DT_VERNEED)
	if !ok {
		return nil, nil
	}
	// Where each renamed library's new name now lies.
	newOff := map[string]uint64{}
	for _, r := range e.ReplaceNeeded {
		for _, d := range ents {
			if d.tag == elf.DT_NEEDED && d.str == r.New {
				newOff[r.Old] = d.val
			}
		}
	}
	num, _ := f.dynVal(elf.DT_VERNEEDNUM)
	num = min(num, uint64(f.size)/16)
	type fix struct{ at, val uint64 }
	var fixes []fix
	end := addr
	a := addr
	for i := uint64(0); i < num; i++ {
		off, ok := f.vaddrToOff(a, 16)
		if !ok {
			return nil, formatErr(-1, "DT_VERNEED record 0x%x maps to no PT_LOAD", a)
		}
		b, err := readAt(f.r, f.size, off, 16, "DT_VERNEED record")
		if err != nil {
			return nil, err
		}
		cnt, file, aux, next := uint64(f.order.Uint16(b[2:])), uint64(f.order.Uint32(b[4:])), uint64(f.order.Uint32(b[8:])), uint64(f.order.Uint32(b[12:]))
		end = max(end, a+16)
		if name, ok := cstring(f.strtab, file); ok {
			if v, ok := newOff[name]; ok && v != file {
				fixes = append(fixes, fix{a - addr + 4, v})
			}
		}
		// The auxiliary records (Elf_Vernaux, 16 bytes) come along.
		x := a + aux
		for j := uint64(0); j < min(cnt, uint64(f.size)/16); j++ {
			xoff, ok := f.vaddrToOff(x, 16)
			if !ok {
				return nil, formatErr(-1, "DT_VERNEED aux record 0x%x maps to no PT_LOAD", x)
			}
			xb, err := readAt(f.r, f.size, xoff, 16, "DT_VERNEED aux record")
			if err != nil {
				return nil, err
			}
			end = max(end, x+16)
			n := uint64(f.order.Uint32(xb[12:]))
			if n == 0 {
				break
			}
			x += n
		}
		if next == 0 {
			break
		}
		a += next
	}
	if len(fixes) == 0 || end-addr > maxBlobMove {
		return nil, nil
	}
	off, ok := f.vaddrToOff(addr, end-addr)
	if !ok {
		return nil, formatErr(-1, "DT_VERNEED records 0x%x+0x%x map to no PT_LOAD", addr, end-addr)
	}
	data, err := readAt(f.r, f.size, off, end-addr, "DT_VERNEED records")
	if err != nil {
		return nil, err
	}
	data = bytes.Clone(data)
	for _, x := range fixes {
		f.order.PutUint32(data[x.at:], uint32(x.val))
	}
	return &tableCopy{tag: elf.DT_VERNEED, secType: elf.SHT_GNU_VERNEED, addr: addr, data: data}, nil
}
