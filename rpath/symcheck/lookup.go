package symcheck

import (
	"cmp"
	"debug/elf"
	"slices"
)

// query is one symbol lookup: glibc's _dl_lookup_symbol_x arguments.
type query struct {
	n   *symName
	ver *version // nil: unversioned
	plt bool     // ELF_RTYPE_CLASS_PLT: a function's PLT slot
}

// candidates calls try with each symbol index the hash table gives for the
// name, in table order, until try returns true.
func (t *tables) candidates(n *symName, try func(i int) bool) {
	num := t.nsyms()
	if g := t.gnu; g != nil {
		if g.buckets.len() == 0 || !t.bloomPasses(n) {
			return
		}
		b := g.buckets.at(int(n.gnu % uint32(g.buckets.len())))
		if b == 0 || b < g.symoffset {
			return
		}
		for i := b; int(i) < num && int(i-g.symoffset) < g.chain.len(); i++ {
			h := g.chain.at(int(i - g.symoffset))
			if (h^n.gnu)>>1 == 0 && try(int(i)) {
				return
			}
			if h&1 != 0 {
				return
			}
		}
		return
	}
	if s := t.sysv; s != nil && s.buckets.len() > 0 {
		seen := 0
		for i := s.buckets.at(int(n.sysv % uint32(s.buckets.len()))); i != 0 && int(i) < num && int(i) < s.chain.len() && seen < num; i = s.chain.at(int(i)) {
			if try(int(i)) {
				return
			}
			seen++
		}
	}
}

// allowed is glibc's ALLOWED_STT: the symbol types a lookup can bind to.
func allowed(t elf.SymType) bool {
	switch t {
	case elf.STT_NOTYPE, elf.STT_OBJECT, elf.STT_FUNC, elf.STT_COMMON, elf.STT_TLS, elf.STT_GNU_IFUNC:
		return true
	}
	return false
}

// defines says whether a lookup of s's name may stop at s, whatever it
// asks: do_lookup_x's checks that do not depend on the query.
func defines(s sym) bool {
	if s.value == 0 && s.shndx != uint16(elf.SHN_ABS) && s.typ() != elf.STT_TLS {
		return false
	}
	return allowed(s.typ())
}

// cand is a symbol a summary keeps: one a lookup of its name meets in the
// hash table's walk and that passes the checks of defines.
type cand struct {
	id    uint32 // the name's
	vi    uint16 // .gnu.version entry, hidden bit included
	info  uint8
	other uint8
	undef bool // SHN_UNDEF (a PLT slot's address, in an executable)
}

// summary is an object's answer to every lookup of a name interned before
// it was made: for each such name, the symbols the loader's walk of the
// hash table meets, in that order. It is what find needs of the symbol,
// string, version-index and hash tables, a few percent of them: a tree's
// files define hundreds of thousands of names and import a few thousand.
type summary struct {
	covered uint32 // names with a smaller id are answered
	cands   []cand // by name id; in walk order within one
	// at finds a name's first cand: open-addressed by the name's id, each
	// slot id+1 in the high half and the cand's index in the low one, 0
	// when empty; at least half of them empty. nil without cands.
	at []uint64
}

// all is the summary of an object that defines nothing (no DT_SYMTAB);
// none answers for one name: the object does not define it.
var (
	all  = &summary{covered: ^uint32(0)}
	none = &summary{}
)

// of is the candidates of the name with the given id.
func (s *summary) of(id uint32) []cand {
	i, ok := s.first(id)
	if !ok {
		return nil
	}
	j := i + 1
	for j < len(s.cands) && s.cands[j].id == id {
		j++
	}
	return s.cands[i:j]
}

// has says whether the summary has a candidate of the name id.
func (s *summary) has(id uint32) bool {
	_, ok := s.first(id)
	return ok
}

// first is the index of the first candidate of the name id.
func (s *summary) first(id uint32) (int, bool) {
	if len(s.at) == 0 {
		return 0, false
	}
	mask := uint32(len(s.at) - 1)
	for k := slot(id) & mask; ; k = (k + 1) & mask {
		switch e := s.at[k]; uint32(e >> 32) {
		case id + 1:
			return int(uint32(e)), true
		case 0:
			return 0, false
		}
	}
}

// slot spreads name ids, which are dense, over a table (Fibonacci
// hashing: the high bits of the product are the well mixed ones).
func slot(id uint32) uint32 { return uint32(uint64(id) * 0x9e3779b97f4a7c15 >> 32) }

// index makes s.at for s.cands, which are sorted by name.
func (s *summary) index() {
	names := 0
	for k, c := range s.cands {
		if k == 0 || s.cands[k-1].id != c.id {
			names++
		}
	}
	if names == 0 {
		return
	}
	size := 4
	for size < 2*names {
		size *= 2
	}
	s.at = make([]uint64, size)
	mask := uint32(size - 1)
	for k, c := range s.cands {
		if k > 0 && s.cands[k-1].id == c.id {
			continue
		}
		j := slot(c.id) & mask
		for s.at[j] != 0 {
			j = (j + 1) & mask
		}
		s.at[j] = uint64(c.id+1)<<32 | uint64(k)
	}
}

// summarize makes t's summary for the names ns holds now.
func (t *tables) summarize(ns *names) *summary {
	if t.gnu != nil {
		return t.summarizeGNU(ns)
	}
	var found []*symName
	covered := ns.covered()
	for i := range t.nsyms() {
		if s := t.sym(i); defines(s) {
			if n := ns.lookup(t.strBytes(s.name)); n != nil && n.id < covered {
				found = append(found, n)
			}
		}
	}
	slices.SortFunc(found, func(a, b *symName) int { return int(a.id) - int(b.id) })
	found = slices.Compact(found)
	sum := &summary{covered: covered}
	for _, n := range found {
		t.candidates(n, func(i int) bool {
			s := t.sym(i)
			if defines(s) && string(t.strBytes(s.name)) == n.s {
				sum.cands = append(sum.cands, cand{id: n.id, vi: t.verIndex(i), info: s.info, other: s.other, undef: s.shndx == uint16(elf.SHN_UNDEF)})
			}
			return false
		})
	}
	sum.cands = slices.Clone(sum.cands) // of its own size: kept for the run
	sum.index()
	return sum
}

// summarizeGNU is summarize over .gnu.hash in one pass in table order (a
// big table is read a window at a time): symbol i is a candidate of name n
// exactly when candidates' walk for n meets it: n passes the Bloom filter,
// n's bucket starts within i's chain at or before i, and i's chain value
// has n's hash. The hash order of the table is not the order of the
// string table, so a string table read a string at a time is read in a
// second pass, in the order of the names' offsets: each of its windows
// is read once, not once a symbol.
func (t *tables) summarizeGNU(ns *names) *summary {
	g := t.gnu
	covered := ns.covered()
	sum := &summary{covered: covered}
	lo, num := int(g.symoffset), t.nsyms()
	nb := uint32(g.buckets.len())
	// match says whether the name of symbol i, whose chain starts at
	// chainStart, is a name the summary answers for, and which.
	match := func(name []byte, h uint32, i, chainStart int) *symName {
		n := ns.lookupHashed(name, h)
		if n == nil || n.id >= covered || (h^n.gnu)>>1 != 0 || nb == 0 || !t.bloomPasses(n) {
			return nil
		}
		b := int(g.buckets.at(int(n.gnu % nb)))
		if b == 0 || b < lo || chainStart > b || b > i {
			return nil
		}
		return n
	}
	// With a string table read a string at a time, the symbols that may
	// define an interned name, in table order.
	type pending struct {
		name, h       uint32
		i, chainStart int
	}
	var later []pending
	sparse := t.strs.f != nil
	chainStart := lo // the first index of i's chain
	for i := lo; i < num && i-lo < g.chain.len(); i++ {
		h := g.chain.at(i - lo)
		if ns.mayHave(h) {
			if s := t.sym(i); defines(s) {
				if sparse {
					later = append(later, pending{s.name, h, i, chainStart})
				} else if n := match(t.strBytes(s.name), h, i, chainStart); n != nil {
					sum.cands = append(sum.cands, cand{id: n.id, vi: t.verIndex(i), info: s.info, other: s.other, undef: s.shndx == uint16(elf.SHN_UNDEF)})
				}
			}
		}
		if h&1 != 0 {
			chainStart = i + 1
		}
	}
	if sparse {
		slices.SortFunc(later, func(a, b pending) int { return cmp.Compare(a.name, b.name) })
		type hit struct {
			i  int
			id uint32
		}
		var hits []hit
		for _, p := range later {
			if n := match(t.strBytes(p.name), p.h, p.i, p.chainStart); n != nil {
				hits = append(hits, hit{p.i, n.id})
			}
		}
		// In table order again, as the walk meets them.
		slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.i, b.i) })
		for _, x := range hits {
			s := t.sym(x.i)
			sum.cands = append(sum.cands, cand{id: x.id, vi: t.verIndex(x.i), info: s.info, other: s.other, undef: s.shndx == uint16(elf.SHN_UNDEF)})
		}
	}
	sum.cands = byName(sum.cands)
	sum.index()
	return sum
}

// byName is cands in a slice of their own size (kept for the run), sorted
// by name and in table order within one (the walk's order): sorted as
// keys of name and position, faster than a stable sort of the cands.
func byName(cands []cand) []cand {
	keys := make([]uint64, len(cands))
	for k, c := range cands {
		keys[k] = uint64(c.id)<<32 | uint64(k)
	}
	slices.Sort(keys)
	out := make([]cand, len(cands))
	for j, k := range keys {
		out[j] = cands[uint32(k)]
	}
	return out
}

// bloomPasses is candidates' first test: the Bloom filter of .gnu.hash.
func (t *tables) bloomPasses(n *symName) bool {
	g := t.gnu
	word, mask := bloomBits(n.gnu, g.shift, wordLog(t.o.class))
	w := g.bloom.at(int(word & uint32(g.bloom.len()-1)))
	return w&mask == mask
}

// bloomBits is where a .gnu.hash Bloom filter of words of 1<<log bits
// keeps a name whose hash is h: word h/bits, and in it bits h%bits and
// (h>>shift)%bits. By shifts and masks, bits being a power of two: a
// division takes tens of cycles, and every lookup asks.
func bloomBits(h, shift, log uint32) (word uint32, mask uint64) {
	m := uint32(1)<<log - 1
	return h >> log, uint64(1)<<(h&m) | uint64(1)<<(h>>shift&m)
}

// wordLog is the log2 of the bits of a Bloom filter word: the class's
// word size.
func wordLog(c elf.Class) uint32 {
	if c == elf.ELFCLASS64 {
		return 6
	}
	return 5
}

// filter is a file's .gnu.hash Bloom filter, folded to at most maxFilter
// words (word i into i mod the new size, both powers of two): it passes at
// least every name the file's own passes, and is kept for the whole check.
type filter struct {
	words []uint64
	shift uint32
	log   uint32 // of the bits of a word, 32 or 64
	empty bool   // no buckets: the file defines nothing a lookup finds
}

const maxFilter = 64

func newFilter(g *gnuHash, log uint32) *filter {
	f := &filter{shift: g.shift, log: log, empty: g.buckets.len() == 0}
	f.words = make([]uint64, min(g.bloom.len(), maxFilter))
	for i := range g.bloom.len() {
		f.words[i&(len(f.words)-1)] |= g.bloom.at(i)
	}
	return f
}

// mayHave says whether o may define n. Binding asks it of every object of
// a scope for every reference, most of them in vain. Where o's summary
// answers for n, the summary's table says, exactly; else o's Bloom
// filter, which passes names o lacks (mayDefine).
func (o *object) mayHave(n *symName) bool {
	if s := o.sum.Load(); s != nil && n.id < s.covered {
		return s.has(n.id)
	}
	return o.mayDefine(n)
}

// mayDefine says whether o's hash table may hold n, by its Bloom filter:
// when not, the walk cannot find it and no summary is needed to say so
// (nor made: mayHave's test where o's summary does not answer for n).
func (o *object) mayDefine(n *symName) bool {
	return o.filter == nil || o.filter.mayDefine(n)
}

// mayDefine says whether the hash table's walk for n may find anything.
func (f *filter) mayDefine(n *symName) bool {
	if f.empty {
		return false
	}
	word, mask := bloomBits(n.gnu, f.shift, f.log)
	w := f.words[word&uint32(len(f.words)-1)]
	return w&mask == mask
}

// find is glibc's do_lookup_x for one object, over its summary (which
// must answer for q's name): the definition the query binds to in o.
// named says o is the file the reference's version need names: a
// versioned reference that finds its name there in an object without
// symbol versions stops the loader on an assertion (check_match),
// reported as assert.
func (o *object) find(s *summary, q query, named bool) (def cand, ok, assert bool) {
	found, versioned, nversions := -1, -1, 0
	cs := s.of(q.n.id)
	for k, c := range cs {
		if q.plt && c.undef {
			continue
		}
		if !o.hasVersym && q.ver != nil && named {
			return cand{}, false, true
		}
		if o.hasVersym {
			vi := c.vi
			if q.ver != nil {
				dv := o.versionAt(vi & 0x7fff)
				if (dv.hash != q.ver.hash || dv.name != q.ver.name) && (q.ver.hidden || dv.hash != 0 || vi&0x8000 != 0) {
					continue
				}
			} else if vi&0x7fff >= 3 {
				// Not the base or oldest version: usable only when it
				// is the one visible version of the name.
				if vi&0x8000 == 0 {
					if nversions == 0 {
						versioned = k
					}
					nversions++
				}
				continue
			}
		}
		found = k
		break
	}
	if found < 0 && nversions == 1 {
		found = versioned
	}
	if found < 0 {
		return cand{}, false, false
	}
	// The first match decides for the object: a local or hidden one
	// ends the search in it.
	c := cs[found]
	switch elf.ST_BIND(c.info) {
	case elf.STB_GLOBAL, elf.STB_WEAK, stbGNUUnique:
	default:
		return cand{}, false, false
	}
	if v := elf.ST_VISIBILITY(c.other); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
		return cand{}, false, false
	}
	return c, true, false
}

// stbGNUUnique is STB_GNU_UNIQUE: one definition process-wide, the first
// found; for binding it is a global one.
const stbGNUUnique elf.SymBind = 10
