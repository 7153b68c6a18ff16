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
	built  []ref
	kinds  []refKind // by symbol index (readRelocs)
	// buildRefs's: the symbols used, their names' ids, and the order in
	// which it interns them.
	uses  []refUse
	ids   []uint32
	order []int
}

// sized is b with length n, reallocated only when too small.
func sized[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// read reads n bytes at virtual address addr of f into buffer k.
func (s *scratch) read(f *elfedit.File, k int, addr, n uint64, what string) ([]byte, error) {
	if n > uint64(cap(s.bufs[k])) && n <= maxTable {
		// Grown by half at least: the next file's table is often a
		// little larger.
		s.bufs[k] = make([]byte, 0, max(n, min(uint64(cap(s.bufs[k]))*3/2, maxKept)))
	}
	b, err := f.ReadMappedInto(s.bufs[k], addr, n, what)
	if err != nil {
		return nil, outOfBounds(err)
	}
	return b, nil
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
		s.bufs[i] = upTo(b, maxKept)
	}
	s.relocs = upTo(s.relocs, maxKept/8)
	s.refs = upTo(s.refs, maxKept/8)
	s.built = upTo(s.built, maxKept/8)
	s.kinds = upTo(s.kinds, maxKept)
	s.uses = upTo(s.uses, maxKept/32)
	s.ids = upTo(s.ids, maxKept/4)
	s.order = upTo(s.order, maxKept/8)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.idle) < maxIdle {
		sp.idle = append(sp.idle, s)
	}
}

// upTo is b, or nil when its storage holds more than n elements.
func upTo[T any](b []T, n int) []T {
	if cap(b) > n {
		return nil
	}
	return b
}
