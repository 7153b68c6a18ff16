package symcheck

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// tableFiles are the host's files the table tests read: an executable
// and a library with .gnu.hash, versions and relocations of both kinds.
var tableFiles = []string{"/bin/true", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"}

// readHost reads the host's file at path (the test is skipped without
// it) and opens its bytes.
func readHost(t *testing.T, path string) ([]byte, *elfedit.File) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	f, err := elfedit.NewFile(bytes.NewReader(orig), int64(len(orig)))
	require.NoError(t, err)
	return orig, f
}

// TestHostileTables: mangled symbol, version, hash and relocation tables
// give an error or a smaller answer, never a panic or a read past the
// file; every lookup on what was read terminates, and answers through the
// object's summary exactly as the loader's walk of the tables does.
func TestHostileTables(t *testing.T) {
	for _, path := range tableFiles {
		orig, f := readHost(t, path)
		var ns names
		var sp scratchPool
		o, err := newObject(f, readRefs, &ns, sp.get())
		require.NoError(t, err, path)
		require.NotEmpty(t, o.refs, path)
		// Mangle the bytes the tables live in: up to the end of the
		// dynamic section.
		end := 0
		for _, p := range f.Progs {
			end = max(end, int(p.Off+p.Filesz))
		}
		end = min(end, len(orig), 1<<16)
		rng := rand.New(rand.NewSource(30))
		buf := make([]byte, len(orig))
		ok, looked, sparse := 0, 0, 0
		for range 3000 {
			copy(buf, orig)
			for range 1 + rng.Intn(8) {
				i := 64 + rng.Intn(end-64) // keep the ELF header
				buf[i] = byte(rng.Intn(256))
			}
			f, err := elfedit.NewFile(bytes.NewReader(buf), int64(len(buf)))
			if err != nil {
				continue
			}
			var ns names
			o, err := newObject(f, readRefs, &ns, sp.get())
			if err != nil {
				continue
			}
			ok++
			// Every name the tables define is looked up too, not only
			// the references.
			s := sp.get()
			tb, err := o.readTables(f, s, 0, 0, nil)
			require.NoError(t, err, "the second read of what the first read")
			for i := range tb.nsyms() {
				ns.intern(tb.strBytes(tb.sym(i).name))
			}
			sum := tb.summarize(&ns)
			// Read an entry at a time, the tables summarize the same.
			if tz, err := o.readTables(f, &scratch{}, 0, 1, nil); err == nil && tz.lazy != nil {
				sz := tz.summarize(&ns)
				require.NoError(t, tz.err())
				require.Equal(t, sum.cands, sz.cands)
				sparse++
			}
			v := &version{name: "V", hash: 1}
			for _, r := range o.refs {
				n := ns.byID(r.id)
				for _, q := range []query{o.query(r, &ns), {n: n, ver: v, plt: true}, {n: n, plt: true}} {
					for _, named := range []bool{false, true} {
						dw, okw, aw := walkFind(tb, q, named)
						ds, oks, as := o.find(sum, q, named)
						require.Equal(t, okw, oks, "%s %v", q.n.s, named)
						require.Equal(t, aw, as, "%s %v", q.n.s, named)
						if okw {
							require.Equal(t, dw, ds, "%s %v", q.n.s, named)
						}
						looked++
					}
				}
			}
			for _, n := range ns.all() {
				for _, v := range o.versions {
					if v == nil {
						v = &version{} // an index no record sets
					}
					q := query{n: n, ver: v}
					dw, okw, aw := walkFind(tb, q, true)
					ds, oks, as := o.find(sum, q, true)
					require.Equal(t, [2]bool{okw, aw}, [2]bool{oks, as}, n.s)
					if okw {
						require.Equal(t, dw, ds, n.s)
					}
					looked++
				}
				dw, okw, _ := walkFind(tb, query{n: n}, false)
				ds, oks, _ := o.find(sum, query{n: n}, false)
				require.Equal(t, okw, oks, n.s)
				if okw {
					require.Equal(t, dw, ds, n.s)
				}
			}
			sp.put(s)
		}
		t.Logf("%s: %d of 3000 mangled copies still read, %d lookups held to the walk of the tables, %d summaries read an entry at a time held to the whole tables", path, ok, looked, sparse)
		require.Positive(t, looked)
		require.Positive(t, sparse)
	}
}

// TestStrTableLazy: a string table read a string at a time reads every
// string as the whole table does, in both of its readings.
func TestStrTableLazy(t *testing.T) {
	for _, path := range tableFiles {
		_, f := readHost(t, path)
		whole, err := newStrTable(f, &scratch{}, 0)
		require.NoError(t, err)
		require.NotEmpty(t, whole.b)
		addr, _ := f.DynValue(elf.DT_STRTAB)
		lazy := &strTable{f: f, addr: addr, size: uint64(len(whole.b))}
		for off := range uint32(len(whole.b) + 2) {
			require.Equal(t, whole.bytes(uint64(off)), lazy.bytes(uint64(off)), "%s +%d", path, off)
			require.Equal(t, whole.cstr(off), lazy.cstr(off), "%s +%d", path, off)
		}
		// Unterminated at the end: to the end as bytes, none as a C string.
		end := &strTable{b: []byte("a\x00bc")}
		endLazy := &strTable{f: f, addr: addr + uint64(len(whole.b)) - 3, size: 3}
		require.Equal(t, "bc", string(end.bytes(2)))
		require.Equal(t, "", end.cstr(2))
		require.NoError(t, lazy.err)
		require.Len(t, endLazy.bytes(0), len(whole.b[len(whole.b)-3:])-1) // ends in the table's NUL
	}
}

// walkFind is do_lookup_x over the tables themselves, as the loader walks
// them: what find must answer through a summary.
func walkFind(t *tables, q query, named bool) (def cand, ok, assert bool) {
	o := t.o
	found, versioned, nversions := -1, -1, 0
	t.candidates(q.n, func(i int) bool {
		s := t.sym(i)
		if s.value == 0 && s.shndx != uint16(elf.SHN_ABS) && s.typ() != elf.STT_TLS {
			return false
		}
		if q.plt && s.shndx == uint16(elf.SHN_UNDEF) {
			return false
		}
		if !allowed(s.typ()) || string(t.strBytes(s.name)) != q.n.s {
			return false
		}
		if t.versym == nil && q.ver != nil && named {
			assert = true
			return true
		}
		if t.versym != nil {
			vi := t.verIndex(i)
			if q.ver != nil {
				dv := o.versionAt(vi & 0x7fff)
				if (dv.hash != q.ver.hash || dv.name != q.ver.name) && (q.ver.hidden || dv.hash != 0 || vi&0x8000 != 0) {
					return false
				}
			} else if vi&0x7fff >= 3 {
				if vi&0x8000 == 0 {
					if nversions == 0 {
						versioned = i
					}
					nversions++
				}
				return false
			}
		}
		found = i
		return true
	})
	if assert {
		return cand{}, false, true
	}
	if found < 0 && nversions == 1 {
		found = versioned
	}
	if found < 0 {
		return cand{}, false, false
	}
	s := t.sym(found)
	switch s.bind() {
	case elf.STB_GLOBAL, elf.STB_WEAK, stbGNUUnique:
	default:
		return cand{}, false, false
	}
	if v := s.vis(); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
		return cand{}, false, false
	}
	return cand{id: q.n.id, vi: t.verIndex(found), info: s.info, other: s.other, undef: s.shndx == uint16(elf.SHN_UNDEF)}, true, false
}

// TestVersionWindow: version records that run past the first window are
// read again with the rest of their segment, not refused.
func TestVersionWindow(t *testing.T) {
	f, err := elfedit.Open("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	a, ok := f.DynValue(elf.DT_VERNEED)
	require.True(t, ok)
	var sizes []int
	err = versionRecords(f, &scratch{}, a, 16, "DT_VERNEED", func(b []byte) error {
		sizes = append(sizes, len(b))
		if len(b) < 64 {
			return errShort{"entry"}
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, sizes, 2)
	require.Equal(t, 16, sizes[0])
	require.Equal(t, int(f.MappedSize(a)), sizes[1])
	// Still short at the end of the segment: an error naming the table.
	err = versionRecords(f, &scratch{}, a, 16, "DT_VERNEED", func([]byte) error { return errShort{"entry at +0x0"} })
	require.EqualError(t, err, "DT_VERNEED: entry at +0x0 runs past its segment")
}

// overlappingVerneed is the ELF64 little-endian file orig with its
// DT_VERNEED pointed at n records appended in a PT_LOAD of their own, each
// an Elf_Verneed (vn_cnt 0xffff, vn_aux 16, vn_next 16) that is also the
// Elf_Vernaux of the record before: record i's auxiliary chain runs over
// every record after it, n²/2 visits in all. The last record ends both
// chains (its own Elf_Vernaux is itself), so every record lies in bounds.
func overlappingVerneed(t *testing.T, orig []byte, n int) []byte {
	t.Helper()
	le := binary.LittleEndian
	b := bytes.Clone(orig)
	for len(b)%0x1000 != 0 {
		b = append(b, 0)
	}
	off := uint64(len(b))
	for i := range n {
		var r [16]byte
		le.PutUint16(r[0:], 1)      // vn_version
		le.PutUint16(r[2:], 0xffff) // vn_cnt
		le.PutUint32(r[4:], 1)      // vn_file
		if i < n-1 {
			le.PutUint32(r[8:], 16)  // vn_aux
			le.PutUint32(r[12:], 16) // vn_next, and vna_next
		}
		b = append(b, r[:]...)
	}
	size := uint64(n * 16)
	phoff, phnum := le.Uint64(b[32:]), int(le.Uint16(b[56:]))
	var progs []elf.Prog64
	var top uint64
	for i := range phnum {
		var p elf.Prog64
		_, err := binary.Decode(b[phoff+uint64(i)*56:], le, &p)
		require.NoError(t, err)
		progs = append(progs, p)
		if elf.ProgType(p.Type) == elf.PT_LOAD {
			top = max(top, p.Vaddr+p.Memsz)
		}
	}
	vaddr := (top + 0xfff) &^ 0xfff
	last := 0
	for i, p := range progs {
		if elf.ProgType(p.Type) == elf.PT_LOAD {
			last = i
		}
		if elf.ProgType(p.Type) == elf.PT_DYNAMIC {
			set := 0
			for o := p.Off; o+16 <= p.Off+p.Filesz; o += 16 {
				switch elf.DynTag(le.Uint64(b[o:])) {
				case elf.DT_VERNEED:
					le.PutUint64(b[o+8:], vaddr)
					set++
				case elf.DT_VERNEEDNUM:
					le.PutUint64(b[o+8:], uint64(n))
					set++
				}
			}
			require.Equal(t, 2, set, "no DT_VERNEED")
		}
	}
	load := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: size, Memsz: size, Align: 0x1000}
	progs = append(progs[:last+1], append([]elf.Prog64{load}, progs[last+1:]...)...)
	var ph bytes.Buffer
	for _, p := range progs {
		require.NoError(t, binary.Write(&ph, le, p))
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	le.PutUint64(b[32:], uint64(len(b)))
	le.PutUint16(b[56:], uint16(len(progs)))
	return append(b, ph.Bytes()...)
}

// TestOverlappingVersionChains: version records whose chains overlap are
// walked within a budget of the file's size, as the engine walks them: a
// clear error, fast, instead of n²/2 records (and as many kept).
func TestOverlappingVersionChains(t *testing.T) {
	orig, _ := readHost(t, tableFiles[1])
	b := overlappingVerneed(t, orig, 6000)
	path := filepath.Join(t.TempDir(), "libhostile.so")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	// The engine reads the file (its own walk has the budget).
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	f.Close()
	for _, what := range []reading{readVersions, readRefs, readSummary} {
		start := time.Now()
		var ns names
		var sp scratchPool
		_, err := readObject(elfedit.Open, path, what, &ns, sp.get())
		require.ErrorContains(t, err, "more version records than the file can hold (overlapping chains)")
		require.ErrorContains(t, err, path+": DT_VERNEED: record at +0x")
		require.NotErrorIs(t, err, ErrOutOfBounds, "the loader walks them all, in bounds")
		require.Less(t, time.Since(start), 2*time.Second)
	}
	// Through a Checker's public read, too.
	require.ErrorContains(t, New(Options{}).Read(path), "overlapping chains")
}

// TestSparseStringsSummarizeTheSame: a summary made with the string table
// read a string at a time (a big table: read in the order of the names'
// offsets, then put back in table order) is the summary made with the
// table in memory, the candidates of one name in table order included
// (libc defines memcpy at two versions); and the references a file's
// relocations make, their names read the same way, are the same.
func TestSparseStringsSummarizeTheSame(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6", tableFiles[1]} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			_, f := readHost(t, path)
			var ns names
			var sp scratchPool
			o, err := newObject(f, readRefs, &ns, sp.get())
			require.NoError(t, err)
			tb, err := o.readTables(f, sp.get(), 0, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, tb.gnu, "the premise: a .gnu.hash")
			for i := range tb.nsyms() {
				ns.intern(tb.strBytes(tb.sym(i).name))
			}
			whole := tb.summarize(&ns)
			addr, _ := f.DynValue(elf.DT_STRTAB)
			size, _ := f.DynValue(elf.DT_STRSZ)
			st := &strTable{f: f, addr: addr, size: size}
			tz, err := o.readTables(f, &scratch{}, 0, 1, st)
			require.NoError(t, err)
			require.NotNil(t, tz.lazy, "the premise: read an entry at a time")
			sparse := tz.summarize(&ns)
			require.NoError(t, tz.err())
			require.NoError(t, st.err)
			require.NotEmpty(t, whole.cands)
			require.Equal(t, whole.cands, sparse.cands)
			// The references, their names read the same way.
			refNames := func() []string {
				var out []string
				for _, r := range o.refs {
					out = append(out, fmt.Sprintf("%s %d %d", ns.byID(r.id).s, r.kind, r.vi))
				}
				return out
			}
			want := refNames()
			require.NotEmpty(t, want)
			rs, err := o.readRelocs(f, sp.get())
			require.NoError(t, err)
			st2 := &strTable{f: f, addr: addr, size: size}
			tr, err := o.readTables(f, &scratch{}, uint64(rs[len(rs)-1].idx)+1, 1, st2)
			require.NoError(t, err)
			o.refs = nil
			o.buildRefs(tr, rs, &ns, &scratch{})
			require.NoError(t, st2.err)
			require.Equal(t, want, refNames())
			if filepath.Base(path) == "libc.so.6" {
				n := 0
				for _, c := range whole.cands {
					if c.id == ns.lookup([]byte("memcpy")).id {
						n++
					}
				}
				require.GreaterOrEqual(t, n, 2, "the premise: memcpy at two versions")
			}
		})
	}
}

// TestSymRefsMerge: the relocations' uses merge into one entry a symbol,
// in index order, its kinds or'ed, whether the indices are dense (gathered
// by index) or one lies far past the others (sorted), and a scratch
// reused after either answers the same.
func TestSymRefsMerge(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	var s scratch
	dense, sparse := 0, 0
	for round := range 400 {
		n := rng.Intn(300)
		span := 1 + rng.Intn(2000)
		var all []uint64
		want := map[uint32]refKind{}
		for range n {
			i := uint32(1 + rng.Intn(span))
			if round%4 == 3 && rng.Intn(50) == 0 {
				i = uint32(1<<24 + rng.Intn(1<<30)) // far past the others
			}
			k := []refKind{refFunc, refData, refCopy}[rng.Intn(3)]
			all = append(all, uint64(i)<<8|uint64(k))
			want[i] |= k
		}
		if top := slices.Max(append([]uint32{0}, slices.Collect(maps.Keys(want))...)); !denseIndices(top, n) {
			sparse++
		} else if n > 0 {
			dense++
		}
		var wantRefs []symRef
		for _, i := range slices.Sorted(maps.Keys(want)) {
			wantRefs = append(wantRefs, symRef{idx: i, kind: want[i]})
		}
		got := slices.Clone(s.symRefs(all))
		if len(wantRefs) == 0 {
			require.Empty(t, got, "round %d", round)
			continue
		}
		require.Equal(t, wantRefs, got, "round %d", round)
	}
	require.Positive(t, dense, "the premise: dense rounds")
	require.Positive(t, sparse, "the premise: sparse rounds")
}
