package elfedit

import (
	"debug/elf"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// Problem is one broken invariant found by Verify.
type Problem struct {
	// Rule is a stable identifier, e.g. "load-align".
	Rule string `json:"rule"`
	Msg  string `json:"message"`
}

func (p Problem) String() string { return p.Rule + ": " + p.Msg }

// Refused reports whether no edit is made over a file with p
// (refusedRules): the loaders refuse such a file, or map it other than its
// headers say. The verifier's other rules are broken by files that load,
// and an edit keeps them as they are.
func (p Problem) Refused() bool { return refusedRules[p.Rule] }

// VerifyFile reads the file at path and verifies it.
func VerifyFile(path string) ([]Problem, error) {
	f, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	return f.Verify(), nil
}

// Verify reads a file from r and verifies it.
func Verify(r io.ReaderAt, size int64) ([]Problem, error) {
	f, err := NewFile(r, size)
	if err != nil {
		return nil, err
	}
	return f.Verify(), nil
}

// Verify checks the invariants the loaders and binutils rely on (see the
// design notes): segment alignment and order, the program header table's
// place, the pre-5.18 AT_PHDR rule, a writable .dynamic that is its own
// (no other section in it, p_filesz = p_memsz), notes the loaders and the
// section headers read alike, no W+X segment, no empty search-path entry,
// and section headers that agree with the segments and keep off the
// headers. A file that NewFile read is already known to have a terminated
// dynamic section and in-bounds strings.
func (f *File) Verify() []Problem {
	var ps []Problem
	add := func(rule, format string, args ...any) {
		ps = append(ps, Problem{rule, printable.String(fmt.Sprintf(format, args...))})
	}
	if f.debugOnly {
		return nil
	}
	loads := f.verifyLoads(add)
	containing := func(off, n uint64) (elf.ProgHeader, bool) { return inOneLoad(loads, off, n) }
	f.verifyHeaderOverlap(add)
	f.verifyProgs(add, loads, containing)
	f.verifyNotes(add, containing)
	f.verifyDynamic(add, loads)
	f.verifySections(add)
	return ps
}

// problemFunc records a problem Verify finds.
type problemFunc = func(rule, format string, args ...any)

// verifyLoads checks each PT_LOAD (alignment, sizes, bounds, W+X) and
// their order, overlap and shared pages. It returns them.
func (f *File) verifyLoads(add problemFunc) []elf.ProgHeader {
	h := f.Header
	page := maxPageSize(h.Machine)
	loads := make([]elf.ProgHeader, 0, countLoads(f.Progs))
	for i, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		loads = append(loads, p)
		if p.Align > 1 && p.Vaddr%p.Align != p.Off%p.Align {
			add("load-align", "PT_LOAD[%d] p_vaddr 0x%x and p_offset 0x%x differ modulo p_align 0x%x", i, p.Vaddr, p.Off, p.Align)
		}
		if p.Align < page {
			add("load-page", "PT_LOAD[%d] p_align 0x%x is below the %v page size 0x%x", i, p.Align, h.Machine, page)
		}
		if p.Filesz > p.Memsz {
			add("load-size", "PT_LOAD[%d] p_filesz 0x%x exceeds p_memsz 0x%x", i, p.Filesz, p.Memsz)
		}
		if p.Off > uint64(f.size) || p.Filesz > uint64(f.size)-p.Off {
			add("load-bounds", "PT_LOAD[%d] file range 0x%x+0x%x lies past the end of the file", i, p.Off, p.Filesz)
		}
		if p.Flags&elf.PF_W != 0 && p.Flags&elf.PF_X != 0 {
			add("load-wx", "PT_LOAD[%d] is both writable and executable", i)
		}
	}
	for i := 1; i < len(loads); i++ {
		a, b := loads[i-1], loads[i]
		if b.Vaddr < a.Vaddr {
			add("load-order", "PT_LOAD at 0x%x comes after one at 0x%x", b.Vaddr, a.Vaddr)
		}
		if a.Vaddr < b.Vaddr+b.Memsz && b.Vaddr < a.Vaddr+a.Memsz {
			add("load-overlap", "PT_LOADs at 0x%x and 0x%x overlap in memory", a.Vaddr, b.Vaddr)
		} else if b.Vaddr >= a.Vaddr && alignUp(a.Vaddr+a.Filesz, minPage) > b.Vaddr/minPage*minPage {
			// glibc maps file bytes by whole pages: a shared page is
			// mapped twice, and since 2.35 an object whose first and last
			// segments share one is refused. 4 KiB is the smallest page.
			add("load-page-share", "PT_LOADs at 0x%x (file bytes to 0x%x) and 0x%x share a page", a.Vaddr, a.Vaddr+a.Filesz, b.Vaddr)
		}
	}
	return loads
}

// verifyHeaderOverlap checks that the ELF header, the program and section
// header tables, and the segments an edit rewrites in place (the
// interpreter's string, .dynamic) do not overlap: an edit that rewrites
// one would rewrite the other.
func (f *File) verifyHeaderOverlap(add problemFunc) {
	tables := f.headerRanges()
	for a := range tables {
		for b := a + 1; b < len(tables); b++ {
			if ta, tb := tables[a], tables[b]; ta.r.lo < ta.r.hi && tb.r.lo < tb.r.hi && ta.r.overlaps(tb.r) {
				add("header-overlap", "%s (0x%x+0x%x) overlaps %s (0x%x+0x%x)", ta.what, ta.r.lo, ta.r.hi-ta.r.lo, tb.what, tb.r.lo, tb.r.hi-tb.r.lo)
			}
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP && p.Type != elf.PT_DYNAMIC || p.Filesz == 0 || p.Off+p.Filesz < p.Off {
			continue
		}
		r := rng{p.Off, p.Off + p.Filesz}
		for _, t := range tables {
			if t.r.lo < t.r.hi && r.overlaps(t.r) {
				add("header-overlap", "%v (0x%x+0x%x) overlaps %s (0x%x+0x%x)", p.Type, p.Off, p.Filesz, t.what, t.r.lo, t.r.hi-t.r.lo)
			}
		}
	}
}

// verifyProgs checks the program header table's place (loaded, and for
// an executable at the first PT_LOAD's vaddr-offset: the pre-5.18
// AT_PHDR rule) and PT_PHDR, PT_INTERP and PT_DYNAMIC.
func (f *File) verifyProgs(add problemFunc, loads []elf.ProgHeader, containing func(off, n uint64) (elf.ProgHeader, bool)) {
	h := f.Header
	phSize := uint64(h.Phnum) * uint64(h.Phentsize)
	if len(loads) > 0 && (f.dynProg >= 0 || f.interpProg >= 0) {
		pl, ok := containing(h.Phoff, phSize)
		switch {
		case !ok:
			add("phdr-load", "program header table at 0x%x is in no PT_LOAD", h.Phoff)
		case f.isExecutable() && pl.Vaddr-pl.Off != loads[0].Vaddr-loads[0].Off:
			add("phdr-at-phdr", "program header table at 0x%x is mapped with a vaddr-offset of 0x%x, not the first PT_LOAD's 0x%x: kernels before 5.18 pass a wrong AT_PHDR", h.Phoff, pl.Vaddr-pl.Off, loads[0].Vaddr-loads[0].Off)
		}
	}
	for i, p := range f.Progs {
		switch p.Type {
		case elf.PT_PHDR:
			v, ok := f.offToVaddr(h.Phoff, phSize)
			if p.Off != h.Phoff || p.Filesz != phSize || (ok && p.Vaddr != v) {
				add("phdr-exact", "PT_PHDR (0x%x+0x%x at 0x%x) does not describe the program header table (0x%x+0x%x at 0x%x)", p.Off, p.Filesz, p.Vaddr, h.Phoff, phSize, v)
			}
			if i != 0 {
				add("phdr-first", "PT_PHDR is entry %d, not the first", i)
			}
		case elf.PT_INTERP:
			if _, ok := containing(p.Off, p.Filesz); !ok {
				add("interp-load", "PT_INTERP at 0x%x is in no PT_LOAD", p.Off)
			}
			// The interpreter's bytes are moved and rewritten by
			// p_filesz: one that runs on over other sections takes
			// them along.
			if p.Filesz != p.Memsz {
				add("interp-size", "PT_INTERP p_filesz 0x%x differs from p_memsz 0x%x", p.Filesz, p.Memsz)
			}
		case elf.PT_DYNAMIC:
			f.verifyDynamicSegment(add, i, p, containing)
		}
	}
}

// verifyDynamicSegment checks PT_DYNAMIC (index i): loaded, writable,
// mapped at its offset, and its own (its slots are rewritten in place up
// to p_filesz).
func (f *File) verifyDynamicSegment(add problemFunc, i int, p elf.ProgHeader, containing func(off, n uint64) (elf.ProgHeader, bool)) {
	pl, ok := containing(p.Off, p.Filesz)
	if !ok {
		add("dynamic-load", "PT_DYNAMIC at 0x%x is in no PT_LOAD", p.Off)
	} else if pl.Flags&elf.PF_W == 0 {
		add("dynamic-writable", "PT_DYNAMIC at 0x%x is in a read-only segment (glibc before 2.35 writes DT_DEBUG there)", p.Off)
	}
	if v, ok := f.offToVaddr(p.Off, p.Filesz); ok && v != p.Vaddr {
		add("dynamic-map", "PT_DYNAMIC p_vaddr 0x%x does not map to its p_offset 0x%x", p.Vaddr, p.Off)
	}
	if p.Filesz != p.Memsz {
		add("dynamic-size", "PT_DYNAMIC p_filesz 0x%x differs from p_memsz 0x%x", p.Filesz, p.Memsz)
	}
	if i != f.dynProg {
		return // the one the loader and the layouts use
	}
	for j, s := range f.Sections {
		if j > 0 && s.Type != elf.SHT_DYNAMIC && s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && s.Size > 0 &&
			(rng{s.Offset, s.Offset + s.Size}).overlaps(rng{p.Off, p.Off + p.Filesz}) {
			add("dynamic-overlap", "PT_DYNAMIC (0x%x+0x%x) overlaps section %d %s", p.Off, p.Filesz, j, s.Name)
		}
	}
}

// verifyDynamic checks .dynamic's entries: no tag the loaders keep one
// value of given twice (glibc, musl and this reader use the last, a tool
// that takes the first sees another file), every table address in a
// PT_LOAD, no empty search-path entry.
func (f *File) verifyDynamic(add problemFunc, loads []elf.ProgHeader) {
	var seen [len(singleTags)]int
	for _, d := range f.Dynamic[:max(f.dynLen, 0)] {
		if k := slices.Index(singleTags[:], d.Tag); k >= 0 {
			if seen[k]++; seen[k] == 2 {
				add("dynamic-duplicate", "%v appears more than once (the loaders use the last)", d.Tag)
			}
		}
	}
	if len(loads) > 0 {
		for _, tag := range pointerTags {
			v, ok := f.dynVal(tag)
			if !ok || v == 0 {
				continue
			}
			if !slices.ContainsFunc(loads, func(p elf.ProgHeader) bool { return v >= p.Vaddr && v-p.Vaddr < max(p.Memsz, p.Filesz) }) {
				add("dynamic-pointer", "%v 0x%x lies in no PT_LOAD", tag, v)
			}
		}
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if s, ok := f.dynString(tag); ok && s != "" && slices.Contains(strings.Split(s, ":"), "") {
			add("path-empty-entry", "%v %q has an empty entry (the current directory)", tag, s)
		}
	}
}

// sectionRanges returns the indices and file ranges of the non-empty
// sections keep accepts.
func (f *File) sectionRanges(keep func(int, Section) bool) ([]int, []rng) {
	var idx []int
	var rs []rng
	for i, s := range f.Sections {
		if s.Size > 0 && keep(i, s) {
			idx = append(idx, i)
			rs = append(rs, rng{s.Offset, s.Offset + s.Size})
		}
	}
	return idx, rs
}

// headerRange is one of the file's header tables and the bytes it takes.
type headerRange struct {
	what string
	r    rng
}

// headerRanges are the ELF header, the program header table and the
// section header table, as the ELF header places them.
func (f *File) headerRanges() []headerRange {
	h := f.Header
	return []headerRange{
		{"the ELF header", rng{0, uint64(f.ehdrSize())}},
		{"the program header table", rng{h.Phoff, h.Phoff + uint64(h.Phnum)*uint64(h.Phentsize)}},
		{"the section header table", rng{h.Shoff, h.Shoff + uint64(h.Shnum)*uint64(h.Shentsize)}},
	}
}

// dtRELR is DT_RELR (glibc 2.36, binutils 2.38), which debug/elf lacks.
const dtRELR elf.DynTag = 36

// pointerTags are the dynamic tags whose value is an address the loader
// reads or calls through.
var pointerTags = [...]elf.DynTag{elf.DT_PLTGOT, elf.DT_HASH, elf.DT_STRTAB, elf.DT_SYMTAB, elf.DT_RELA,
	elf.DT_INIT, elf.DT_FINI, elf.DT_REL, elf.DT_JMPREL, elf.DT_INIT_ARRAY, elf.DT_FINI_ARRAY,
	elf.DT_PREINIT_ARRAY, dtRELR, elf.DT_GNU_HASH, elf.DT_VERSYM, elf.DT_VERDEF, elf.DT_VERNEED}

// tableSections pairs the dynamic tags that locate a table with the
// section type that holds it.
var tableSections = [...]struct {
	tag elf.DynTag
	typ elf.SectionType
}{
	{elf.DT_SYMTAB, elf.SHT_DYNSYM}, {elf.DT_HASH, elf.SHT_HASH}, {elf.DT_GNU_HASH, elf.SHT_GNU_HASH},
	{elf.DT_VERSYM, elf.SHT_GNU_VERSYM}, {elf.DT_VERNEED, elf.SHT_GNU_VERNEED}, {elf.DT_VERDEF, elf.SHT_GNU_VERDEF},
	{elf.DT_INIT_ARRAY, elf.SHT_INIT_ARRAY}, {elf.DT_FINI_ARRAY, elf.SHT_FINI_ARRAY}, {elf.DT_PREINIT_ARRAY, elf.SHT_PREINIT_ARRAY},
}

// minPage is the smallest page size kernels use.
const minPage = 0x1000

// singleTags are the dynamic tags this package reads one value of.
var singleTags = [...]elf.DynTag{elf.DT_SONAME, elf.DT_RUNPATH, elf.DT_RPATH, elf.DT_STRTAB, elf.DT_STRSZ,
	elf.DT_SYMTAB, elf.DT_HASH, elf.DT_GNU_HASH, elf.DT_VERSYM, elf.DT_VERNEED, elf.DT_VERNEEDNUM, elf.DT_FLAGS_1}

// inOneLoad returns the PT_LOAD of loads whose file image holds off+n.
func inOneLoad(loads []elf.ProgHeader, off, n uint64) (elf.ProgHeader, bool) {
	for _, p := range loads {
		if off >= p.Off && off-p.Off <= p.Filesz && n <= p.Filesz-(off-p.Off) {
			return p, true
		}
	}
	return elf.ProgHeader{}, false
}

// noteHeadersDisagree returns the first problem verifyNotes finds, or nil.
// A note edit rebuilds PT_NOTE and SHT_NOTE headers from the notes they
// hold; when the input's own headers disagree about where its notes are,
// which note is which has no single answer, and the edit is refused rather
// than guessed.
func (f *File) noteHeadersDisagree() error {
	loads := make([]elf.ProgHeader, 0, countLoads(f.Progs))
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p)
		}
	}
	var first *Problem
	f.verifyNotes(func(rule, format string, args ...any) {
		if first == nil {
			first = &Problem{rule, fmt.Sprintf(format, args...)}
		}
	}, func(off, n uint64) (elf.ProgHeader, bool) { return inOneLoad(loads, off, n) })
	if first != nil {
		return formatErr(-1, "not editing notes: the note headers disagree (%s)", first)
	}
	return nil
}

// verifyNotes checks what the loaders and readelf need of notes: each
// PT_NOTE lies in one PT_LOAD's file image at the address that PT_LOAD
// gives it, is aligned 4 or 8, and holds whole notes; each allocated
// SHT_NOTE section lies in a PT_NOTE.
func (f *File) verifyNotes(add problemFunc, containing func(off, n uint64) (elf.ProgHeader, bool)) {
	var notes []elf.ProgHeader
	for i, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 {
			continue
		}
		notes = append(notes, p)
		if _, ok := containing(p.Off, p.Filesz); !ok {
			add("note-load", "PT_NOTE[%d] (0x%x+0x%x) is in no PT_LOAD", i, p.Off, p.Filesz)
		} else if v, ok := f.offToVaddr(p.Off, p.Filesz); ok && v != p.Vaddr {
			add("note-map", "PT_NOTE[%d] p_vaddr 0x%x does not map to its p_offset 0x%x", i, p.Vaddr, p.Off)
		}
		if p.Align != 4 && p.Align != 8 {
			add("note-align", "PT_NOTE[%d] p_align is 0x%x, not 4 or 8", i, p.Align)
		}
		// glibc reads the notes by p_memsz, the kernel and readelf by
		// p_filesz.
		if p.Memsz != p.Filesz {
			add("note-size", "PT_NOTE[%d] p_filesz 0x%x differs from p_memsz 0x%x", i, p.Filesz, p.Memsz)
		}
	}
	if _, err := f.allNotes(); err != nil {
		add("note-parse", "%v", err)
	}
	// Each note belongs to one section: note sections do not overlap.
	idx, rs := f.sectionRanges(func(_ int, s Section) bool { return s.Type == elf.SHT_NOTE })
	sweepOverlaps(rs, func(a, b int) bool {
		add("section-note", "note sections %d %s and %d %s overlap", idx[a], f.Sections[idx[a]].Name, idx[b], f.Sections[idx[b]].Name)
		return true
	})
	for i, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size == 0 {
			continue
		}
		if s.Flags&elf.SHF_ALLOC == 0 {
			// Unallocated notes lie outside what is loaded; one inside
			// a PT_NOTE or a PT_LOAD is a note the loaders see that the
			// section headers say they do not.
			inNote := slices.ContainsFunc(notes, func(p elf.ProgHeader) bool { return s.Offset < p.Off+p.Filesz && p.Off < s.Offset+s.Size })
			if _, inLoad := containing(s.Offset, s.Size); inNote || inLoad {
				add("section-note", "note section %d %s (0x%x+0x%x) is not allocated but lies in a loaded segment", i, s.Name, s.Offset, s.Size)
			}
			continue
		}
		if !slices.ContainsFunc(notes, func(p elf.ProgHeader) bool { return s.Offset >= p.Off && s.Offset+s.Size <= p.Off+alignUp(p.Filesz, 4) }) {
			add("section-note", "allocated note section %d %s (0x%x+0x%x) is in no PT_NOTE", i, s.Name, s.Offset, s.Size)
		}
	}
}

// verifySections checks the section headers: no two over the same bytes,
// names, places, and the sections of the dynamic tables.
func (f *File) verifySections(add problemFunc) {
	// Sections hold bytes of their own: two over the same bytes (a
	// header whose offset was changed) are rewritten, moved or cleared
	// as one and read as the other. In offset order, a section overlaps
	// an earlier one when it starts before the furthest end so far.
	idx, rs := f.sectionRanges(func(i int, s Section) bool { return i > 0 && s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL })
	sweepOverlaps(rs, func(a, b int) bool {
		add("section-overlap", "sections %d %s and %d %s overlap in the file", idx[a], f.Sections[idx[a]].Name, idx[b], f.Sections[idx[b]].Name)
		return false // one finding names the file
	})
	f.verifySectionNames(add)
	f.verifySectionPlaces(add)
	f.verifySectionTables(add)
}

// verifySectionNames checks the section name table: a string table inside
// the file, its own bytes, every name in it with its NUL. A name outside
// it reads as nothing today and as whatever a grown copy of the table
// puts there tomorrow.
func (f *File) verifySectionNames(add problemFunc) {
	h := f.Header
	if si := int(h.Shstrndx); si >= len(f.Sections) && len(f.Sections) > 0 {
		add("section-name", "e_shstrndx %d is past the section header table (%d sections)", si, len(f.Sections))
	} else if si > 0 && si < len(f.Sections) {
		st := f.Sections[si]
		tab := st.Size
		if st.Type != elf.SHT_STRTAB || st.Offset > uint64(f.size) || st.Size > uint64(f.size)-st.Offset {
			add("section-name", "the section name table (section %d, 0x%x+0x%x) is not a string table inside the file", si, st.Offset, st.Size)
		}
		if i := f.openName; i >= 0 {
			add("section-name", "section %d's name (at 0x%x) runs to the end of the section name table without a NUL", i, f.Sections[i].NameOff)
		}
		for i, s := range f.Sections {
			if uint64(s.NameOff) >= tab && (i > 0 || s.NameOff != 0) {
				add("section-name", "section %d's name offset 0x%x is outside the section name table (0x%x bytes)", i, s.NameOff, tab)
			}
			// Names read out of another section's bytes change when
			// that section does.
			if i > 0 && i != si && st.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && s.Size > 0 &&
				(rng{st.Offset, st.Offset + st.Size}).overlaps(rng{s.Offset, s.Offset + s.Size}) {
				add("section-name", "the section name table (0x%x+0x%x) overlaps section %d %s", st.Offset, st.Size, i, s.Name)
			}
		}
	}
}

// verifySectionPlaces checks each section: inside the file, off the
// headers (a section over them changes whenever they do), and, when
// allocated, at the offset its segment maps its address to.
func (f *File) verifySectionPlaces(add problemFunc) {
	headers := f.headerRanges()
	for i, s := range f.Sections {
		if i == 0 || s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		if s.Offset > uint64(f.size) || s.Size > uint64(f.size)-s.Offset {
			add("section-bounds", "section %d %s (0x%x+0x%x) lies past the end of the file", i, s.Name, s.Offset, s.Size)
			continue
		}
		for _, hd := range headers {
			if s.Size > 0 && (rng{s.Offset, s.Offset + s.Size}).overlaps(hd.r) {
				add("section-headers", "section %d %s (0x%x+0x%x) overlaps %s", i, s.Name, s.Offset, s.Size, hd.what)
			}
		}
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 {
			continue
		}
		if off, ok := f.vaddrToOff(s.Addr, s.Size); ok && off != s.Offset {
			add("section-segment", "section %d %s at 0x%x has offset 0x%x, but its segment maps that address to 0x%x", i, s.Name, s.Addr, s.Offset, off)
		}
	}
}

// verifySectionTables checks that the sections of .dynamic, .interp and
// the tables .dynamic points to are where those are.
func (f *File) verifySectionTables(add problemFunc) {
	if f.dynProg >= 0 {
		p := f.Progs[f.dynProg]
		for i, s := range f.Sections {
			if s.Type == elf.SHT_DYNAMIC && (s.Addr != p.Vaddr || s.Offset != p.Off) {
				add("section-dynamic", "section %d %s (0x%x at 0x%x) is not PT_DYNAMIC (0x%x at 0x%x)", i, s.Name, s.Offset, s.Addr, p.Off, p.Vaddr)
			}
		}
		// The tables the dynamic section points to are the sections of
		// their type: a DT_VERNEED aimed elsewhere (into .dynamic, in a
		// mutated file) is a table no layout knows to carry, and a
		// region that replaced the one it lay in left it dangling.
		for _, tt := range tableSections {
			v, ok := f.dynVal(tt.tag)
			if !ok || v == 0 {
				continue
			}
			some, at := false, false
			for _, s := range f.Sections {
				if s.Type == tt.typ && s.Flags&elf.SHF_ALLOC != 0 {
					some, at = true, at || s.Addr == v
				}
			}
			if some && !at {
				add("section-table", "%v 0x%x is the address of no %v section", tt.tag, v, tt.typ)
			}
		}
		for i, s := range f.Sections {
			if s.Type == elf.SHT_DYNSYM && int(s.Link) < len(f.Sections) {
				str := f.Sections[s.Link]
				if str.Addr != f.strAddr || str.Offset != f.strOff || str.Size < uint64(len(f.strtab)) {
					add("section-dynstr", "section %d %s links to string table 0x%x+0x%x, not DT_STRTAB 0x%x+0x%x", i, s.Name, str.Addr, str.Size, f.strAddr, len(f.strtab))
				}
			}
		}
	}
	if f.interpProg >= 0 {
		p := f.Progs[f.interpProg]
		for i, s := range f.Sections {
			if s.Name == ".interp" && (s.Addr != p.Vaddr || s.Offset != p.Off) {
				add("section-interp", "section %d .interp (0x%x at 0x%x) is not PT_INTERP (0x%x at 0x%x)", i, s.Offset, s.Addr, p.Off, p.Vaddr)
			}
		}
	}
}

// refusedRules are the verifier's rules an edit is never made over, even
// when the input already breaks them (Plan refuses such an input unless
// the edit changes nothing; checkResult refuses any rule a result breaks
// that its input did not): segments the loaders refuse or map
// other than their headers say (misaligned, out of order, overlapping, past
// the end of the file, more file bytes than memory), header tables that
// overlap, and a .dynamic that no PT_LOAD maps where it says. An edit
// written by file offset would change bytes the loader reads elsewhere, or
// not at all; verify rejects both input and result. Files with the other
// rules (load-page, load-wx, phdr-first, section-note…) exist in the wild
// and load; an edit keeps them as they were and adds none.
var refusedRules = map[string]bool{
	"load-align": true, "load-size": true, "load-bounds": true, "load-order": true,
	"load-overlap": true, "header-overlap": true, "dynamic-load": true, "dynamic-map": true,
}

// refusedProblem returns the first of ps whose rule is refused, nil if none.
func refusedProblem(ps []Problem) *Problem {
	for i := range ps {
		if refusedRules[ps[i].Rule] {
			return &ps[i]
		}
	}
	return nil
}

// checkResult verifies a planned result against the original, before,
// in which Verify found was: no invariant the original met may break, and
// the result must say what was asked.
func checkResult(before *File, was []Problem, after *File, e *Edit) error {
	had := map[string]bool{}
	for _, p := range was {
		had[p.Rule] = true
	}
	var bad []string
	for _, p := range after.Verify() {
		if !had[p.Rule] && !(p.Rule == "path-empty-entry" && e.EmptyEntries) {
			bad = append(bad, p.String())
		}
	}
	want := func(what string, got, exp string) {
		if got != exp {
			bad = append(bad, fmt.Sprintf("%s reads back as %q, want %q", what, got, exp))
		}
	}
	interp := before.Interp
	if e.Interpreter != nil {
		interp = *e.Interpreter
	}
	want("interpreter", after.Interp, interp)
	if e.Soname != nil {
		want("soname", after.Soname(), *e.Soname)
	}
	if e.SetPath != nil {
		tag := elf.DT_RUNPATH
		if e.Tag == TagRPath {
			tag = elf.DT_RPATH
		} else if e.Tag == TagKeep {
			if _, ok := after.RunPath(); !ok {
				tag = elf.DT_RPATH
			}
		}
		got, _ := after.dynString(tag)
		want(tag.String(), got, *e.SetPath)
	}
	// One entry of each tag set: the loaders read the last of a tag,
	// readelf shows each.
	count := func(tag elf.DynTag) int {
		n := 0
		for _, d := range after.Dynamic[:max(after.dynLen, 0)] {
			if d.Tag == tag {
				n++
			}
		}
		return n
	}
	if e.Soname != nil {
		if n := count(elf.DT_SONAME); n != 1 {
			bad = append(bad, fmt.Sprintf("DT_SONAME appears %d times", n))
		}
	}
	if e.SetPath != nil && e.Tag != TagKeep {
		want, other := elf.DT_RUNPATH, elf.DT_RPATH
		if e.Tag == TagRPath {
			want, other = other, want
		}
		if count(other) > 0 {
			bad = append(bad, fmt.Sprintf("%v still present", other))
		}
		if n := count(want); n != 1 {
			bad = append(bad, fmt.Sprintf("%v appears %d times", want, n))
		}
	}
	if e.RemovePath {
		if _, ok := after.RunPath(); ok {
			bad = append(bad, "DT_RUNPATH still present")
		}
		if _, ok := after.RPath(); ok {
			bad = append(bad, "DT_RPATH still present")
		}
	}
	// DT_NEEDED, in order: the names the original had with the edit
	// applied as desiredDyn applies it (removals, then replacements, then
	// additions first). A name written over another in place that reads
	// back wrong is caught here by position, not only by presence.
	if got, exp := after.Needed(), e.NeededAfter(before.Needed()); !slices.Equal(got, exp) {
		bad = append(bad, fmt.Sprintf("DT_NEEDED reads back as %q, want %q", got, exp))
	}
	bad = append(bad, checkNotes(before, after, e)...)
	// Every string of the original that was not edited must read the same.
	if sb, sa := before.Info(), after.Info(); e.Soname == nil && sb.Soname != sa.Soname {
		bad = append(bad, fmt.Sprintf("soname changed from %q to %q", sb.Soname, sa.Soname))
	}
	if e.SetPath == nil && !e.RemovePath {
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			b, okb := before.dynString(tag)
			a, oka := after.dynString(tag)
			if a != b || oka != okb {
				bad = append(bad, fmt.Sprintf("%v changed from %q to %q", tag, b, a))
			}
		}
	}
	if !had["section-name"] && !had["section-headers"] {
		bad = append(bad, checkSectionNames(before, after, e)...)
	}
	bad = append(bad, checkFields(after, e)...)
	bad = append(bad, checkKept(before, after, e)...)
	bad = append(bad, checkRename(before, after, e)...)
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrVerify, strings.Join(bad, "; "))
	}
	return nil
}

// checkSectionNames: every section name reads as before, as many times.
// A note edit may add its section's name, and take away a note section
// (a removed note's); nothing else renames a section (tools find sections
// by name: strip, objcopy, debuggers). Files whose names are unreadable
// to begin with (Verify's section-name, section-headers) are not asked.
func checkSectionNames(before, after *File, e *Edit) []string {
	count := func(f *File) map[string]int {
		m := make(map[string]int, len(f.Sections))
		for _, s := range f.Sections {
			m[s.Name]++
		}
		return m
	}
	was, now := count(before), count(after)
	var bad []string
	for name, n := range was {
		note := slices.ContainsFunc(before.Sections, func(s Section) bool { return s.Name == name && s.Type == elf.SHT_NOTE })
		if now[name] < n && !note {
			bad = append(bad, fmt.Sprintf("section name %q: %d sections before, %d after", name, n, now[name]))
		}
	}
	for name, n := range now {
		if n > was[name] && (e.SetNote == nil || name != e.SetNote.Section) {
			bad = append(bad, fmt.Sprintf("section name %q: %d sections before, %d after", name, was[name], n))
		}
	}
	slices.Sort(bad)
	return bad
}

// checkNotes verifies the notes of a planned result: SetNote is there once,
// loaded, with its descriptor; removed and stale derived notes are gone;
// every other note reads as before.
func checkNotes(before, after *File, e *Edit) []string {
	if e.SetNote == nil && len(e.RemoveNotes) == 0 && len(e.Derived) == 0 {
		return nil
	}
	nb, err := before.Notes()
	if err != nil {
		return nil // an edit that needed them has failed already
	}
	na, err := after.Notes()
	if err != nil {
		return []string{fmt.Sprintf("notes do not read back: %v", err)}
	}
	ib, ia := before.Info(), after.Info()
	same := func(a, b *string) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
	derived := ib.Interpreter != ia.Interpreter || !slices.Equal(ib.Needed, ia.Needed) || !same(ib.RunPath, ia.RunPath) || !same(ib.RPath, ia.RPath)
	gone := slices.Clone(e.RemoveNotes)
	if derived {
		gone = append(gone, e.Derived...)
	}
	var bad []string
	key := func(n Note) string {
		return fmt.Sprintf("%q/0x%x/%v/%q/%x", n.Owner, n.Type, n.Loaded, n.Section, n.Desc)
	}
	var want, got []string
	for _, n := range nb {
		if slices.Contains(gone, n.NoteID) || e.SetNote != nil && n.NoteID == e.SetNote.NoteID {
			continue
		}
		want = append(want, key(n))
	}
	if s := e.SetNote; s != nil {
		w := Note{NoteID: s.NoteID, Desc: s.Desc, Section: s.Section, Loaded: true}
		if len(after.Sections) == 0 {
			w.Section = ""
		}
		want = append(want, key(w))
	}
	for _, n := range na {
		got = append(got, key(n))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		bad = append(bad, fmt.Sprintf("notes read back as %v, want %v", got, want))
	}
	return bad
}

// countLoads is the number of PT_LOAD headers of progs: the lists of them
// are made in one allocation, which on a file of tens of thousands of
// segments is most of what a verification allocates.
func countLoads(progs []elf.ProgHeader) int {
	n := 0
	for _, p := range progs {
		if p.Type == elf.PT_LOAD {
			n++
		}
	}
	return n
}
