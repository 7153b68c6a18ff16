package elfedit

import (
	"cmp"
	"debug/elf"
	"slices"
)

// sortSections puts the section headers of a laid-out region edit in file
// offset order, as linkers write them, and renumbers sh_link and sh_info;
// the caller renumbers e_shstrndx and the symbol tables with pos (pos[j]
// is the new index of secs[j]). Unsorted, a later patchelf run (up to
// 0.18) could overwrite a table left under its grown program header table:
// its walk of the headers in index order stops at the first one past that
// table. ok is false when the disorder is no danger (an
// ET_EXEC file, which patchelf sorts itself, or one walkStopsShort finds
// harmless), or when the file holds section indices elfedit does not
// renumber (SHT_SYMTAB_SHNDX, SHT_GROUP, extended numbering).
func (f *File) sortSections(secs []Section, phnum int) (sorted []Section, pos []int, ok bool) {
	if f.Header.Type == elf.ET_EXEC || !walkStopsShort(secs, uint64(len(f.rawEhdr)), uint64(f.phdrSize()), phnum) {
		return nil, nil, false
	}
	order := make([]int, len(secs))
	for j := range order {
		order[j] = j
	}
	// Section 0 stays first; ties (SHT_NOBITS and empty sections share an
	// offset with their neighbours) keep their order.
	slices.SortStableFunc(order[min(1, len(order)):], func(a, b int) int {
		return cmp.Compare(secs[a].Offset, secs[b].Offset)
	})
	if len(secs) >= int(elf.SHN_LORESERVE) {
		return nil, nil, false
	}
	for _, s := range secs {
		if s.Type == elf.SHT_SYMTAB_SHNDX || s.Type == elf.SHT_GROUP {
			return nil, nil, false
		}
	}
	if len(f.rawEhdr) > 0 && f.rawShnum() == 0 && len(f.Sections) > 0 {
		return nil, nil, false
	}
	pos = make([]int, len(secs))
	for newJ, j := range order {
		pos[j] = newJ
	}
	remap := func(i uint32) uint32 {
		if int(i) < len(pos) {
			return uint32(pos[i])
		}
		return i
	}
	sorted = make([]Section, len(secs))
	for newJ, j := range order {
		s := secs[j]
		s.Link = remap(s.Link)
		if s.Flags&elf.SHF_INFO_LINK != 0 || s.Type == elf.SHT_REL || s.Type == elf.SHT_RELA {
			s.Info = remap(s.Info)
		}
		sorted[newJ] = s
	}
	return sorted, pos, true
}

// walkStopsShort reports whether patchelf up to 0.18, run on a file with
// these section headers and phnum program headers, would leave a section
// under the program header table it grows. Its rewriteSectionsLibrary
// puts the table right after the ELF header (ehdr bytes) with room for
// phnum + (SHT_NOTE sections) + 1 entries of phent bytes, and moves the
// sections it finds by walking the headers from index 1 while sh_offset
// lies at or below that end: a header further on with a lower offset is
// never reached, and its section is overwritten. (Later patchelf releases
// look at every header.)
func walkStopsShort(secs []Section, ehdr, phent uint64, phnum int) bool {
	notes := 0
	for _, s := range secs {
		if s.Type == elf.SHT_NOTE {
			notes++
		}
	}
	end := ehdr + uint64(phnum+notes+1)*phent
	stopped := false
	for _, s := range secs[min(1, len(secs)):] {
		if s.Offset > end {
			stopped = true
		} else if stopped {
			return true
		}
	}
	return false
}

// identity reports a section map that changes no index.
func identity(secMap []int) bool {
	for i, j := range secMap {
		if i != j {
			return false
		}
	}
	return true
}
