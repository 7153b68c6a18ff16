package elfedit_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// elfBytes edits the raw bytes of an ELF file by field, for either class
// and byte order: hostile files are made from real ones.
type elfBytes struct {
	b   []byte
	o   binary.ByteOrder
	c64 bool
	ef  *elf.File
}

func newElfBytes(t testing.TB, b []byte) *elfBytes {
	t.Helper()
	b = bytes.Clone(b)
	ef, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	x := &elfBytes{b: b, o: binary.LittleEndian, c64: ef.Class == elf.ELFCLASS64, ef: ef}
	if ef.Data == elf.ELFDATA2MSB {
		x.o = binary.BigEndian
	}
	return x
}

func (x *elfBytes) put(off uint64, size int, v uint64) {
	switch size {
	case 1:
		x.b[off] = byte(v)
	case 2:
		x.o.PutUint16(x.b[off:], uint16(v))
	case 4:
		x.o.PutUint32(x.b[off:], uint32(v))
	case 8:
		x.o.PutUint64(x.b[off:], v)
	}
}

// word writes a class-sized word (an address, an offset, a size).
func (x *elfBytes) word(off, v uint64) {
	if x.c64 {
		x.put(off, 8, v)
	} else {
		x.put(off, 4, v)
	}
}

// ehdr writes a header field by name.
func (x *elfBytes) ehdr(field string, v uint64) {
	type at struct {
		off64, off32 uint64
		size         int
	}
	f := map[string]at{
		"phoff": {32, 28, 0}, "shoff": {40, 32, 0},
		"phentsize": {54, 42, 2}, "phnum": {56, 44, 2},
		"shentsize": {58, 46, 2}, "shnum": {60, 48, 2}, "shstrndx": {62, 50, 2},
	}[field]
	off := f.off32
	if x.c64 {
		off = f.off64
	}
	if f.size == 0 {
		x.word(off, v)
	} else {
		x.put(off, f.size, v)
	}
}

// prog returns the file offset of program header i and a function writing
// its fields by name.
func (x *elfBytes) prog(i int, field string, v uint64) {
	base := x.phoff() + uint64(i)*uint64(x.phentsize())
	if x.c64 {
		off := map[string]uint64{"type": 0, "flags": 4, "off": 8, "vaddr": 16, "paddr": 24, "filesz": 32, "memsz": 40, "align": 48}[field]
		size := 8
		if field == "type" || field == "flags" {
			size = 4
		}
		x.put(base+off, size, v)
		return
	}
	off := map[string]uint64{"type": 0, "off": 4, "vaddr": 8, "paddr": 12, "filesz": 16, "memsz": 20, "flags": 24, "align": 28}[field]
	x.put(base+off, 4, v)
}

func (x *elfBytes) phoff() uint64 { return x.read(32, 28) }
func (x *elfBytes) phentsize() uint16 {
	if x.c64 {
		return x.o.Uint16(x.b[54:])
	}
	return x.o.Uint16(x.b[42:])
}

func (x *elfBytes) read(off64, off32 uint64) uint64 {
	if x.c64 {
		return x.o.Uint64(x.b[off64:])
	}
	return uint64(x.o.Uint32(x.b[off32:]))
}

// progIndex is the index of the first program header of type pt.
func (x *elfBytes) progIndex(t testing.TB, pt elf.ProgType) int {
	for i, p := range x.ef.Progs {
		if p.Type == pt {
			return i
		}
	}
	t.Fatalf("no %v", pt)
	return -1
}

// dyn calls fn with the file offset of each dynamic entry, its tag and
// value; fn may rewrite them with setDyn.
func (x *elfBytes) dyn(t testing.TB, fn func(off uint64, tag elf.DynTag, val uint64)) {
	p := x.ef.Progs[x.progIndex(t, elf.PT_DYNAMIC)]
	es := uint64(8)
	if x.c64 {
		es = 16
	}
	for off := p.Off; off+es <= p.Off+p.Filesz; off += es {
		if x.c64 {
			fn(off, elf.DynTag(x.o.Uint64(x.b[off:])), x.o.Uint64(x.b[off+8:]))
		} else {
			fn(off, elf.DynTag(int32(x.o.Uint32(x.b[off:]))), uint64(x.o.Uint32(x.b[off+4:])))
		}
	}
}

func (x *elfBytes) setDyn(off uint64, tag elf.DynTag, val uint64) {
	half := uint64(4)
	if x.c64 {
		half = 8
	}
	x.word(off, uint64(tag))
	x.word(off+half, val)
}

// setTag rewrites the value of every entry with the tag.
func (x *elfBytes) setTag(t testing.TB, tag elf.DynTag, val uint64) {
	found := false
	x.dyn(t, func(off uint64, tg elf.DynTag, _ uint64) {
		if tg == tag {
			x.setDyn(off, tag, val)
			found = true
		}
	})
	require.True(t, found, "no %v", tag)
}

// dynstr returns the file range of DT_STRTAB.
func (x *elfBytes) dynstr(t testing.TB) (uint64, uint64) {
	var addr, size uint64
	x.dyn(t, func(_ uint64, tag elf.DynTag, val uint64) {
		switch tag {
		case elf.DT_STRTAB:
			addr = val
		case elf.DT_STRSZ:
			size = val
		}
	})
	for _, p := range x.ef.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return p.Off + addr - p.Vaddr, size
		}
	}
	t.Fatal("DT_STRTAB unmapped")
	return 0, 0
}

// hostile is one corruption of a real file.
type hostile struct {
	name string
	// mutate corrupts x; it may return a replacement for x.b (a truncation).
	mutate func(t testing.TB, x *elfBytes)
	// readOK: NewFile may accept the result (the damage is beyond what it
	// reads); EditFile must still refuse it or produce a verified file.
	readOK bool
	// exeOnly: the corruption is of PT_INTERP, which libraries lack.
	exeOnly bool
}

func hostiles() []hostile {
	return []hostile{
		{name: "bad-class", mutate: func(_ testing.TB, x *elfBytes) { x.b[elf.EI_CLASS] = 7 }},
		{name: "bad-data", mutate: func(_ testing.TB, x *elfBytes) { x.b[elf.EI_DATA] = 9 }},
		{name: "bad-version", mutate: func(_ testing.TB, x *elfBytes) { x.b[elf.EI_VERSION] = 2 }},
		{name: "bad-magic", mutate: func(_ testing.TB, x *elfBytes) { x.b[1] = 'X' }},
		{name: "phoff-past-eof", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("phoff", uint64(len(x.b))+100) }},
		{name: "phoff-huge", mutate: func(_ testing.TB, x *elfBytes) {
			if x.c64 {
				x.ehdr("phoff", 1<<63)
			} else {
				x.ehdr("phoff", 1<<31)
			}
		}},
		{name: "phoff-near-eof", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("phoff", uint64(len(x.b))-10) }},
		{name: "phnum-huge", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("phnum", 0xfffe) }},
		{name: "phnum-pn-xnum", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("phnum", 0xffff) }},
		{name: "phentsize-wrong", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("phentsize", uint64(x.phentsize())-1) }},
		{name: "shnum-huge", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("shnum", 0xfffe) }},
		{name: "shoff-past-eof", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("shoff", uint64(len(x.b))+8) }},
		{name: "shentsize-wrong", mutate: func(_ testing.TB, x *elfBytes) { x.ehdr("shentsize", 12) }},
		{name: "strtab-unmapped", mutate: func(t testing.TB, x *elfBytes) { x.setTag(t, elf.DT_STRTAB, 0x7fff0000) }},
		{name: "strsz-huge", mutate: func(t testing.TB, x *elfBytes) {
			if x.c64 {
				x.setTag(t, elf.DT_STRSZ, 1<<40)
			} else {
				x.setTag(t, elf.DT_STRSZ, 1<<31)
			}
		}},
		{name: "strtab-without-nul", mutate: func(t testing.TB, x *elfBytes) {
			off, n := x.dynstr(t)
			for i := off; i < off+n; i++ {
				if x.b[i] == 0 {
					x.b[i] = 'A'
				}
			}
		}},
		{name: "strtab-without-final-nul", mutate: func(t testing.TB, x *elfBytes) {
			// The table is cut so that its last string runs to its end.
			off, n := x.dynstr(t)
			i := n - 1
			for x.b[off+i-1] == 0 {
				i--
			}
			x.setTag(t, elf.DT_STRSZ, i)
		}},
		{name: "strtab-is-the-dynamic-section", mutate: func(t testing.TB, x *elfBytes) {
			// The string table loops back over .dynamic itself.
			p := x.ef.Progs[x.progIndex(t, elf.PT_DYNAMIC)]
			x.setTag(t, elf.DT_STRTAB, p.Vaddr)
			x.setTag(t, elf.DT_STRSZ, p.Filesz)
		}, readOK: true},
		{name: "needed-offset-outside", mutate: func(t testing.TB, x *elfBytes) { x.setTag(t, elf.DT_NEEDED, 1<<30) }},
		{name: "strtab-without-strsz", mutate: func(t testing.TB, x *elfBytes) {
			x.dyn(t, func(off uint64, tag elf.DynTag, val uint64) {
				if tag == elf.DT_STRSZ {
					x.setDyn(off, elf.DT_DEBUG, val)
				}
			})
		}},
		{name: "dynamic-without-dt-null", mutate: func(t testing.TB, x *elfBytes) {
			x.dyn(t, func(off uint64, tag elf.DynTag, _ uint64) {
				if tag == elf.DT_NULL {
					x.setDyn(off, elf.DT_DEBUG, 0)
				}
			})
		}},
		{name: "dynamic-filesz-huge", mutate: func(t testing.TB, x *elfBytes) {
			x.prog(x.progIndex(t, elf.PT_DYNAMIC), "filesz", 1<<30)
		}},
		{name: "dynamic-past-eof", mutate: func(t testing.TB, x *elfBytes) {
			x.prog(x.progIndex(t, elf.PT_DYNAMIC), "off", uint64(len(x.b))-4)
		}},
		{name: "interp-without-nul", mutate: func(t testing.TB, x *elfBytes) {
			p := x.ef.Progs[x.progIndex(t, elf.PT_INTERP)]
			copy(x.b[p.Off:p.Off+p.Filesz], bytes.Repeat([]byte{'A'}, int(p.Filesz)))
		}, exeOnly: true},
		{name: "interp-empty", mutate: func(t testing.TB, x *elfBytes) { x.prog(x.progIndex(t, elf.PT_INTERP), "filesz", 0) }, exeOnly: true},
		{name: "interp-huge", mutate: func(t testing.TB, x *elfBytes) { x.prog(x.progIndex(t, elf.PT_INTERP), "filesz", 1<<30) }, exeOnly: true},
		{name: "two-interps", mutate: func(t testing.TB, x *elfBytes) {
			x.prog(x.progIndex(t, elf.PT_NOTE), "type", uint64(elf.PT_INTERP))
		}, exeOnly: true},
		{name: "load-align-not-power-of-two", mutate: func(t testing.TB, x *elfBytes) { x.prog(x.progIndex(t, elf.PT_LOAD), "align", 0x1001) }},
		{name: "overlapping-segments", mutate: func(t testing.TB, x *elfBytes) {
			// The second PT_LOAD claims the first one's addresses.
			var loads []int
			for i, p := range x.ef.Progs {
				if p.Type == elf.PT_LOAD {
					loads = append(loads, i)
				}
			}
			first := x.ef.Progs[loads[0]]
			x.prog(loads[1], "vaddr", first.Vaddr+first.Off%max(first.Align, 1))
			x.prog(loads[1], "off", first.Off)
		}, readOK: true},
		{name: "load-past-eof", mutate: func(t testing.TB, x *elfBytes) {
			i := x.progIndex(t, elf.PT_LOAD)
			x.prog(i, "filesz", uint64(len(x.b))*4)
			x.prog(i, "memsz", uint64(len(x.b))*4)
		}, readOK: true},
		{name: "verneed-count-huge", mutate: func(t testing.TB, x *elfBytes) { x.setTag(t, elf.DT_VERNEEDNUM, 1<<40) }, readOK: true},
		{name: "verneed-unmapped", mutate: func(t testing.TB, x *elfBytes) { x.setTag(t, elf.DT_VERNEED, 0x7fff0000) }, readOK: true},
		{name: "symtab-unmapped", mutate: func(t testing.TB, x *elfBytes) {
			x.setTag(t, elf.DT_SYMTAB, 0x7fff0000)
			x.ehdr("shoff", 0) // no .dynsym section header to take the count from
			x.ehdr("shnum", 0)
		}, readOK: true},
	}
}

// hostileBases are the files the corruptions are applied to: 64-bit
// little-endian, 32-bit, and 64-bit big-endian, executables and libraries.
var hostileBases = []struct{ variant, file string }{
	{"bfd-pie", "main"}, {"bfd-pie", "libfoo"}, {"lld-pie", "main"},
	{"i686-bfd-pie", "main"}, {"s390x-bfd-pie", "main"}, {"armhf-bfd-pie", "libfoo"},
}

func baseFile(t testing.TB, variant, file string) (fixtures.Fixture, string) {
	fx := fixtures.ByName(t, variant)
	if file == "main" {
		return fx, fx.Exe
	}
	return fx, fx.Libs[0]
}

// hostileEdits are the edits tried on each corrupt file: one that fits in
// place (and so needs the string references) and one that needs a region.
func hostileEdits(fx fixtures.Fixture, isExe bool) []elfedit.Edit {
	es := []elfedit.Edit{
		{SetPath: str("/short")},
		{SetPath: str(pad(500, fx.LibDir)), AddNeeded: []string{"libnew.so"}},
	}
	if isExe {
		es = append(es, elfedit.Edit{Interpreter: str("/a/much/longer/interpreter/path/than/before/ld.so")})
	}
	return es
}

// TestHostileHeaders corrupts real files one field at a time. NewFile must
// refuse each (unless readOK) with a one-line error, never panic; EditFile
// must refuse it too, name the path, and leave the file unchanged, unless
// the damage lies outside what the edit touches, in which case the result
// must read back with the requested values and Verify must find nothing
// new.
func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	for _, base := range hostileBases {
		for _, h := range hostiles() {
			if h.exeOnly && base.file != "main" {
				continue
			}
			t.Run(base.variant+"-"+base.file+"/"+h.name, func(t *testing.T) {
				t.Parallel()
				fx, path := baseFile(t, base.variant, base.file)
				orig := readFile(t, path)
				x := newElfBytes(t, orig)
				h.mutate(t, x)
				require.False(t, bytes.Equal(orig, x.b), "mutation changed nothing")
				bad := x.b

				f, err := elfedit.NewFile(bytes.NewReader(bad), int64(len(bad)))
				if err == nil {
					_ = f.Info()
					_ = f.Verify()
					_, _ = f.DlopenNotes()
					if !h.readOK {
						t.Errorf("NewFile accepted the file")
					}
				} else {
					assert.NotContains(t, err.Error(), "\n", "one-line error")
				}

				p := filepath.Join(t.TempDir(), filepath.Base(path))
				for i, e := range hostileEdits(fx, base.file == "main") {
					require.NoError(t, os.WriteFile(p, bad, 0o755))
					res, err := elfedit.EditFile(p, e, elfedit.Options{})
					if err != nil {
						oneLine(t, err, p)
						assert.True(t, bytes.Equal(bad, readFile(t, p)), "edit %d: refused edit changed the file", i)
						continue
					}
					require.True(t, h.readOK, "edit %d: EditFile accepted a file NewFile refuses", i)
					t.Logf("edit %d accepted: %s", i, planString(res.Plan))
					// Only elfedit's view: the section headers of a corrupt
					// file need not agree with its dynamic section.
					checkWantElfedit(t, p, expect(res.Before, e))
					before := problemsOf(t, bad)
					noNewProblems(t, before, p)
				}
			})
		}
	}
}

// TestTruncated reads every prefix of a small library and a sample of the
// prefixes of an 800 KiB static PIE: each must be refused with a one-line
// error (the section header table at the end is cut, if nothing earlier),
// never a panic; EditFile on a sample of them must refuse too and leave
// them unchanged.
func TestTruncated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		variant, file string
		all           bool
	}{{"lld-pie", "libbar", true}, {"i686-bfd-pie", "libbar", true}, {"s390x-bfd-pie", "main", false}, {"static-pie", "main", false}} {
		t.Run(c.variant+"-"+c.file, func(t *testing.T) {
			t.Parallel()
			fx := fixtures.ByName(t, c.variant)
			path := fx.Exe
			if c.file == "libbar" {
				path = fx.Libs[1]
			}
			b := readFile(t, path)
			lengths := map[int]bool{}
			if c.all {
				for n := range len(b) {
					lengths[n] = true
				}
			} else {
				rng := rand.New(rand.NewPCG(3, 4))
				for range 2000 {
					lengths[rng.IntN(len(b))] = true
				}
				for n := range 4096 {
					lengths[n] = true
					lengths[len(b)-1-n] = true
				}
			}
			dir := t.TempDir()
			edited := 0
			for n := range lengths {
				_, err := elfedit.NewFile(bytes.NewReader(b[:n]), int64(n))
				if !assert.Error(t, err, "prefix of %d bytes accepted", n) {
					continue
				}
				assert.NotContains(t, err.Error(), "\n")
				if n%97 == 0 || n < 256 {
					p := filepath.Join(dir, fmt.Sprintf("prefix-%d", n))
					require.NoError(t, os.WriteFile(p, b[:n], 0o755))
					_, err := elfedit.EditFile(p, elfedit.Edit{SetPath: str(pad(300, "/x"))}, elfedit.Options{})
					oneLine(t, err, p)
					assert.True(t, bytes.Equal(b[:n], readFile(t, p)))
					edited++
				}
			}
			t.Logf("%d prefixes read, %d edited", len(lengths), edited)
		})
	}
}

// TestAllocBound reads, verifies and plans hostile files whose headers
// claim huge tables, and checks that the bytes allocated stay within
// allocFactor × the file size (plus a constant for small files): sizes read
// from a file are checked against its size before anything is allocated.
// Not parallel: it measures the process's allocations.
func TestAllocBound(t *testing.T) {
	type input struct {
		name string
		b    []byte
	}
	var inputs []input
	for _, base := range hostileBases {
		_, path := baseFile(t, base.variant, base.file)
		orig := readFile(t, path)
		inputs = append(inputs, input{base.variant + "-" + base.file, orig})
		for _, h := range hostiles() {
			if h.exeOnly && base.file != "main" {
				continue
			}
			x := newElfBytes(t, orig)
			h.mutate(t, x)
			inputs = append(inputs, input{base.variant + "-" + base.file + "/" + h.name, x.b})
		}
	}
	inputs = append(inputs, input{"verneed-chain-over-text", verneedBomb(t)})
	for _, in := range inputs {
		n := allocated(func() { readAndPlan(in.b) })
		limit := allocFactor*uint64(len(in.b)) + allocConst
		assert.LessOrEqual(t, n, limit, "%s: %d bytes allocated for a %d-byte file", in.name, n, len(in.b))
	}
}

// allocFactor and allocConst bound what reading, verifying and planning an
// edit of an N-byte file may allocate: allocFactor × N + allocConst.
const (
	allocFactor = 8
	allocConst  = 256 << 10
)

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// readAndPlan does what FuzzRead does with b, and plans a long RUNPATH.
func readAndPlan(b []byte) {
	f, err := elfedit.NewFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return
	}
	_ = f.Info()
	_ = f.Verify()
	for _, e := range []elfedit.Edit{{SetPath: str("/x")}, {SetPath: str(strings.Repeat("/y", 300))}, {Soname: str("libsoname.so")}} {
		if p, err := f.Plan(e); err == nil {
			if r, err := p.Result(); err == nil {
				_ = r.Verify()
			}
		}
	}
}

// verneedBomb points DT_VERNEED of the 800 KiB static PIE at its code,
// overwritten with 4096 Elf_Verneed records: each claims as auxiliary
// records all the records after it (vn_aux and vna_next both 16), so a walk
// that trusts the counts reads n²/2 records of a table of n.
func verneedBomb(t testing.TB) []byte {
	const records = 4096
	fx := fixtures.ByName(t, "static-pie")
	x := newElfBytes(t, readFile(t, fx.Exe))
	text := x.ef.Section(".text")
	require.NotNil(t, text)
	require.GreaterOrEqual(t, text.Size, uint64(records*16))
	for i := range uint64(records) {
		off := text.Offset + i*16
		x.put(off, 2, 1)             // vn_version
		x.put(off+2, 2, records-i-1) // vn_cnt: every later record
		x.put(off+4, 4, 1)           // vn_file
		x.put(off+8, 4, 16)          // vn_aux: the next record, read as Elf_Vernaux
		x.put(off+12, 4, 16)         // vn_next (also vna_next of the aux view)
	}
	n := 0
	x.dyn(t, func(off uint64, tag elf.DynTag, _ uint64) {
		switch tag {
		case elf.DT_DEBUG:
			x.setDyn(off, elf.DT_VERNEED, text.Addr)
			n++
		case elf.DT_FINI:
			x.setDyn(off, elf.DT_VERNEEDNUM, records)
			n++
		}
	})
	require.Equal(t, 2, n)
	return x.b
}

// TestRepointedTableMovesWhole: a region that grows the program header
// table in place moves what follows it (.interp, notes), and repoints the
// dynamic section's tables it moves. A .dynsym header that lies (its
// offset earlier than DT_SYMTAB's bytes, its address elsewhere, its size
// covering the gap and only the first bytes of the real table) made the
// gap's blob hold part of the symbol table: the edit pointed DT_SYMTAB
// into the moved copy, where the rest of the table was other bytes, and
// the program's dynamic symbols were garbage (FuzzRun in rpath/patch found
// it). The edit is refused now, the file left as it was; the same edit of
// the file as the linker wrote it goes through.
func TestRepointedTableMovesWhole(t *testing.T) {
	fx, path := baseFile(t, "bfd-pie", "main")
	orig := readFile(t, path)
	x := newElfBytes(t, orig)
	require.True(t, x.c64)
	var symtab uint64
	x.dyn(t, func(_ uint64, tag elf.DynTag, val uint64) {
		if tag == elf.DT_SYMTAB {
			symtab = val
		}
	})
	symOff := symtab // the first PT_LOAD maps offset = address
	phEnd := x.phoff() + uint64(len(x.ef.Progs))*uint64(x.phentsize())
	require.Less(t, phEnd, symOff, "DT_SYMTAB after the program header table")
	shoff := x.read(40, 32)
	shentsize := uint64(64)
	lied := false
	for i, s := range x.ef.Sections {
		if s.Type != elf.SHT_DYNSYM {
			continue
		}
		hdr := shoff + uint64(i)*shentsize
		lo := phEnd - 0x18 // overlapping the bytes a grown table needs
		x.word(hdr+16, 0xc8_0000_0000+symtab)
		x.word(hdr+24, lo)
		x.word(hdr+32, symOff+16-lo) // the table's first 16 bytes only
		lied = true
	}
	require.True(t, lied, "no .dynsym section")
	e := elfedit.Edit{SetPath: str(pad(5000, fx.LibDir))} // past the slack: a region

	p := filepath.Join(t.TempDir(), "main")
	require.NoError(t, os.WriteFile(p, x.b, 0o755))
	_, err := elfedit.EditFile(p, e, elfedit.Options{})
	require.ErrorContains(t, err, "DT_SYMTAB")
	require.ErrorContains(t, err, "runs past the bytes the edit would move")
	oneLine(t, err, p)
	require.Equal(t, x.b, readFile(t, p), "a refused edit changed the file")

	require.NoError(t, os.WriteFile(p, orig, 0o755))
	res, err := elfedit.EditFile(p, e, elfedit.Options{})
	require.NoError(t, err)
	checkWantElfedit(t, p, expect(res.Before, e))
}
