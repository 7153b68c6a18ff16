package symcheck

import (
	"debug/elf"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// query is one symbol lookup: glibc's _dl_lookup_symbol_x arguments.
type query struct {
	name      string
	gnu, sysv uint32
	ver       *version // nil: unversioned
	plt       bool     // ELF_RTYPE_CLASS_PLT: a function's PLT slot
}

func newQuery(name string, ver *version, plt bool) *query {
	return &query{name: name, gnu: elfedit.GNUHash(name), sysv: elfedit.SysVHash(name), ver: ver, plt: plt}
}

// candidates calls try with each symbol index the hash table gives for the
// name, in table order, until try returns true.
func (o *object) candidates(q *query, try func(i int) bool) {
	n := o.nsyms()
	if g := o.gnu; g != nil {
		c := uint32(32)
		if o.class == elf.ELFCLASS64 {
			c = 64
		}
		if g.buckets.len() == 0 {
			return
		}
		w := g.bloom[(q.gnu/c)&uint32(len(g.bloom)-1)]
		mask := uint64(1)<<(q.gnu%c) | uint64(1)<<((q.gnu>>g.shift)%c)
		if w&mask != mask {
			return
		}
		b := g.buckets.at(int(q.gnu % uint32(g.buckets.len())))
		if b == 0 || b < g.symoffset {
			return
		}
		for i := b; int(i) < n && int(i-g.symoffset) < g.chain.len(); i++ {
			h := g.chain.at(int(i - g.symoffset))
			if (h^q.gnu)>>1 == 0 && try(int(i)) {
				return
			}
			if h&1 != 0 {
				return
			}
		}
		return
	}
	if s := o.sysv; s != nil && s.buckets.len() > 0 {
		seen := 0
		for i := s.buckets.at(int(q.sysv % uint32(s.buckets.len()))); i != 0 && int(i) < n && int(i) < s.chain.len() && seen < n; i = s.chain.at(int(i)) {
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

// find is glibc's do_lookup_x for one object: the index of the definition
// the query binds to in o, or -1. named says o is the file the reference's
// version need names: a versioned reference that finds its name there in
// an object without symbol versions stops the loader on an assertion
// (check_match), reported as assert.
func (o *object) find(q *query, named bool) (idx int, assert bool) {
	found, versioned, nversions := -1, -1, 0
	o.candidates(q, func(i int) bool {
		s := o.sym(i)
		if s.value == 0 && s.shndx != uint16(elf.SHN_ABS) && s.typ() != elf.STT_TLS {
			return false
		}
		if q.plt && s.shndx == uint16(elf.SHN_UNDEF) {
			return false
		}
		if !allowed(s.typ()) || o.str(s.name) != q.name {
			return false
		}
		if o.versym == nil && q.ver != nil && named {
			assert = true
			return true
		}
		if o.versym != nil {
			vi := o.verIndex(i)
			if q.ver != nil {
				dv := o.versionAt(vi & 0x7fff)
				if (dv.hash != q.ver.hash || dv.name != q.ver.name) && (q.ver.hidden || dv.hash != 0 || vi&0x8000 != 0) {
					return false
				}
			} else if vi&0x7fff >= 3 {
				// Not the base or oldest version: usable only when it
				// is the one visible version of the name.
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
		return -1, true
	}
	if found < 0 && nversions == 1 {
		found = versioned
	}
	if found < 0 {
		return -1, false
	}
	// The first match decides for the object: a local or hidden one
	// ends the search in it.
	s := o.sym(found)
	switch s.bind() {
	case elf.STB_GLOBAL, elf.STB_WEAK, stbGNUUnique:
	default:
		return -1, false
	}
	if v := s.vis(); v == elf.STV_HIDDEN || v == elf.STV_INTERNAL {
		return -1, false
	}
	return found, false
}

// stbGNUUnique is STB_GNU_UNIQUE: one definition process-wide, the first
// found; for binding it is a global one.
const stbGNUUnique elf.SymBind = 10
