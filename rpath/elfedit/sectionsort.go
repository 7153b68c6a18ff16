package elfedit

import (
	"cmp"
	"debug/elf"
	"slices"
)

// sortSections puts the section headers of a laid-out region edit in file
// offset order, as linkers write them and as patchelf keeps them, and
// renumbers what names a section by index: sh_link, and sh_info where it
// names one. The caller renumbers e_shstrndx and the symbol tables with
// pos (pos[j] is the new index of secs[j]).
//
// A region moves .interp and notes out of the program header table's way
// to the end of the file, and their headers would keep their low indices.
// patchelf up to 0.18 (nixpkgs' stdenv, Debian's 0.14.3) makes room for
// its own program header by walking the section headers in index order
// while they lie below the grown table, and stops at the first one that
// does not: at the moved .interp, leaving .gnu.hash under the grown table,
// which it overwrites ("_dl_setup_hash: Assertion ... failed" at the next
// start). Sorted headers keep a later patchelf run safe.
//
// ok is false when nothing is out of order, or when the file holds
// section indices elfedit does not renumber (SHT_SYMTAB_SHNDX, SHT_GROUP,
// extended numbering): those files keep their order.
func (f *File) sortSections(secs []Section) (sorted []Section, pos []int, ok bool) {
	order := make([]int, len(secs))
	for j := range order {
		order[j] = j
	}
	// Section 0 stays first; ties (SHT_NOBITS and empty sections share an
	// offset with their neighbours) keep their order.
	slices.SortStableFunc(order[min(1, len(order)):], func(a, b int) int {
		return cmp.Compare(secs[a].Offset, secs[b].Offset)
	})
	identity := true
	for j, k := range order {
		identity = identity && j == k
	}
	if identity || len(secs) >= int(elf.SHN_LORESERVE) {
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
