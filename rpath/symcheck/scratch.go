package symcheck

import (
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// The scratch buffers of one pass over an object's tables.
const (
	bufStr = iota
	bufSym
	bufVersym
	bufHash
	bufSysv
	bufReloc
	nbufs
)

// maxKept is the largest buffer a scratch keeps between passes: a few
// files have tables of tens of MiB, and kept they would pin them.
const maxKept = 1 << 20

// maxIdle is how many scratches the pool keeps: one a job is the most a
// check uses at once.
const maxIdle = 2

// scratch is the buffers one pass reads tables into; what a pass keeps
// of them it copies.
type scratch struct {
	bufs   [nbufs][]byte
	relocs []uint64
	refs   []symRef
}

// read reads n bytes at virtual address addr of f into buffer k.
func (s *scratch) read(f *elfedit.File, k int, addr, n uint64, what string) ([]byte, error) {
	if n > uint64(cap(s.bufs[k])) && n <= maxTable {
		// Grown by half at least: the next file's table is often a
		// little larger.
		s.bufs[k] = make([]byte, 0, max(n, min(uint64(cap(s.bufs[k]))*3/2, maxKept)))
	}
	return f.ReadMappedInto(s.bufs[k], addr, n, what)
}

// scratchPool lends scratches to the passes of one Checker. Unlike a
// sync.Pool it keeps them across collections, which under a tight heap
// limit come every few files.
type scratchPool struct {
	mu   sync.Mutex
	idle []*scratch
}

func (sp *scratchPool) get() *scratch {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if n := len(sp.idle); n > 0 {
		s := sp.idle[n-1]
		sp.idle = sp.idle[:n-1]
		return s
	}
	return &scratch{}
}

func (sp *scratchPool) put(s *scratch) {
	for i, b := range s.bufs {
		if cap(b) > maxKept {
			s.bufs[i] = nil
		}
	}
	if cap(s.relocs) > maxKept/8 {
		s.relocs = nil
	}
	if cap(s.refs) > maxKept/8 {
		s.refs = nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.idle) < maxIdle {
		sp.idle = append(sp.idle, s)
	}
}

// symName is an interned symbol name with its hashes. A summary answers
// for the names interned before it was made (id below its count).
type symName struct {
	s         string
	gnu, sysv uint32
	id        uint32
}

// names interns the names references use: the few a tree's files import
// (about 22,000 over /usr) against the hundreds of thousands they define.
type names struct {
	mu   sync.RWMutex
	m    map[string]*symName
	list []*symName // by id
	// strs interns the version and file names of version records, the
	// same few in most files.
	strs map[string]string
	// gnu has bit h>>1 & gnuMask set for each name's GNU hash h: a
	// symbol whose .gnu.hash chain value misses it has none of the names.
	gnu []uint64
}

// gnuMask sizes names.gnu: 2^20 bits (128 KiB), a few percent of them set
// by the names a tree imports.
const gnuMask = 1<<20 - 1

// mayHave says whether a symbol whose .gnu.hash chain value is h may have
// one of the names; the caller holds ns.mu.
func (ns *names) mayHave(h uint32) bool {
	b := h >> 1 & gnuMask
	return ns.gnu != nil && ns.gnu[b/64]&(1<<(b%64)) != 0
}

// intern returns b's name, made if new.
func (ns *names) intern(b []byte) *symName {
	ns.mu.RLock()
	n := ns.m[string(b)]
	ns.mu.RUnlock()
	if n != nil {
		return n
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if n = ns.m[string(b)]; n != nil {
		return n
	}
	if ns.m == nil {
		ns.m = map[string]*symName{}
		ns.gnu = make([]uint64, (gnuMask+1)/64)
	}
	s := string(b)
	n = &symName{s: s, gnu: elfedit.GNUHash(s), sysv: elfedit.SysVHash(s), id: uint32(len(ns.m))}
	ns.m[s] = n
	ns.list = append(ns.list, n)
	bit := n.gnu >> 1 & gnuMask
	ns.gnu[bit/64] |= 1 << (bit % 64)
	return n
}

// byID is the name with the given id.
func (ns *names) byID(id uint32) *symName {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.list[id]
}

// str is s, interned.
func (ns *names) str(s string) string {
	ns.mu.RLock()
	t, ok := ns.strs[s]
	ns.mu.RUnlock()
	if ok {
		return t
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if t, ok := ns.strs[s]; ok {
		return t
	}
	if ns.strs == nil {
		ns.strs = map[string]string{}
	}
	ns.strs[s] = s
	return s
}
