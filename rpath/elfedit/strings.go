package elfedit

import (
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
)

// errUnknownRefs means the string references of a file could not all be
// found (a symbol table whose size nothing states). Without them no string
// is overwritten in place: a symbol name might share its bytes.
var errUnknownRefs = errors.New("string references unknown")

// stringRefs returns every offset into DT_STRTAB that the file uses outside
// the dynamic section: dynamic symbol names and symbol-version names. GNU ld
// merges string tails, so any of these may point into the middle of a
// DT_RUNPATH or DT_NEEDED string.
func (f *File) stringRefs() ([]uint64, error) {
	var refs []uint64
	es := uint64(sym64Size)
	if f.Header.Class == elf.ELFCLASS32 {
		es = sym32Size
	}
	if symtab, ok := f.dynVal(elf.DT_SYMTAB); ok {
		n, bound, ok, err := f.symbolSpan(symtab, es)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errUnknownRefs
		}
		// Past the n symbols the file states or the loader reaches, the
		// table runs on to the first entry that names no string.
		reached := n
		n = bound
		if n > 0 {
			off, ok := f.vaddrToOff(symtab, n*es)
			if !ok {
				return nil, formatErr(-1, "DT_SYMTAB 0x%x with %d symbols maps to no PT_LOAD", symtab, n)
			}
			if off > uint64(f.size) || n*es > uint64(f.size)-off {
				return nil, formatErr(int64(min(off, uint64(f.size))), "dynamic symbol table: range 0x%x+0x%x lies past the end of the file (size 0x%x)", off, n*es, f.size)
			}
			// A table the read cache holds is read in chunks through one
			// buffer (only st_name is kept, and a copy of the whole table
			// would be garbage at once); a bigger one in one read.
			refs = make([]uint64, 0, n+16)
			buf := f.scratchToRead(340 * sym64Size) // a multiple of both entry sizes
			if n*es > windowSize {
				buf = f.scratchToRead(n * es)
			}
			for i := uint64(0); i < n; {
				m := min(n-i, uint64(len(buf))/es)
				at := off + i*es
				if _, err := f.r.ReadAt(buf[:m*es], int64(at)); err != nil {
					return nil, fmt.Errorf("dynamic symbol table: reading 0x%x bytes at 0x%x: %w", m*es, at, err)
				}
				for j := uint64(0); j < m; j++ {
					name := uint64(f.order.Uint32(buf[j*es:]))
					if i+j >= reached && name >= uint64(len(f.strtab)) {
						n = i + j
						break
					}
					refs = append(refs, name)
				}
				i = min(i+m, n)
			}
		}
	}
	if err := f.versionRefs(&refs); err != nil {
		return nil, err
	}
	return refs, nil
}

func (f *File) gnuHashCount(addr uint64) (uint64, error) {
	off, ok := f.vaddrToOff(addr, 16)
	if !ok {
		return 0, formatErr(-1, "DT_GNU_HASH 0x%x maps to no PT_LOAD", addr)
	}
	hdr, err := readAt(f.r, f.size, off, 16, "DT_GNU_HASH")
	if err != nil {
		return 0, err
	}
	o := f.order
	nbuckets, symoff, bloom := uint64(o.Uint32(hdr)), uint64(o.Uint32(hdr[4:])), uint64(o.Uint32(hdr[8:]))
	word := uint64(8)
	if f.Header.Class == elf.ELFCLASS32 {
		word = 4
	}
	if nbuckets > uint64(f.size)/4 || bloom > uint64(f.size)/word {
		return 0, formatErr(int64(off), "DT_GNU_HASH sizes exceed the file")
	}
	bOff := off + 16 + bloom*word
	buckets, err := readAt(f.r, f.size, bOff, nbuckets*4, "DT_GNU_HASH buckets")
	if err != nil {
		return 0, err
	}
	var maxSym uint64
	for i := uint64(0); i < nbuckets; i++ {
		maxSym = max(maxSym, uint64(o.Uint32(buckets[i*4:])))
	}
	if maxSym < symoff {
		return symoff, nil
	}
	chainOff := bOff + nbuckets*4
	// Walk the last chain to its end marker (low bit set), in bounded reads.
	for idx := maxSym; ; idx++ {
		b, err := readAt(f.r, f.size, chainOff+(idx-symoff)*4, 4, "DT_GNU_HASH chain")
		if err != nil {
			return 0, err
		}
		if o.Uint32(b)&1 != 0 {
			return idx + 1, nil
		}
	}
}

// versionRefs appends the name offsets of DT_VERNEED and DT_VERDEF records.
// Both are linked lists; each walk is bounded by the count the dynamic
// section states and by the file.
func (f *File) versionRefs(refs *[]uint64) error {
	o := f.order
	// The records of valid tables do not overlap: Elf_Verneed and
	// Elf_Vernaux are 16 bytes, Elf_Verdef 20 and Elf_Verdaux 8, so a walk
	// visits at most size/16 (verneed) or size/8 (verdef) of them. Chains
	// that visit more overlap (record i's aux chain running over records
	// i+1...), and following their counts costs time and memory quadratic
	// in the file size.
	var budget uint64
	visit := func(what string, addr uint64) error {
		if budget == 0 {
			return formatErr(-1, "%s record 0x%x: more version records than the file can hold (overlapping chains)", what, addr)
		}
		budget--
		return nil
	}
	// One buffer for every record: a walk may visit size/8 of them.
	var buf [20]byte
	readRec := func(off, n uint64, what string) ([]byte, error) {
		if off > uint64(f.size) || n > uint64(f.size)-off {
			return nil, formatErr(int64(min(off, uint64(f.size))), "%s: range 0x%x+0x%x lies past the end of the file (size 0x%x)", what, off, n, f.size)
		}
		if _, err := f.r.ReadAt(buf[:n], int64(off)); err != nil {
			return nil, fmt.Errorf("%s: reading 0x%x bytes at 0x%x: %w", what, n, off, err)
		}
		return buf[:n], nil
	}
	walk := func(addrTag, numTag elf.DynTag, what string, recSize uint64, rec func(b []byte) (next uint64, aux uint64, cnt int, name uint64), auxRec func(b []byte) (next uint64, name uint64)) error {
		addr, ok := f.dynVal(addrTag)
		if !ok {
			return nil
		}
		budget = uint64(f.size) / 16
		if addrTag == elf.DT_VERDEF {
			budget = uint64(f.size) / 8
		}
		num, _ := f.dynVal(numTag)
		if num > uint64(f.size)/16 {
			return formatErr(-1, "%s count %d exceeds the file", what, num)
		}
		for i := uint64(0); i < num; i++ {
			if err := visit(what, addr); err != nil {
				return err
			}
			off, ok := f.vaddrToOff(addr, recSize)
			if !ok {
				return formatErr(-1, "%s record 0x%x maps to no PT_LOAD", what, addr)
			}
			b, err := readRec(off, recSize, what)
			if err != nil {
				return err
			}
			next, aux, cnt, name := rec(b)
			if name != ^uint64(0) {
				*refs = append(*refs, name)
			}
			a := addr + aux
			for j := 0; j < cnt; j++ {
				if err := visit(what+" aux", a); err != nil {
					return err
				}
				aoff, ok := f.vaddrToOff(a, 8) // the smaller aux record; its size is checked by readAt
				if !ok {
					return formatErr(-1, "%s aux record 0x%x maps to no PT_LOAD", what, a)
				}
				auxSize := uint64(16) // Elf_Vernaux; Elf_Verdaux is 8
				if addrTag == elf.DT_VERDEF {
					auxSize = 8
				}
				ab, err := readRec(aoff, auxSize, what+" aux")
				if err != nil {
					return err
				}
				anext, aname := auxRec(ab)
				*refs = append(*refs, aname)
				if anext == 0 {
					break
				}
				a += anext
			}
			if next == 0 {
				break
			}
			addr += next
		}
		return nil
	}
	// Elf_Verneed is 16 bytes, Elf_Verdef 20, in both classes.
	err := walk(elf.DT_VERNEED, elf.DT_VERNEEDNUM, "DT_VERNEED", 16,
		func(b []byte) (uint64, uint64, int, uint64) {
			return uint64(o.Uint32(b[12:])), uint64(o.Uint32(b[8:])), int(o.Uint16(b[2:])), uint64(o.Uint32(b[4:]))
		},
		func(b []byte) (uint64, uint64) { return uint64(o.Uint32(b[12:])), uint64(o.Uint32(b[8:])) })
	if err != nil {
		return err
	}
	return walk(elf.DT_VERDEF, elf.DT_VERDEFNUM, "DT_VERDEF", 20,
		func(b []byte) (uint64, uint64, int, uint64) {
			return uint64(o.Uint32(b[16:])), uint64(o.Uint32(b[12:])), int(o.Uint16(b[6:])), ^uint64(0)
		},
		func(b []byte) (uint64, uint64) { return uint64(o.Uint32(b[4:])), uint64(o.Uint32(b[0:])) })
}

// rng is a half-open byte range.
type rng struct{ lo, hi uint64 }

func (r rng) overlaps(o rng) bool { return r.lo < o.hi && o.lo < r.hi }

// sweepOverlaps calls fn(a, b) for each range rs[b] that, in offset order
// (ties in the order given), begins before the furthest end of the ranges
// before it, rs[a] being the one that reaches furthest; fn returns false
// to stop. Every range that overlaps another is an a or a b of some call,
// and the sweep is one pass after a sort, whatever a hostile file holds.
func sweepOverlaps(rs []rng, fn func(a, b int) bool) {
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rs[a].lo, rs[b].lo) })
	far := -1
	for _, i := range order {
		if far >= 0 && rs[i].lo < rs[far].hi && !fn(far, i) {
			return
		}
		if far < 0 || rs[i].hi > rs[far].hi {
			far = i
		}
	}
}

// union sorts rs and returns the ranges they cover, ranges that overlap or
// touch merged into one, in order.
func union(rs []rng) []rng {
	slices.SortFunc(rs, func(a, b rng) int { return cmp.Compare(a.lo, b.lo) })
	var out []rng
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// without returns the parts of rs that cut does not cover, in order.
func without(rs []rng, cut rng) []rng {
	var out []rng
	for _, r := range rs {
		if !r.overlaps(cut) {
			out = append(out, r)
			continue
		}
		if r.lo < cut.lo {
			out = append(out, rng{r.lo, cut.lo})
		}
		if cut.hi < r.hi {
			out = append(out, rng{cut.hi, r.hi})
		}
	}
	return out
}

// strLayout is the decided content of the dynamic string table: the old
// table's first limit bytes with the in-place changes over them, then the
// appended strings. It is kept as those parts, not as one copy: a library's
// table runs to megabytes, and every layout but slack copies the result
// into a buffer of its own anyway (copyTo), so a copy here would be a
// second one, made for every file and for nothing.
type strLayout struct {
	old     []byte     // the table as read (File.strtab); never written to
	limit   uint64     // bytes of old the result starts with
	patches []strPatch // in-place changes over old, applied in order
	tail    []byte     // appended strings, each with its NUL
	grown   bool       // the result is longer than the old table: it must move
	// overwrites are old-table ranges rewritten with a replacing string
	// (in place), scrub those of strings nothing references any more
	// ('X'), dead every old string that was replaced or removed (scrubbed
	// in a dead copy).
	overwrites []rng
	scrub      []rng
	dead       []rng
	// refs are the offsets of the symbol and version names (refsOK: all
	// of them are known); unkept finds the spans among them that a scrub
	// of a dead copy leaves alone.
	refs   []uint64
	refsOK bool
}

// strPatch is an in-place change of the old table: data at off.
type strPatch struct {
	off  uint64
	data []byte
}

// size is the length of the result.
func (sl *strLayout) size() uint64 { return sl.limit + uint64(len(sl.tail)) }

// copyTo writes the result into dst, which holds size() bytes.
func (sl *strLayout) copyTo(dst []byte) {
	copy(dst, sl.old[:sl.limit])
	for _, p := range sl.patches {
		if p.off < sl.limit {
			copy(dst[p.off:sl.limit], p.data)
		}
	}
	copy(dst[sl.limit:], sl.tail)
}

// bytes returns the result in a buffer of its own.
func (sl *strLayout) bytes() []byte {
	b := make([]byte, sl.size())
	sl.copyTo(b)
	return b
}

// at returns the result's bytes in r, a range within the old table.
func (sl *strLayout) at(r rng) []byte {
	b := slices.Clone(sl.old[r.lo:r.hi])
	for _, p := range sl.patches {
		lo, hi := max(r.lo, p.off), min(r.hi, p.off+uint64(len(p.data)))
		if lo < hi {
			copy(b[lo-r.lo:hi-r.lo], p.data[lo-p.off:hi-p.off])
		}
	}
	return b
}

// unkept returns the parts of r that no kept string covers: what a scrub
// of a dead copy may overwrite. patchelf leaves a replaced string alone when
// a symbol name shares its bytes (tests/shared-rpath.sh); a dead copy is
// referenced by nothing, so this only decides how much of it keeps its text,
// and a store path that merely ends in a symbol name still loses the rest.
// Without the references every byte is kept. A name kept over r starts
// after the last NUL before r (else it ends before r) and at most at r.hi,
// so only those names' ends are looked up: a table has thousands of names
// and a plan a handful of dead strings.
func (sl *strLayout) unkept(r rng) []rng {
	if !sl.refsOK {
		return []rng{r}
	}
	from := uint64(0)
	if r.lo > 0 && r.lo <= uint64(len(sl.old)) {
		if n := bytes.LastIndexByte(sl.old[:r.lo], 0); n >= 0 {
			from = uint64(n) + 1
		}
	}
	out := []rng{r}
	for _, x := range sl.refs {
		if x >= from && x <= r.hi {
			out = without(out, rng{x, strEnd(sl.old, x) + 1})
		}
	}
	return out
}

// strEnd is the offset of the NUL that ends the string at x in tab (x
// itself when x lies outside tab or no NUL follows it).
func strEnd(tab []byte, x uint64) uint64 {
	if x < uint64(len(tab)) {
		if n := bytes.IndexByte(tab[x:], 0); n >= 0 {
			return x + uint64(n)
		}
	}
	return x
}

// entangled returns the offsets among offs (the old strings of changed
// entries) whose strings, NUL included, overlap another's: tail merging
// ("libfoo.so" and a path "oo.so" inside it) or a crafted table. Neither
// may be written over in place, since the write over one would change the
// other's new value.
func (f *File) entangled(offs map[uint64]int) map[uint64]bool {
	if len(offs) < 2 {
		return nil
	}
	spans := make([]rng, 0, len(offs))
	for o := range offs {
		spans = append(spans, rng{o, strEnd(f.strtab, o) + 1})
	}
	out := map[uint64]bool{}
	sweepOverlaps(spans, func(a, b int) bool {
		out[spans[a].lo], out[spans[b].lo] = true, true
		return true
	})
	return out
}

// layoutStrings gives every string entry of ents an offset in the final
// string table, cheapest first: overwrite the string it replaces when that
// one is long enough and unshared, reuse an identical string (or string
// tail) already in the table, else append.
func (f *File) layoutStrings(ents []dent) (*strLayout, error) {
	sl := &strLayout{old: f.strtab, limit: uint64(len(f.strtab))}
	keep, dropped := f.droppedStrings(ents)
	if len(dropped) == 0 && !slices.ContainsFunc(ents, func(d dent) bool { return d.changed }) {
		return sl, nil // nothing changes: the result is the table itself
	}
	for _, o := range dropped {
		s, _ := cstring(f.strtab, o)
		sl.dead = append(sl.dead, rng{o, o + uint64(len(s))})
	}
	// References that stay: symbol and version names, and unchanged entries.
	refs, err := f.stringRefs()
	refsOK := err == nil
	if err != nil && !errors.Is(err, errUnknownRefs) {
		return nil, err
	}
	// Symbol and version names only: in a dead copy the dynamic entries
	// point elsewhere, and their strings are scrubbed (unkept).
	nameRefs := len(refs)
	for o := range keep {
		refs = append(refs, o)
	}
	sl.refs, sl.refsOK = refs[:nameRefs], refsOK
	// A reference shares a string's bytes when its own string, from where
	// it points up to its NUL, overlaps them: tail merging makes it point
	// inside; a crafted table can also make it start before and run on.
	// The string of a reference ends at the first NUL from it on, so among
	// the references at or before a range's NUL the last one reaches
	// furthest: one pass over the references and one NUL search decide
	// (a file has thousands of symbols, and a plan asks this a few times).
	shared := func(r rng) bool {
		if !refsOK {
			return true
		}
		last, any := lastRef(refs, r.hi) // r.hi is the NUL, shared too
		return any && strEnd(f.strtab, last) >= r.lo
	}
	// Entries that replace a dropped string may take its bytes.
	claimed := map[uint64]int{}
	for _, d := range ents {
		if d.changed && d.origOff >= 0 {
			claimed[uint64(d.origOff)]++
		}
	}
	entangled := f.entangled(claimed)
	for i := range ents {
		d := &ents[i]
		if !d.changed || d.origOff < 0 {
			continue
		}
		o := uint64(d.origOff)
		old, _ := cstring(f.strtab, o)
		r := rng{o, o + uint64(len(old))}
		if len(d.str) > len(old) || claimed[o] > 1 || entangled[o] || shared(r) {
			continue
		}
		p := make([]byte, r.hi-o)
		copy(p, d.str) // and its NUL
		for j := len(d.str) + 1; j < len(p); j++ {
			p[j] = 'X'
		}
		sl.patches = append(sl.patches, strPatch{o, p})
		sl.overwrites = append(sl.overwrites, r)
		d.val, d.changed, d.placed = o, false, true
	}
	// Dropped strings nobody took: scrub them if unshared.
	for _, r := range sl.dead {
		if slices.ContainsFunc(sl.overwrites, func(w rng) bool { return w.overlaps(rng{r.lo, r.hi + 1}) }) {
			continue
		}
		if !shared(r) {
			sl.patches = append(sl.patches, strPatch{r.lo, bytes.Repeat([]byte{'X'}, int(r.hi-r.lo))})
			sl.scrub = append(sl.scrub, r)
		}
	}
	touched := append(slices.Clone(sl.overwrites), sl.scrub...)
	f.appendStrings(sl, ents, f.keptLimit(refs, refsOK, sl.overwrites), touched)
	return sl, nil
}

// droppedStrings are the offsets of the strings of the original dynamic
// section that the result no longer points to in the same way, and the
// offsets of those it keeps.
func (f *File) droppedStrings(ents []dent) (keep map[uint64]bool, dropped []uint64) {
	keep = map[uint64]bool{}
	for _, d := range ents {
		if d.isStr && !d.changed && d.origOff >= 0 {
			keep[uint64(d.origOff)] = true
		}
	}
	seen := map[uint64]bool{}
	for _, d := range f.Dynamic[:f.dynLen] {
		if isStringTag(d.Tag) && !keep[d.Val] && !seen[d.Val] {
			seen[d.Val] = true
			dropped = append(dropped, d.Val)
		}
	}
	return keep, dropped
}

// lastRef is the last of refs at or before hi, if any.
func lastRef(refs []uint64, hi uint64) (last uint64, any bool) {
	for _, x := range refs {
		if x <= hi && (!any || x > last) {
			last, any = x, true
		}
	}
	return last, any
}

// keptLimit is where a moved copy of the table ends: with the last string
// anything still references, so that old values earlier edits appended
// are left behind (or every edit would grow the table again). Without
// the references (refsOK false) it is the whole table.
func (f *File) keptLimit(refs []uint64, refsOK bool, overwrites []rng) uint64 {
	limit := uint64(len(f.strtab))
	if !refsOK {
		return limit
	}
	limit = min(limit, 1) // offset 0, the empty string
	// The last reference that has a NUL after it ends furthest (see
	// shared); nothing overwritten or scrubbed is shared.
	if nul := bytes.LastIndexByte(f.strtab, 0); nul >= 0 {
		if last, any := lastRef(refs, uint64(nul)); any {
			limit = max(limit, strEnd(f.strtab, last)+1)
		}
	}
	for _, r := range overwrites {
		limit = max(limit, r.hi+1)
	}
	return limit
}

// appendStrings gives each changed entry left an offset: a string
// already appended, one in the table below limit outside touched, else
// a new one at the end (the table then grows, cut at limit).
func (f *File) appendStrings(sl *strLayout, ents []dent, limit uint64, touched []rng) {
	appended := map[string]uint64{}
	for i := range ents {
		d := &ents[i]
		if !d.changed {
			continue
		}
		if v, ok := appended[d.str]; ok {
			d.val = v
			continue
		}
		if v, ok := findString(f.strtab[:limit], d.str, touched); ok {
			d.val = v
			continue
		}
		if !sl.grown {
			sl.limit = limit
		}
		d.val = sl.size()
		appended[d.str] = d.val
		sl.tail = append(append(sl.tail, d.str...), 0)
		sl.grown = true
	}
}

// findString finds s followed by NUL in tab, outside the ranges that change.
// A match may be the tail of a longer string, as linkers' tail merging does.
func findString(tab []byte, s string, avoid []rng) (uint64, bool) {
	pat := append([]byte(s), 0)
	for from := 0; from < len(tab); {
		i := bytes.Index(tab[from:], pat)
		if i < 0 {
			return 0, false
		}
		at := uint64(from + i)
		r := rng{at, at + uint64(len(pat))}
		if !slices.ContainsFunc(avoid, func(a rng) bool { return a.overlaps(rng{r.lo, r.hi}) }) {
			return at, true
		}
		from += i + 1
	}
	return 0, false
}
