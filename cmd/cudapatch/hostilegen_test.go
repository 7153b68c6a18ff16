package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// An ELF64 little-endian file rebuilt from a real one, for the hostile-input
// suite: the program or section header table is replaced by one appended
// at the end that claims tens of thousands of entries, or a table's range
// by one that loops over other bytes. Every input stays a file a reader
// accepts as far as it reads, so that the walks behind the headers run.

const (
	ehdrSize  = 64
	phentSize = 56
	shentSize = 64
	dynSize   = 16
)

// hostileELF is a parsed copy of a 64-bit little-endian ELF file.
type hostileELF struct {
	b     []byte
	progs []elf.Prog64
	ef    *elf.File
}

func newHostileELF(t testing.TB, orig []byte) *hostileELF {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(orig))
	require.NoError(t, err)
	require.Equal(t, elf.ELFCLASS64, ef.Class)
	require.Equal(t, elf.ELFDATA2LSB, ef.Data)
	h := &hostileELF{b: bytes.Clone(orig), ef: ef}
	phoff := binary.LittleEndian.Uint64(orig[32:])
	phnum := int(binary.LittleEndian.Uint16(orig[56:]))
	for i := range phnum {
		var p elf.Prog64
		_, err := binary.Decode(orig[phoff+uint64(i)*phentSize:], binary.LittleEndian, &p)
		require.NoError(t, err)
		h.progs = append(h.progs, p)
	}
	return h
}

// appendBlock appends b at an 8-aligned offset and returns the offset.
func (h *hostileELF) appendBlock(b []byte) uint64 {
	for len(h.b)%8 != 0 {
		h.b = append(h.b, 0)
	}
	off := uint64(len(h.b))
	h.b = append(h.b, b...)
	return off
}

// setProgs appends progs as the new program header table (the old one
// stays where it is, unreferenced) and points the ELF header at it.
func (h *hostileELF) setProgs(t testing.TB, progs []elf.Prog64) {
	t.Helper()
	require.Less(t, len(progs), 0xffff)
	var buf bytes.Buffer
	for _, p := range progs {
		require.NoError(t, binary.Write(&buf, binary.LittleEndian, p))
	}
	off := h.appendBlock(buf.Bytes())
	binary.LittleEndian.PutUint64(h.b[32:], off)
	binary.LittleEndian.PutUint16(h.b[56:], uint16(len(progs)))
}

// setSections appends shdrs as the section header table, keeping the
// string table index.
func (h *hostileELF) setSections(t testing.TB, shdrs []elf.Section64) {
	t.Helper()
	require.Less(t, len(shdrs), 0xff00)
	var buf bytes.Buffer
	for _, s := range shdrs {
		require.NoError(t, binary.Write(&buf, binary.LittleEndian, s))
	}
	off := h.appendBlock(buf.Bytes())
	binary.LittleEndian.PutUint64(h.b[40:], off)
	binary.LittleEndian.PutUint16(h.b[60:], uint16(len(shdrs)))
}

// sections reads the original section headers.
func (h *hostileELF) sections(t testing.TB) []elf.Section64 {
	t.Helper()
	shoff := binary.LittleEndian.Uint64(h.b[40:])
	shnum := int(binary.LittleEndian.Uint16(h.b[60:]))
	var out []elf.Section64
	for i := range shnum {
		var s elf.Section64
		_, err := binary.Decode(h.b[shoff+uint64(i)*shentSize:], binary.LittleEndian, &s)
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

func (h *hostileELF) prog(t testing.TB, typ elf.ProgType) (int, elf.Prog64) {
	t.Helper()
	for i, p := range h.progs {
		if elf.ProgType(p.Type) == typ {
			return i, p
		}
	}
	t.Fatalf("no %v", typ)
	return -1, elf.Prog64{}
}

// noteBlock is n bytes of well-formed notes: owner "GNU", 4-byte
// descriptors.
func noteBlock(n int) []byte {
	var b []byte
	for len(b)+20 <= n {
		var rec [20]byte
		binary.LittleEndian.PutUint32(rec[0:], 4)
		binary.LittleEndian.PutUint32(rec[4:], 4)
		binary.LittleEndian.PutUint32(rec[8:], 0x4000)
		copy(rec[12:], "GNU\x00")
		b = append(b, rec[:]...)
	}
	return b
}

// hostileInput is one hostile file and how it was made.
type hostileInput struct {
	name  string
	exe   bool // made from the executable (else from the library)
	build func(t testing.TB, h *hostileELF)
}

// hostileInputs are the files of the hostile-input suite: each claims far
// more work than its size pays for, if the walks behind it trust it.
func hostileInputs() []hostileInput {
	const many = 65000
	return []hostileInput{
		{name: "65000-pt-note-one-block", build: func(t testing.TB, h *hostileELF) {
			// 65,000 PT_NOTEs over the same 1 MiB of notes.
			notes := noteBlock(1 << 20)
			off, n := h.appendBlock(notes), uint64(len(notes))
			progs := h.progs
			for range many {
				progs = append(progs, elf.Prog64{Type: uint32(elf.PT_NOTE), Off: off, Filesz: n, Memsz: n, Align: 4})
			}
			h.setProgs(t, progs)
		}},
		{name: "65000-pt-note-sliding", build: func(t testing.TB, h *hostileELF) {
			// Each PT_NOTE starts one note later and ends at the block's
			// end: no two are the same range, all overlap.
			notes := noteBlock(2 << 20)
			off, n := h.appendBlock(notes), uint64(len(notes))
			progs := h.progs
			for i := range uint64(many) {
				progs = append(progs, elf.Prog64{Type: uint32(elf.PT_NOTE), Off: off + 20*i, Filesz: n - 20*i, Memsz: n - 20*i, Align: 4})
			}
			h.setProgs(t, progs)
		}},
		{name: "65000-pt-load", build: func(t testing.TB, h *hostileELF) {
			_, load := h.prog(t, elf.PT_LOAD)
			progs := h.progs
			for range many {
				progs = append(progs, load)
			}
			h.setProgs(t, progs)
		}},
		{name: "65000-pt-dynamic", build: func(t testing.TB, h *hostileELF) {
			_, dyn := h.prog(t, elf.PT_DYNAMIC)
			progs := h.progs
			for range many {
				progs = append(progs, dyn)
			}
			h.setProgs(t, progs)
		}},
		{name: "65000-sht-note-one-block", build: func(t testing.TB, h *hostileELF) {
			notes := noteBlock(1 << 20)
			off, n := h.appendBlock(notes), uint64(len(notes))
			shdrs := h.sections(t)
			for range many {
				shdrs = append(shdrs, elf.Section64{Type: uint32(elf.SHT_NOTE), Off: off, Size: n, Addralign: 4})
			}
			h.setSections(t, shdrs)
		}},
		{name: "65000-sections-over-dynamic", build: func(t testing.TB, h *hostileELF) {
			_, dyn := h.prog(t, elf.PT_DYNAMIC)
			shdrs := h.sections(t)
			for range many {
				shdrs = append(shdrs, elf.Section64{Type: uint32(elf.SHT_DYNAMIC), Off: dyn.Off, Addr: dyn.Vaddr, Size: dyn.Filesz, Entsize: dynSize, Addralign: 8})
			}
			h.setSections(t, shdrs)
		}},
		{name: "verneed-chain-times-60000-pt-load", build: func(t testing.TB, h *hostileELF) {
			// A DT_VERNEED chain of 200,000 records (vn_next 16), each
			// looked up among 60,000 PT_LOADs: a lookup that scans the
			// program headers per record costs 1.2e10 steps.
			const records = 200000
			block := make([]byte, records*16)
			for i := range records {
				r := block[i*16:]
				binary.LittleEndian.PutUint16(r[0:], 1)   // vn_version
				binary.LittleEndian.PutUint32(r[4:], 1)   // vn_file
				binary.LittleEndian.PutUint32(r[12:], 16) // vn_next
			}
			for len(h.b)%0x1000 != 0 {
				h.b = append(h.b, 0)
			}
			off := h.appendBlock(block)
			var top uint64
			for _, p := range h.progs {
				if elf.ProgType(p.Type) == elf.PT_LOAD {
					top = max(top, p.Vaddr+p.Memsz)
				}
			}
			// Filler PT_LOADs, in order and disjoint (so that the file is
			// still read), each mapping nothing, before the one that maps
			// the records.
			const fillers = 60000
			base := (top + 0xfff) &^ 0xfff
			vaddr := base + fillers*0x1000 + off%0x1000
			n := uint64(len(block))
			last := 0
			for j, p := range h.progs {
				if elf.ProgType(p.Type) == elf.PT_LOAD {
					last = j
				}
			}
			load := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: n, Memsz: n, Align: 0x1000}
			progs := append([]elf.Prog64(nil), h.progs[:last+1]...)
			for i := range uint64(fillers) {
				v := base + i*0x1000 + off%0x1000
				progs = append(progs, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: off, Vaddr: v, Paddr: v, Memsz: 0x10, Align: 0x1000})
			}
			progs = append(progs, load)
			progs = append(progs, h.progs[last+1:]...)
			_, dyn := h.prog(t, elf.PT_DYNAMIC)
			set := 0
			for o := dyn.Off; o+dynSize <= dyn.Off+dyn.Filesz; o += dynSize {
				switch elf.DynTag(binary.LittleEndian.Uint64(h.b[o:])) {
				case elf.DT_VERNEED:
					binary.LittleEndian.PutUint64(h.b[o+8:], vaddr)
					set++
				case elf.DT_VERNEEDNUM:
					binary.LittleEndian.PutUint64(h.b[o+8:], records)
					set++
				}
			}
			require.Equal(t, 2, set, "no DT_VERNEED to point at the chain")
			h.setProgs(t, progs)
		}},
		{name: "verneed-overlapping-chains", build: func(t testing.TB, h *hostileELF) {
			// 20,000 records, each an Elf_Verneed (vn_cnt 0xffff,
			// vn_aux 16, vn_next 16) that is also the Elf_Vernaux of
			// the one before: each record's auxiliary chain runs over
			// every record after it, 2e8 visits in all.
			const records = 20000
			block := make([]byte, records*16)
			for i := range records - 1 {
				r := block[i*16:]
				binary.LittleEndian.PutUint16(r[0:], 1)      // vn_version
				binary.LittleEndian.PutUint16(r[2:], 0xffff) // vn_cnt
				binary.LittleEndian.PutUint32(r[4:], 1)      // vn_file
				binary.LittleEndian.PutUint32(r[8:], 16)     // vn_aux
				binary.LittleEndian.PutUint32(r[12:], 16)    // vn_next, vna_next
			}
			h.pointDynamicAt(t, block, elf.DT_VERNEED, elf.DT_VERNEEDNUM, records)
		}},
		{name: "dynamic-million-entries", build: func(t testing.TB, h *hostileELF) {
			// A PT_DYNAMIC of a million entries in a PT_LOAD of its own:
			// DT_DEBUG ones, then the original entries.
			_, dyn := h.prog(t, elf.PT_DYNAMIC)
			orig := h.b[dyn.Off : dyn.Off+dyn.Filesz]
			block := make([]byte, 0, (1<<20)*dynSize+len(orig))
			var ent [dynSize]byte
			binary.LittleEndian.PutUint64(ent[:], uint64(elf.DT_DEBUG))
			for range 1 << 20 {
				block = append(block, ent[:]...)
			}
			block = append(block, orig...)
			for len(h.b)%0x1000 != 0 {
				h.b = append(h.b, 0)
			}
			off := h.appendBlock(block)
			var top uint64
			for _, p := range h.progs {
				if elf.ProgType(p.Type) == elf.PT_LOAD {
					top = max(top, p.Vaddr+p.Memsz)
				}
			}
			vaddr := (top+0xfff)&^0xfff + off%0x1000
			n := uint64(len(block))
			i, _ := h.prog(t, elf.PT_DYNAMIC)
			progs := append([]elf.Prog64(nil), h.progs...)
			progs[i] = elf.Prog64{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R | elf.PF_W), Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: n, Memsz: n, Align: 8}
			// The new PT_LOAD goes after the last one, keeping them sorted.
			last := 0
			for j, p := range progs {
				if elf.ProgType(p.Type) == elf.PT_LOAD {
					last = j
				}
			}
			load := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_W), Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: n, Memsz: n, Align: 0x1000}
			progs = append(progs[:last+1], append([]elf.Prog64{load}, progs[last+1:]...)...)
			h.setProgs(t, progs)
		}},
	}
}

// pointDynamicAt appends block in a PT_LOAD of its own, after the last
// one, and points the dynamic entries addr and num at it and n.
func (h *hostileELF) pointDynamicAt(t testing.TB, block []byte, addr, num elf.DynTag, n uint64) {
	t.Helper()
	for len(h.b)%0x1000 != 0 {
		h.b = append(h.b, 0)
	}
	off := h.appendBlock(block)
	var top uint64
	last := 0
	for j, p := range h.progs {
		if elf.ProgType(p.Type) == elf.PT_LOAD {
			top, last = max(top, p.Vaddr+p.Memsz), j
		}
	}
	vaddr := (top+0xfff)&^0xfff + off%0x1000
	size := uint64(len(block))
	load := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: size, Memsz: size, Align: 0x1000}
	progs := append(append(append([]elf.Prog64(nil), h.progs[:last+1]...), load), h.progs[last+1:]...)
	_, dyn := h.prog(t, elf.PT_DYNAMIC)
	set := 0
	for o := dyn.Off; o+dynSize <= dyn.Off+dyn.Filesz; o += dynSize {
		switch elf.DynTag(binary.LittleEndian.Uint64(h.b[o:])) {
		case addr:
			binary.LittleEndian.PutUint64(h.b[o+8:], vaddr)
			set++
		case num:
			binary.LittleEndian.PutUint64(h.b[o+8:], n)
			set++
		}
	}
	require.Equal(t, 2, set, "no %v and %v to point at the block", addr, num)
	h.setProgs(t, progs)
}
