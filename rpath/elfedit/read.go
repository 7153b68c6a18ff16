package elfedit

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
)

// Sizes of the ELF records, per class (gABI).
const (
	ehdr32Size = 52
	ehdr64Size = 64
	phdr32Size = 32
	phdr64Size = 56
	shdr32Size = 40
	shdr64Size = 64
	dyn32Size  = 8
	dyn64Size  = 16
	sym32Size  = 16
	sym64Size  = 24

	// maxPhnum is the largest e_phnum we accept. PN_XNUM (0xffff) means the
	// real count lives in section 0; no linker emits that for files we edit.
	maxPhnum = 0xfffe
)

// Header is the ELF file header, widened to 64 bits for both classes.
type Header struct {
	Class      elf.Class
	Data       elf.Data
	OSABI      elf.OSABI
	ABIVersion uint8
	Type       elf.Type
	Machine    elf.Machine
	Entry      uint64
	Phoff      uint64 // e_phoff: file offset of the program header table
	Shoff      uint64 // e_shoff: file offset of the section header table, 0 if none
	Flags      uint32
	Phentsize  uint16
	Phnum      int
	Shentsize  uint16
	Shnum      int // the real count, also when e_shnum overflowed into section 0
	Shstrndx   int
}

// Section is one section header. Sections are optional for the loaders; they
// are kept consistent for strip, objcopy and debuggers.
type Section struct {
	Name      string
	NameOff   uint32
	Type      elf.SectionType
	Flags     elf.SectionFlag
	Addr      uint64
	Offset    uint64
	Size      uint64
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64
}

// Dyn is one entry of the dynamic section.
type Dyn struct {
	Tag elf.DynTag
	Val uint64
}

// File is an ELF file whose headers and dynamic-linking data have been read.
// It keeps the io.ReaderAt it was read from for the lazy reads that planning
// an in-place overwrite needs (the dynamic symbol table).
type File struct {
	Header   Header
	Progs    []elf.ProgHeader
	Sections []Section // nil when the file has no section header table

	// Dynamic holds every slot of PT_DYNAMIC, including the terminating
	// DT_NULL and any spare DT_NULL slots after it.
	Dynamic []Dyn
	// Interp is the content of PT_INTERP up to its first NUL.
	Interp string

	r       io.ReaderAt
	closer  io.Closer
	size    int64
	order   binary.ByteOrder
	rawEhdr []byte

	dynProg    int // index of PT_DYNAMIC in Progs, -1 if none
	interpProg int // index of PT_INTERP in Progs, -1 if none
	dynLen     int // number of entries before the first DT_NULL
	strtab     []byte
	noStrings  bool   // strtab is not read (OpenDynamic)
	strOff     uint64 // file offset of DT_STRTAB
	strAddr    uint64 // DT_STRTAB
	region     *regionInfo
	// recovery is what the file needs written to be as its interrupted
	// edit leaves it (NewFile), nil when it ends in no journal.
	recovery *recovery
	// journal is the trailer of the journal the file ends in, read as
	// it is (NewFile); nil when it ends in none, or was read to edit.
	journal   *trailer
	debugOnly bool // separate debug object: contents are NOBITS
	// keepOld makes plans without hygiene steps (Options.KeepOldSections),
	// left out before the steps are merged: a commit that took in the
	// hygiene writes after it would still clear the old bytes.
	keepOld bool
	// openName is the first section whose name runs to the end of the
	// section name table without a NUL (-1 if none): it reads as nothing
	// now, and as something else once the table grows (Verify).
	openName int

	// loads indexes the PT_LOADs for vaddrToOff and offToVaddr.
	loads loadIndex

	// notes memoizes allNotes. A File is not for concurrent use.
	notes struct {
		read bool
		all  []parsedNote
		err  error
	}
}

// Size is the size of the file in bytes.
func (f *File) Size() int64 { return f.size }

// ByteOrder is the file's byte order.
func (f *File) ByteOrder() binary.ByteOrder { return f.order }

// Open reads the ELF headers and dynamic-linking data of the file at path.
// The caller must Close the returned file. To read many files, use a
// Buffers' Open: it lends the same buffers again.
func Open(path string) (*File, error) { return (*Buffers)(nil).Open(path) }

// Close closes the file opened by Open; it does nothing for a File made by
// NewFile. The string table goes with it (it may be scratch lent by the
// Buffers the file was opened with, see File.scratch, and lent next to
// another file): what was read from the file before Close (Info, the
// headers) stays, and what a File reads from its string table after
// Close (names, paths) reads as empty, never as another file's.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	f.strtab = nil
	return err
}

// prefetchTables reads the file's dynamic-linking tables (the dynamic
// symbols, their names, versions and hash table: what a plan reads) in one
// read, when the section headers place them together, as linkers do, at
// the start of the file: a library whose tables outgrow the 64 KiB head
// took a read past the cache for its string table and a window or two for
// the rest, in each phase. Tables spread out (more than a window of other
// bytes among them) or over maxPrefetch are read as before.
func (f *File) prefetchTables(c *readCache) {
	lo, hi, tables := uint64(f.size), uint64(0), uint64(0)
	strtab := -1
	for _, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM {
			strtab = int(s.Link)
		}
	}
	for i, s := range f.Sections {
		switch {
		case s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0:
			continue
		case s.Type == elf.SHT_DYNSYM, s.Type == elf.SHT_GNU_HASH, s.Type == elf.SHT_HASH,
			s.Type == elf.SHT_GNU_VERSYM, s.Type == elf.SHT_GNU_VERNEED, s.Type == elf.SHT_GNU_VERDEF,
			i == strtab && s.Type == elf.SHT_STRTAB:
		default:
			continue
		}
		if s.Offset > uint64(f.size) || s.Size > uint64(f.size)-s.Offset {
			return // the reads that need it say what is wrong
		}
		lo, hi, tables = min(lo, s.Offset), max(hi, s.Offset+s.Size), tables+s.Size
	}
	if tables == 0 || hi-lo > maxPrefetch || hi-lo > tables+windowSize {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head != nil && hi > uint64(len(c.head)) {
		c.prefetch(int64(lo), int64(hi))
	}
}

// maxPrefetch bounds what prefetchTables reads at once: the largest
// scratch class, which a pool lends again.
const maxPrefetch = 4 << 20

// scratch returns n zero bytes that live as long as the file is open: lent
// by the Buffers it was opened with, if any (a File made by NewFile, or
// opened without Buffers, allocates). Nothing that outlives the file may
// hold them: Prepare copies what a kept plan writes, and a plan still tied
// to the file is refused once the file is closed (Plan.apply).
func (f *File) scratch(n uint64) []byte {
	if c, ok := f.r.(*readCache); ok {
		return c.lend(n, true)
	}
	return make([]byte, n)
}

// scratchToRead is scratch that the caller reads over, all of it, before
// using it: it is not cleared first, and may hold another file's bytes
// until then.
func (f *File) scratchToRead(n uint64) []byte {
	if c, ok := f.r.(*readCache); ok {
		return c.lend(n, false)
	}
	return make([]byte, n)
}

// readScratch is readAt into scratch.
func (f *File) readScratch(off, n uint64, what string) ([]byte, error) {
	if err := inFile(f.size, off, n, what); err != nil {
		return nil, err
	}
	buf := f.scratchToRead(n)
	if err := readInto(f.r, buf, off, what); err != nil {
		return nil, err
	}
	return buf, nil
}

// readFull is readAt into b, a buffer the caller has.
func (f *File) readFull(b []byte, off uint64, what string) error {
	if err := inFile(f.size, off, uint64(len(b)), what); err != nil {
		return err
	}
	return readInto(f.r, b, off, what)
}

// inFile refuses a range that overflows or lies past the end of a file
// of the given size.
func inFile(size int64, off, n uint64, what string) error {
	if off > uint64(size) || n > uint64(size)-off {
		return formatErr(int64(min(off, uint64(size))), "%s: range 0x%x+0x%x lies past the end of the file (size 0x%x)", what, off, n, size)
	}
	return nil
}

// readInto fills b with the bytes at off, which the caller has checked lie
// within the file.
func readInto(r io.ReaderAt, b []byte, off uint64, what string) error {
	if _, err := r.ReadAt(b, int64(off)); err != nil && !(errors.Is(err, io.EOF) && len(b) == 0) {
		return fmt.Errorf("%s: reading 0x%x bytes at 0x%x: %w", what, len(b), off, err)
	}
	return nil
}

// readAt reads n bytes at off, refusing ranges that overflow or lie past the
// end of the file before allocating anything (the shape of the standard
// library's internal/saferio: a lying size ends in an error, not a huge make).
func readAt(r io.ReaderAt, size int64, off, n uint64, what string) ([]byte, error) {
	if err := inFile(size, off, n, what); err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if err := readInto(r, buf, off, what); err != nil {
		return nil, err
	}
	return buf, nil
}

// NewFile reads the headers and dynamic-linking data of the ELF file of the
// given size that r reads from, as the loader maps it. A file that ends in
// the journal of an edit a killed process left unfinished (journal.go) is
// read as it is, its journal only noted (Interrupted); NewFileToEdit reads
// it as that edit leaves it.
func NewFile(r io.ReaderAt, size int64) (*File, error) {
	f, err := newFile(r, size)
	if err != nil {
		return nil, err
	}
	if _, planned := r.(*overlay); !planned {
		if f.journal, err = readTrailer(r, size, f.contentEnd); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// contentEnd is where the file's ELF contents end: the furthest end of its
// ELF header (e_ehsize, when it says more than the class's), its program
// and section header tables, its segments' file bytes and its sections'
// bytes (SHT_NOBITS aside). The loader maps nothing past it.
func (f *File) contentEnd() int64 {
	end := uint64(f.ehdrSize())
	if len(f.rawEhdr) == int(end) {
		// e_ehsize lies 12 bytes before the header's end in both classes.
		end = max(end, uint64(f.order.Uint16(f.rawEhdr[end-12:])))
	}
	grow := func(off, n uint64) {
		if off+n < off {
			end = ^uint64(0) >> 1
			return
		}
		end = max(end, off+n)
	}
	if f.Header.Phnum > 0 {
		grow(f.Header.Phoff, uint64(f.Header.Phnum)*uint64(f.Header.Phentsize))
	}
	if f.Header.Shnum > 0 {
		grow(f.Header.Shoff, uint64(f.Header.Shnum)*uint64(f.Header.Shentsize))
	}
	for _, p := range f.Progs {
		grow(p.Off, p.Filesz)
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS {
			grow(s.Offset, s.Size)
		}
	}
	return int64(min(end, ^uint64(0)>>1))
}

// NewFileToEdit is NewFile for a file about to be planned: a file that
// ends in the journal of an edit a killed process left unfinished is read
// as that edit leaves it, finished or undone, and a plan made from it
// writes that state first. Only an edit may read a file so: what the
// journal says is not what the loader maps until the edit writes it.
func NewFileToEdit(r io.ReaderAt, size int64) (*File, error) {
	f, err := newFile(r, size)
	if errors.Is(err, ErrNotELF) {
		return nil, err
	}
	var end func() int64 // unknown when the headers did not read
	if err == nil {
		end = f.contentEnd
	}
	j, jerr := readJournal(r, size, end)
	if jerr != nil {
		return nil, jerr
	}
	if j == nil {
		return f, err
	}
	rec, err := j.recover(r)
	if err != nil {
		return nil, err
	}
	g, err := newFile(rec.view(r, size), rec.size)
	if err != nil {
		return nil, fmt.Errorf("the file as the journal of an interrupted edit at 0x%x leaves it: %w", j.at, err)
	}
	g.recovery = rec
	return g, nil
}

// Interrupted reports whether the file ends in the journal of an edit a
// killed process left unfinished, and where: at is where the journal
// starts, size the bytes it takes. The File reads the bytes as they are
// (the loader ignores what lies past its segments); the next edit
// finishes or undoes that edit. Always false for a file read with
// NewFileToEdit, which reads the state the edit leaves.
func (f *File) Interrupted() (at, size int64, ok bool) {
	if f.journal == nil {
		return 0, 0, false
	}
	return f.journal.at, f.size - f.journal.at, true
}

// InterruptedNote says, for a reader of the file, that it ends in the
// journal of an interrupted edit (Interrupted); "" when it does not.
func (f *File) InterruptedNote() string {
	at, n, ok := f.Interrupted()
	if !ok {
		return ""
	}
	return fmt.Sprintf("ends in the journal of an interrupted edit (%d bytes at 0x%x): shown as the loader maps it; the next edit finishes or undoes that edit", n, at)
}

func newFile(r io.ReaderAt, size int64) (*File, error) {
	f := &File{r: r, size: size, dynProg: -1, interpProg: -1, openName: -1}
	if err := f.readHeader(); err != nil {
		return nil, err
	}
	if err := f.readProgs(); err != nil {
		return nil, err
	}
	if err := f.readSections(); err != nil {
		return nil, err
	}
	f.debugOnly = f.isDebugObject()
	if f.debugOnly {
		return f, nil
	}
	if err := f.readInterp(); err != nil {
		return nil, err
	}
	if err := f.readDynamic(); err != nil {
		return nil, err
	}
	f.region = f.findRegion()
	return f, nil
}

func (f *File) readHeader() error {
	ident, err := readAt(f.r, f.size, 0, elf.EI_NIDENT, "ELF identification")
	if err != nil {
		if _, ok := err.(*FormatError); !ok {
			return err
		}
		// Shorter than the identification: a file that starts with the
		// magic is a truncated ELF file (a bad input to report), anything
		// else is not ELF (passed over).
		if magic, merr := readAt(f.r, f.size, 0, 4, "ELF magic"); merr != nil || !bytes.Equal(magic, []byte(elf.ELFMAG)) {
			return ErrNotELF
		}
		return err
	}
	if !bytes.Equal(ident[:4], []byte(elf.ELFMAG)) {
		return ErrNotELF
	}
	h := &f.Header
	h.Class = elf.Class(ident[elf.EI_CLASS])
	h.Data = elf.Data(ident[elf.EI_DATA])
	h.OSABI = elf.OSABI(ident[elf.EI_OSABI])
	h.ABIVersion = ident[elf.EI_ABIVERSION]
	switch h.Data {
	case elf.ELFDATA2LSB:
		f.order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		f.order = binary.BigEndian
	default:
		return formatErr(elf.EI_DATA, "unknown ELF data encoding %d", h.Data)
	}
	if ident[elf.EI_VERSION] != byte(elf.EV_CURRENT) {
		return formatErr(elf.EI_VERSION, "unknown ELF version %d", ident[elf.EI_VERSION])
	}
	var hsize uint64
	switch h.Class {
	case elf.ELFCLASS32:
		hsize = ehdr32Size
	case elf.ELFCLASS64:
		hsize = ehdr64Size
	default:
		return formatErr(elf.EI_CLASS, "unknown ELF class %d", h.Class)
	}
	raw, err := readAt(f.r, f.size, 0, hsize, "ELF header")
	if err != nil {
		return err
	}
	f.rawEhdr = raw
	o := f.order
	h.Type = elf.Type(o.Uint16(raw[16:]))
	h.Machine = elf.Machine(o.Uint16(raw[18:]))
	var phnum, shnum, shstrndx uint16
	if h.Class == elf.ELFCLASS64 {
		h.Entry = o.Uint64(raw[24:])
		h.Phoff = o.Uint64(raw[32:])
		h.Shoff = o.Uint64(raw[40:])
		h.Flags = o.Uint32(raw[48:])
		h.Phentsize = o.Uint16(raw[54:])
		phnum = o.Uint16(raw[56:])
		h.Shentsize = o.Uint16(raw[58:])
		shnum = o.Uint16(raw[60:])
		shstrndx = o.Uint16(raw[62:])
	} else {
		h.Entry = uint64(o.Uint32(raw[24:]))
		h.Phoff = uint64(o.Uint32(raw[28:]))
		h.Shoff = uint64(o.Uint32(raw[32:]))
		h.Flags = o.Uint32(raw[36:])
		h.Phentsize = o.Uint16(raw[42:])
		phnum = o.Uint16(raw[44:])
		h.Shentsize = o.Uint16(raw[46:])
		shnum = o.Uint16(raw[48:])
		shstrndx = o.Uint16(raw[50:])
	}
	if phnum > maxPhnum {
		return formatErr(0, "extended program header numbering (e_phnum 0x%x) is not supported", phnum)
	}
	h.Phnum = int(phnum)
	h.Shnum = int(shnum)
	h.Shstrndx = int(shstrndx)
	if h.Phnum > 0 && h.Phentsize != f.phdrSize() {
		return formatErr(0, "e_phentsize %d, want %d", h.Phentsize, f.phdrSize())
	}
	return nil
}

func (f *File) ehdrSize() uint16 {
	if f.Header.Class == elf.ELFCLASS64 {
		return ehdr64Size
	}
	return ehdr32Size
}

func (f *File) phdrSize() uint16 {
	if f.Header.Class == elf.ELFCLASS64 {
		return phdr64Size
	}
	return phdr32Size
}

func (f *File) shdrSize() uint16 {
	if f.Header.Class == elf.ELFCLASS64 {
		return shdr64Size
	}
	return shdr32Size
}

func (f *File) dynSize() uint64 {
	if f.Header.Class == elf.ELFCLASS64 {
		return dyn64Size
	}
	return dyn32Size
}

func (f *File) readProgs() error {
	h := &f.Header
	if h.Phnum == 0 {
		return nil
	}
	raw, err := readAt(f.r, f.size, h.Phoff, uint64(h.Phnum)*uint64(h.Phentsize), "program header table")
	if err != nil {
		return err
	}
	f.Progs = make([]elf.ProgHeader, h.Phnum)
	for i := range f.Progs {
		f.Progs[i] = f.decodeProg(raw[i*int(h.Phentsize):])
		p := &f.Progs[i]
		off := int64(h.Phoff) + int64(i)*int64(h.Phentsize)
		switch p.Type {
		case elf.PT_DYNAMIC:
			if f.dynProg < 0 {
				f.dynProg = i
			}
		case elf.PT_INTERP:
			if f.interpProg >= 0 {
				return formatErr(off, "second PT_INTERP")
			}
			f.interpProg = i
		case elf.PT_LOAD:
			if p.Align > 1 && p.Align&(p.Align-1) != 0 {
				return formatErr(off, "PT_LOAD p_align 0x%x is not a power of two", p.Align)
			}
		}
	}
	f.loads = buildLoadIndex(f.Progs)
	if ix := &f.loads; (!ix.byVaddr || !ix.byOff) && len(ix.loads) > maxScannedLoads {
		return formatErr(int64(h.Phoff), "%d PT_LOAD segments that overlap or are out of order are not plausible", len(ix.loads))
	}
	return nil
}

func (f *File) decodeProg(b []byte) elf.ProgHeader {
	o := f.order
	if f.Header.Class == elf.ELFCLASS64 {
		return elf.ProgHeader{
			Type: elf.ProgType(o.Uint32(b[0:])), Flags: elf.ProgFlag(o.Uint32(b[4:])),
			Off: o.Uint64(b[8:]), Vaddr: o.Uint64(b[16:]), Paddr: o.Uint64(b[24:]),
			Filesz: o.Uint64(b[32:]), Memsz: o.Uint64(b[40:]), Align: o.Uint64(b[48:]),
		}
	}
	return elf.ProgHeader{
		Type: elf.ProgType(o.Uint32(b[0:])), Off: uint64(o.Uint32(b[4:])),
		Vaddr: uint64(o.Uint32(b[8:])), Paddr: uint64(o.Uint32(b[12:])),
		Filesz: uint64(o.Uint32(b[16:])), Memsz: uint64(o.Uint32(b[20:])),
		Flags: elf.ProgFlag(o.Uint32(b[24:])), Align: uint64(o.Uint32(b[28:])),
	}
}

func (f *File) readSections() error {
	h := &f.Header
	if h.Shoff == 0 {
		h.Shnum, h.Shstrndx = 0, 0
		return nil
	}
	if h.Shentsize != f.shdrSize() {
		return formatErr(0, "e_shentsize %d, want %d", h.Shentsize, f.shdrSize())
	}
	if h.Shnum == 0 || h.Shstrndx == int(elf.SHN_XINDEX) {
		// Extended numbering: the real values live in section 0.
		raw, err := readAt(f.r, f.size, h.Shoff, uint64(h.Shentsize), "section header 0")
		if err != nil {
			return err
		}
		s0 := f.decodeSection(raw)
		if h.Shnum == 0 {
			if s0.Size > uint64(f.size)/uint64(h.Shentsize) {
				return formatErr(int64(h.Shoff), "section count 0x%x does not fit in the file", s0.Size)
			}
			h.Shnum = int(s0.Size)
		}
		if h.Shstrndx == int(elf.SHN_XINDEX) {
			h.Shstrndx = int(s0.Link)
		}
	}
	if h.Shnum == 0 {
		return nil
	}
	raw, err := readAt(f.r, f.size, h.Shoff, uint64(h.Shnum)*uint64(h.Shentsize), "section header table")
	if err != nil {
		return err
	}
	f.Sections = make([]Section, h.Shnum)
	for i := range f.Sections {
		f.Sections[i] = f.decodeSection(raw[i*int(h.Shentsize):])
	}
	// Section names are a convenience (verifier messages, debug-object
	// detection); a broken .shstrtab leaves them empty rather than failing.
	if h.Shstrndx > 0 && h.Shstrndx < len(f.Sections) {
		s := f.Sections[h.Shstrndx]
		if s.Type != elf.SHT_NOBITS {
			if names, err := readAt(f.r, f.size, s.Offset, s.Size, "section name table"); err == nil {
				for i := range f.Sections {
					var ok bool
					f.Sections[i].Name, ok = cstring(names, uint64(f.Sections[i].NameOff))
					if !ok && f.openName < 0 && uint64(f.Sections[i].NameOff) < uint64(len(names)) {
						f.openName = i
					}
				}
			}
		}
	}
	return nil
}

func (f *File) decodeSection(b []byte) Section {
	o := f.order
	if f.Header.Class == elf.ELFCLASS64 {
		return Section{
			NameOff: o.Uint32(b[0:]), Type: elf.SectionType(o.Uint32(b[4:])),
			Flags: elf.SectionFlag(o.Uint64(b[8:])), Addr: o.Uint64(b[16:]),
			Offset: o.Uint64(b[24:]), Size: o.Uint64(b[32:]), Link: o.Uint32(b[40:]),
			Info: o.Uint32(b[44:]), Addralign: o.Uint64(b[48:]), Entsize: o.Uint64(b[56:]),
		}
	}
	return Section{
		NameOff: o.Uint32(b[0:]), Type: elf.SectionType(o.Uint32(b[4:])),
		Flags: elf.SectionFlag(o.Uint32(b[8:])), Addr: uint64(o.Uint32(b[12:])),
		Offset: uint64(o.Uint32(b[16:])), Size: uint64(o.Uint32(b[20:])), Link: o.Uint32(b[24:]),
		Info: o.Uint32(b[28:]), Addralign: uint64(o.Uint32(b[32:])), Entsize: uint64(o.Uint32(b[36:])),
	}
}

// isDebugObject reports a separate debug object (objcopy --only-keep-debug):
// its allocated sections are NOBITS, so the program headers describe bytes
// the file does not have.
// objcopy --only-keep-debug turns every allocated section but the notes into
// NOBITS; a library with no code has no .text to look at, so all of them
// are checked.
func (f *File) isDebugObject() bool {
	alloc := 0
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOTE || s.Size == 0 {
			continue
		}
		if s.Type != elf.SHT_NOBITS || s.Name == ".bss" || s.Name == ".tbss" {
			if s.Type != elf.SHT_NOBITS {
				return false
			}
			continue
		}
		alloc++
	}
	return alloc > 0
}

// cstring returns the NUL-terminated string at off in tab.
func cstring(tab []byte, off uint64) (string, bool) {
	if off >= uint64(len(tab)) {
		return "", false
	}
	end := bytes.IndexByte(tab[off:], 0)
	if end < 0 {
		return "", false
	}
	return string(tab[off : off+uint64(end)]), true
}

func (f *File) readInterp() error {
	if f.interpProg < 0 {
		return nil
	}
	p := f.Progs[f.interpProg]
	if p.Filesz == 0 || p.Filesz > 4096 {
		return formatErr(int64(p.Off), "PT_INTERP size 0x%x is not plausible", p.Filesz)
	}
	b, err := readAt(f.r, f.size, p.Off, p.Filesz, "PT_INTERP")
	if err != nil {
		return err
	}
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return formatErr(int64(p.Off), "PT_INTERP is not NUL-terminated")
	}
	f.Interp = string(b[:i])
	return nil
}

// vaddrToOff maps the n bytes at virtual address addr to a file offset
// through the PT_LOAD that holds them in its file image.
//
// A range may run on into the next PT_LOADs when they continue it both in
// memory and in the file: patchelf 0.14 lays out non-PIE executables that
// way (new pages below the first segment, .dynstr across three segments),
// and nixpkgs is full of files it patched.
func (f *File) vaddrToOff(addr, n uint64) (uint64, bool) {
	ix := f.loadIx()
	start := 0
	if ix.byVaddr {
		// Only the segments whose image ends at or after addr can hold
		// it, and they start there in header order.
		start = sort.Search(len(ix.loads), func(k int) bool {
			p := &f.Progs[ix.loads[k]]
			return p.Vaddr+p.Filesz >= addr
		})
	}
	for k := start; k < len(ix.loads); k++ {
		p := f.Progs[ix.loads[k]]
		if ix.byVaddr && p.Vaddr > addr {
			break
		}
		if addr < p.Vaddr || addr-p.Vaddr > p.Filesz {
			continue
		}
		if n <= p.Filesz-(addr-p.Vaddr) {
			return p.Off + (addr - p.Vaddr), true
		}
		// Follow contiguous segments for the rest of the range.
		rest := n - (p.Filesz - (addr - p.Vaddr))
		endV, endO := p.Vaddr+p.Filesz, p.Off+p.Filesz
		for _, j := range ix.loads[k+1:] {
			q := f.Progs[j]
			if q.Vaddr != endV || q.Off != endO {
				break
			}
			if rest <= q.Filesz {
				return p.Off + (addr - p.Vaddr), true
			}
			rest -= q.Filesz
			endV, endO = q.Vaddr+q.Filesz, q.Off+q.Filesz
		}
	}
	return 0, false
}

// offToVaddr maps a file offset to the virtual address a PT_LOAD gives it.
func (f *File) offToVaddr(off, n uint64) (uint64, bool) {
	ix := f.loadIx()
	start := 0
	if ix.byOff {
		start = sort.Search(len(ix.loads), func(k int) bool {
			p := &f.Progs[ix.loads[k]]
			return p.Off+p.Filesz >= off
		})
	}
	for _, i := range ix.loads[start:] {
		p := &f.Progs[i]
		if ix.byOff && p.Off > off {
			break
		}
		if off >= p.Off && off-p.Off <= p.Filesz && n <= p.Filesz-(off-p.Off) {
			return p.Vaddr + (off - p.Off), true
		}
	}
	return 0, false
}

// loadIndex lists the PT_LOADs (indices into Progs, in header order), so
// that vaddrToOff and offToVaddr find an address by binary search rather
// than by a scan of every program header: a lookup per version record
// scanning them all is quadratic in a hostile file's PT_LOADs. byVaddr
// (byOff) says the segments' file images follow each other in memory (in
// the file) in header order without overlapping, as linkers lay them out;
// where they do not, lookups scan them all, and a file with more than
// maxScannedLoads of them is refused when read (readProgs).
type loadIndex struct {
	n       int // len(Progs) it was built for
	loads   []int
	byVaddr bool
	byOff   bool
}

// maxScannedLoads bounds the PT_LOADs of a file whose segments overlap
// or are out of order: files have a handful.
const maxScannedLoads = 256

// loadIx returns the index of f.Progs, built again if Progs was replaced.
func (f *File) loadIx() *loadIndex {
	if f.loads.n != len(f.Progs) || f.loads.loads == nil && len(f.Progs) > 0 {
		f.loads = buildLoadIndex(f.Progs)
	}
	return &f.loads
}

func buildLoadIndex(progs []elf.ProgHeader) loadIndex {
	ix := loadIndex{n: len(progs), loads: []int{}, byVaddr: true, byOff: true}
	var last *elf.ProgHeader
	for i := range progs {
		p := &progs[i]
		if p.Type != elf.PT_LOAD {
			continue
		}
		ix.loads = append(ix.loads, i)
		if p.Vaddr+p.Filesz < p.Vaddr {
			ix.byVaddr = false
		}
		if p.Off+p.Filesz < p.Off {
			ix.byOff = false
		}
		if last != nil {
			ix.byVaddr = ix.byVaddr && last.Vaddr+last.Filesz <= p.Vaddr
			ix.byOff = ix.byOff && last.Off+last.Filesz <= p.Off
		}
		last = p
	}
	return ix
}

func (f *File) readDynamic() error {
	if f.dynProg < 0 {
		return nil
	}
	p := f.Progs[f.dynProg]
	es := f.dynSize()
	if p.Filesz == 0 && p.Memsz == 0 {
		// An empty PT_DYNAMIC (a linker script that keeps the header but
		// no .dynamic: patchelf's tests/empty-note, contiguous-note-
		// sections) describes no dynamic linking; the loader finds no
		// entries there either. The file is read as having none.
		f.dynProg = -1
		return nil
	}
	if p.Filesz < es {
		return formatErr(int64(p.Off), "PT_DYNAMIC size 0x%x holds no entry", p.Filesz)
	}
	raw, err := readAt(f.r, f.size, p.Off, p.Filesz-p.Filesz%es, "PT_DYNAMIC")
	if err != nil {
		return err
	}
	n := len(raw) / int(es)
	f.Dynamic = make([]Dyn, n)
	f.dynLen = -1
	for i := range n {
		d := f.decodeDyn(raw[i*int(es):])
		f.Dynamic[i] = d
		if d.Tag == elf.DT_NULL && f.dynLen < 0 {
			f.dynLen = i
		}
	}
	if f.dynLen < 0 {
		return formatErr(int64(p.Off), "dynamic section has no DT_NULL terminator")
	}
	strtab, hasStrtab := f.dynVal(elf.DT_STRTAB)
	strsz, hasStrsz := f.dynVal(elf.DT_STRSZ)
	if !hasStrtab {
		for _, d := range f.Dynamic[:f.dynLen] {
			if isStringTag(d.Tag) {
				return formatErr(int64(p.Off), "%v without DT_STRTAB", d.Tag)
			}
		}
		return nil
	}
	if !hasStrsz {
		return formatErr(int64(p.Off), "DT_STRTAB without DT_STRSZ")
	}
	off, ok := f.vaddrToOff(strtab, strsz)
	if !ok {
		return formatErr(int64(p.Off), "DT_STRTAB 0x%x (size 0x%x) maps to no PT_LOAD", strtab, strsz)
	}
	if f.noStrings {
		f.strOff, f.strAddr = off, strtab
		return nil
	}
	switch r := f.r.(type) {
	case *overlay:
		f.strtab, _ = r.view(int64(off), int64(strsz))
	case *readCache:
		if r.editing {
			f.prefetchTables(r)
		}
		f.strtab, _ = r.view(int64(off), int64(strsz))
	}
	if f.strtab == nil {
		if f.strtab, err = f.readScratch(off, strsz, "dynamic string table"); err != nil {
			return err
		}
	}
	f.strOff, f.strAddr = off, strtab
	for i, d := range f.Dynamic[:f.dynLen] {
		if isStringTag(d.Tag) {
			if _, ok := cstring(f.strtab, d.Val); !ok {
				return formatErr(int64(p.Off)+int64(i)*int64(es), "%v string offset 0x%x is outside the string table or not NUL-terminated", d.Tag, d.Val)
			}
		}
	}
	return nil
}

func (f *File) decodeDyn(b []byte) Dyn {
	if f.Header.Class == elf.ELFCLASS64 {
		return Dyn{Tag: elf.DynTag(int64(f.order.Uint64(b))), Val: f.order.Uint64(b[8:])}
	}
	return Dyn{Tag: elf.DynTag(int32(f.order.Uint32(b))), Val: uint64(f.order.Uint32(b[4:]))}
}

// isStringTag reports dynamic tags whose value is an offset into DT_STRTAB.
func isStringTag(t elf.DynTag) bool {
	switch t {
	case elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH,
		elf.DT_AUXILIARY, elf.DT_FILTER, elf.DT_CONFIG, elf.DT_DEPAUDIT, elf.DT_AUDIT:
		return true
	}
	return false
}

// dynVal returns the value of the last entry with the tag: of a tag given
// twice, the loaders (glibc's and musl's tables of dynamic entries by tag,
// patchelf's scan) keep the last, and so does this reader, so that what it
// reports (RUNPATH, the string table) is what the loader uses. Verify
// names such files (dynamic-duplicate).
func (f *File) dynVal(tag elf.DynTag) (uint64, bool) {
	var v uint64
	found := false
	for _, d := range f.Dynamic[:max(f.dynLen, 0)] {
		if d.Tag == tag {
			v, found = d.Val, true
		}
	}
	return v, found
}

// dynString returns the string of the last entry with the tag.
func (f *File) dynString(tag elf.DynTag) (string, bool) {
	v, ok := f.dynVal(tag)
	if !ok {
		return "", false
	}
	s, _ := cstring(f.strtab, v)
	return s, true
}

// IsDynamic reports whether the file has a dynamic section.
func (f *File) IsDynamic() bool { return f.dynProg >= 0 && !f.debugOnly }
