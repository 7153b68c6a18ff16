package patchelf

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
)

// The checks of this file give patchelf's messages for the files patchelf
// rejects, so that scripts (and patchelf's tests/invalid-elf.sh) see the
// words they expect. patchelf reads a file through its section headers;
// elfedit reads it through its program headers and checks more, with
// messages that name offsets, for whatever these checks let through. They
// read headers and the sections an option uses, never the whole file.

// maxSectionRead bounds what a check reads of one section (.dynamic,
// .dynstr, .gnu.version_r, a hash table header): beyond it the section is
// left to elfedit's own bounded reads.
const maxSectionRead = 64 << 20

// sectionHeader is one raw section header.
type sectionHeader struct {
	name                            string
	nameOff                         uint32
	typ                             elf.SectionType
	addr, off, size, align, entsize uint64
	link                            uint32
}

// elfShape is what the header checks learned: enough to check the sections
// the options use.
type elfShape struct {
	r        io.ReaderAt
	size     int64
	class    elf.Class
	bo       binary.ByteOrder
	sections []sectionHeader // nil without a section header table
}

// checkPatchelfHeader gives patchelf's messages for the files patchelf
// rejects by their ELF header and section headers, in the order patchelf
// checks.
func checkPatchelfHeader(r io.ReaderAt, size int64) (*elfShape, error) {
	const ehdr32, ehdr64 = 52, 64
	if size < ehdr32 {
		return nil, pfErr("missing ELF header")
	}
	var h [ehdr64]byte
	n, _ := r.ReadAt(h[:min(size, ehdr64)], 0)
	if n < ehdr32 {
		return nil, pfErr("missing ELF header")
	}
	if string(h[:4]) != elf.ELFMAG {
		return nil, pfErr("not an ELF executable")
	}
	if elf.Version(h[elf.EI_VERSION]) != elf.EV_CURRENT {
		return nil, pfErr("unsupported ELF version")
	}
	class := elf.Class(h[elf.EI_CLASS])
	if class != elf.ELFCLASS32 && class != elf.ELFCLASS64 {
		return nil, pfErr("ELF executable is not 32 or 64 bit")
	}
	var bo binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return nil, pfErr("wrong ELF type")
	}
	if class == elf.ELFCLASS64 && n < ehdr64 {
		return nil, pfErr("missing ELF header")
	}
	if t := elf.Type(bo.Uint16(h[16:])); t != elf.ET_EXEC && t != elf.ET_DYN {
		return nil, pfErr("wrong ELF type")
	}
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum, shstrndx uint64
	if class == elf.ELFCLASS64 {
		phoff, shoff = bo.Uint64(h[32:]), bo.Uint64(h[40:])
		phentsize, phnum = uint64(bo.Uint16(h[54:])), uint64(bo.Uint16(h[56:]))
		shentsize, shnum = uint64(bo.Uint16(h[58:])), uint64(bo.Uint16(h[60:]))
		shstrndx = uint64(bo.Uint16(h[62:]))
	} else {
		phoff, shoff = uint64(bo.Uint32(h[28:])), uint64(bo.Uint32(h[32:]))
		phentsize, phnum = uint64(bo.Uint16(h[42:])), uint64(bo.Uint16(h[44:]))
		shentsize, shnum = uint64(bo.Uint16(h[46:])), uint64(bo.Uint16(h[48:]))
		shstrndx = uint64(bo.Uint16(h[50:]))
	}
	if phoff > uint64(size) || phnum*phentsize > uint64(size)-phoff {
		return nil, pfErr("program header table out of bounds")
	}
	// patchelf also refuses files without section headers; elfedit does
	// not need them, so neither do we.
	if shnum > 0 && (shoff > uint64(size) || shnum*shentsize > uint64(size)-shoff) {
		return nil, pfErr("section header table out of bounds")
	}
	if shnum > 0 && shstrndx >= shnum {
		return nil, pfErr("string table index out of bounds")
	}
	wantPh, wantSh := uint64(56), uint64(64)
	if class == elf.ELFCLASS32 {
		wantPh, wantSh = 32, 40
	}
	if phentsize != wantPh {
		return nil, pfErr("program headers have wrong size")
	}
	sh := &elfShape{r: r, size: size, class: class, bo: bo}
	if shnum == 0 {
		return sh, nil
	}
	if shentsize != wantSh {
		return nil, pfErr("section headers have wrong size")
	}
	raw := make([]byte, shnum*shentsize)
	if _, err := r.ReadAt(raw, int64(shoff)); err != nil {
		return nil, pfErr("section header table out of bounds")
	}
	for i := uint64(0); i < shnum; i++ {
		sh.sections = append(sh.sections, sh.decodeSection(raw[i*shentsize:]))
	}
	// The section name string table.
	strs := sh.sections[shstrndx]
	if strs.size > uint64(size) || strs.off > uint64(size)-strs.size {
		return nil, pfErr("data region extends past file end")
	}
	if strs.size == 0 {
		return nil, pfErr("string table size is zero")
	}
	names := make([]byte, strs.size)
	if _, err := r.ReadAt(names, int64(strs.off)); err != nil {
		return nil, pfErr("data region extends past file end")
	}
	if names[len(names)-1] != 0 {
		return nil, pfErr("string table is not zero terminated")
	}
	for i := range sh.sections {
		s := &sh.sections[i]
		if uint64(s.nameOff) >= strs.size {
			return nil, pfErr("section name offset out of bounds")
		}
		name, _, _ := bytes.Cut(names[s.nameOff:], []byte{0})
		s.name = string(name)
	}
	return sh, nil
}

func (sh *elfShape) decodeSection(b []byte) sectionHeader {
	o := sh.bo
	if sh.class == elf.ELFCLASS64 {
		return sectionHeader{nameOff: o.Uint32(b), typ: elf.SectionType(o.Uint32(b[4:])), addr: o.Uint64(b[16:]),
			off: o.Uint64(b[24:]), size: o.Uint64(b[32:]), link: o.Uint32(b[40:]), align: o.Uint64(b[48:]), entsize: o.Uint64(b[56:])}
	}
	return sectionHeader{nameOff: o.Uint32(b), typ: elf.SectionType(o.Uint32(b[4:])), addr: uint64(o.Uint32(b[12:])),
		off: uint64(o.Uint32(b[16:])), size: uint64(o.Uint32(b[20:])), link: o.Uint32(b[24:]), align: uint64(o.Uint32(b[32:])), entsize: uint64(o.Uint32(b[36:]))}
}

// section returns the section named name, or nil.
func (sh *elfShape) section(name string) *sectionHeader {
	for i := range sh.sections {
		if sh.sections[i].name == name {
			return &sh.sections[i]
		}
	}
	return nil
}

// contents reads a section that has file contents, with patchelf's
// messages for one that lies outside the file or is misaligned for its
// entries (align: the natural alignment of what it holds, 0 for bytes).
func (sh *elfShape) contents(s *sectionHeader, align uint64) ([]byte, error) {
	if s.typ == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.off > uint64(sh.size) || s.size > uint64(sh.size)-s.off {
		return nil, pfErr("data offset extends past file end")
	}
	if align > 1 && s.off%align != 0 {
		return nil, pfErr("section content is not naturally aligned")
	}
	if s.size > maxSectionRead {
		return nil, nil
	}
	b := make([]byte, s.size)
	if _, err := sh.r.ReadAt(b, int64(s.off)); err != nil {
		return nil, pfErr("data offset extends past file end")
	}
	return b, nil
}

// word is the size of an address of the file's class.
func (sh *elfShape) word() uint64 {
	if sh.class == elf.ELFCLASS64 {
		return 8
	}
	return 4
}

// checkOps gives patchelf's messages for what the options would read
// through the section headers: .dynamic and .dynstr for every option
// that reads or changes the dynamic section, .gnu.version_r for
// --replace-needed, the hash tables for --rename-dynamic-symbols. It also
// warns, as patchelf does when it rewrites sections, about symbols that
// refer to a section without a name.
func (sh *elfShape) checkOps(o *patchelfOpts, stderr io.Writer) error {
	if sh.sections == nil {
		return nil
	}
	dynOp := o.printNeeded || o.printRPath || o.printSoname || o.setSoname != nil || o.shrinkRPath || o.removeRPath ||
		o.setRPath != nil || o.addRPath != nil || o.addDebugTag || o.noDefaultLib || o.renameSymbols != "" ||
		len(o.addNeeded)+len(o.removeNeeded)+len(o.replaceNeeded)+len(o.clearSymbolVersion) > 0
	if !dynOp {
		return nil
	}
	dynSec := sh.section(".dynamic")
	if dynSec == nil {
		return nil
	}
	dyn, err := sh.contents(dynSec, sh.word())
	if err != nil || dyn == nil {
		return err
	}
	es := 2 * sh.word()
	var dynstr []byte
	if s := sh.section(".dynstr"); s != nil {
		if dynstr, err = sh.contents(s, 0); err != nil {
			return err
		}
	}
	terminated := false
	for off := uint64(0); off+es <= uint64(len(dyn)); off += es {
		tag, val := sh.dynEntry(dyn[off:])
		if tag == elf.DT_NULL {
			terminated = true
			break
		}
		if dynstr == nil {
			continue
		}
		switch tag {
		case elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH:
			if val >= uint64(len(dynstr)) {
				return pfErr("string table index out of bounds")
			}
			if dynstr[len(dynstr)-1] != 0 {
				return pfErr("string table is not NUL-terminated")
			}
		}
	}
	if !terminated {
		// patchelf's words for writing entries past the end of .dynamic.
		return pfErr("setSubstr: write extends past end of section (.dynamic has no DT_NULL entry)")
	}
	if len(o.replaceNeeded) > 0 && dynstr != nil {
		if err := sh.checkVerneed(dynstr); err != nil {
			return err
		}
	}
	if o.renameSymbols != "" {
		if err := sh.checkHashHeaders(); err != nil {
			return err
		}
	}
	if o.setRPath != nil || o.addRPath != nil || o.removeRPath || o.shrinkRPath || o.setSoname != nil ||
		len(o.addNeeded)+len(o.removeNeeded)+len(o.replaceNeeded) > 0 {
		sh.warnUnnamed(stderr)
	}
	return nil
}

func (sh *elfShape) dynEntry(b []byte) (elf.DynTag, uint64) {
	if sh.class == elf.ELFCLASS64 {
		return elf.DynTag(sh.bo.Uint64(b)), sh.bo.Uint64(b[8:])
	}
	return elf.DynTag(sh.bo.Uint32(b)), uint64(sh.bo.Uint32(b[4:]))
}

// checkVerneed walks .gnu.version_r, whose file names --replace-needed
// must follow, and checks that they lie in .dynstr.
func (sh *elfShape) checkVerneed(dynstr []byte) error {
	s := sh.section(".gnu.version_r")
	if s == nil {
		return nil
	}
	b, err := sh.contents(s, 4)
	if err != nil || b == nil {
		return err
	}
	for off, n := uint64(0), 0; off+16 <= uint64(len(b)) && n < len(b)/16; n++ {
		if file := uint64(sh.bo.Uint32(b[off+4:])); file >= uint64(len(dynstr)) {
			return pfErr("string table index out of bounds")
		}
		next := uint64(sh.bo.Uint32(b[off+12:]))
		if next == 0 {
			break
		}
		off += next
	}
	return nil
}

// checkHashHeaders checks that the headers of .gnu.hash and .hash describe
// tables that fit in their sections.
func (sh *elfShape) checkHashHeaders() error {
	if s := sh.section(".gnu.hash"); s != nil {
		b, err := sh.contents(s, 4)
		if err != nil || b == nil {
			return err
		}
		if len(b) < 16 {
			return pfErr(".gnu.hash table header out of range")
		}
		nbuckets, bloom := uint64(sh.bo.Uint32(b)), uint64(sh.bo.Uint32(b[8:]))
		if nbuckets == 0 || bloom == 0 || 16+bloom*sh.word()+nbuckets*4 > uint64(len(b)) {
			return pfErr(".gnu.hash table header out of range")
		}
	}
	if s := sh.section(".hash"); s != nil {
		b, err := sh.contents(s, 4)
		if err != nil || b == nil {
			return err
		}
		if len(b) < 8 {
			return pfErr(".hash table header out of range")
		}
		nbucket, nchain := uint64(sh.bo.Uint32(b)), uint64(sh.bo.Uint32(b[4:]))
		if 8+(nbucket+nchain)*4 > uint64(len(b)) {
			return pfErr(".hash table header out of range")
		}
	}
	return nil
}

// warnUnnamed warns about symbols that refer to a section without a name,
// as patchelf does when it rewrites the sections around them. It reads
// the symbol tables only when such a section exists.
func (sh *elfShape) warnUnnamed(stderr io.Writer) {
	unnamed := map[uint64]bool{}
	for i, s := range sh.sections {
		if i > 0 && s.typ != elf.SHT_NULL && s.name == "" {
			unnamed[uint64(i)] = true
		}
	}
	if len(unnamed) == 0 {
		return
	}
	es := uint64(24)
	if sh.class == elf.ELFCLASS32 {
		es = 16
	}
	for _, s := range sh.sections {
		if s.typ != elf.SHT_SYMTAB && s.typ != elf.SHT_DYNSYM {
			continue
		}
		b, err := sh.contents(&s, 0)
		if err != nil || b == nil {
			continue
		}
		for off := uint64(0); off+es <= uint64(len(b)); off += es {
			shndx := uint64(sh.bo.Uint16(b[off+6:])) // Elf64_Sym.st_shndx
			if sh.class == elf.ELFCLASS32 {
				shndx = uint64(sh.bo.Uint16(b[off+14:])) // Elf32_Sym.st_shndx
			}
			if unnamed[shndx] {
				fmt.Fprintf(stderr, "warning: symbol table entry refers to an unnamed section (index %d)\n", shndx)
				return
			}
		}
	}
}
