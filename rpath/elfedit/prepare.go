package elfedit

import (
	"encoding/binary"
	"hash/maphash"
	"reflect"
)

// A tree is written only when every file of it has been planned without
// error, so a caller plans every file first and writes them later. Planning
// and verifying each file twice doubles most of the work on small files;
// Prepare lets the write reuse the first plan, and only when the file
// still holds, in every byte the plan was made from, what it held then.
// A plan is a function of those bytes, the file's size and the edit, so
// the plan made again would be the same: reusing it skips the work, not
// a check.

// fingerprint identifies the bytes a prepared plan was made from: every
// range its file's read cache read (the head, then each window), and a
// hash of their offsets and contents under a seed of its own.
type fingerprint struct {
	spans []span
	seed  maphash.Seed
	sum   uint64
	size  int64
	edit  Edit
	// The file's values before and after the plan, which EditFile reports.
	before, after Info
}

// Prepare plans e as Plan does and, when it can, detaches the plan from
// the file for a later write: when the file was read through a read cache
// (Open, Buffers.Open) that still holds every byte it read, the planned
// result is verified as EditFile verifies it before writing, and, if keep
// (nil keeps all) accepts the bytes the plan would hold (HeldBytes), the
// plan keeps what it writes as pieces (the file's own bytes by offset,
// zeros, and only what is new as bytes of its own: detach.go) and a
// fingerprint of what it was made from. The file may then be closed, and
// EditFile with Options.Prepared writes the plan without planning or
// verifying again as long as the file still reads the same. Otherwise (a
// table larger than the cache, a file not read through one, a plan keep
// refuses) the plan is returned as Plan returns it, tied to the file, and
// EditFile plans and verifies afresh; a refused plan is verified all the
// same. keep is asked first with 0, before the plan is detached: a keep
// that refuses that (nothing may be kept: a dry run, a spent budget) is
// not asked again, and costs no detaching.
func (f *File) Prepare(e Edit, keep func(held int64) bool) (*Plan, error) {
	p, err := f.Plan(e)
	if err != nil || p.IsNoOp() {
		return p, err
	}
	c, ok := f.r.(*readCache)
	if !ok {
		return p, nil
	}
	c.mu.Lock()
	held := !c.closed && !c.bypass && !c.evicted
	c.mu.Unlock()
	if !held {
		return p, nil
	}
	after, err := p.check(&e)
	if err != nil {
		return nil, err
	}
	// Verifying read through the same cache: it must still hold all.
	// The plan is detached (its pieces found, detach.go) before keep is
	// asked what it would hold; the fingerprint is made after: hashing
	// what the cache read costs about what verifying did, and a plan keep
	// refuses has no use for it.
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holdsAll() || keep != nil && !keep(0) {
		return p, nil
	}
	d := c.detach(p)
	if keep != nil && !keep(d.held) {
		return p, nil
	}
	fp := &fingerprint{seed: maphash.MakeSeed(), size: f.size, edit: e, before: f.Info(), after: after.Info()}
	fp.spans = make([]span, len(c.reads))
	for i, w := range c.reads {
		fp.spans[i] = w.span()
	}
	fp.sum = c.sum(fp.seed)
	p.fp, p.f, p.det, p.hints = fp, nil, d, nil
	for i := range p.Steps {
		p.Steps[i].data = nil // held as pieces
	}
	return p, nil
}

// Prepared reports whether the plan is detached from its file, with a
// fingerprint EditFile can check (see Prepare).
func (p *Plan) Prepared() bool { return p.fp != nil }

// HeldBytes is the memory a prepared plan's data takes: its pieces, the
// bytes of its own they hold (what is new, and the patches of copies),
// and an allowance for the rest of the plan (detach.go). A plan not
// detached holds what it writes, less the zeros it clears with, which it
// shares.
func (p *Plan) HeldBytes() int64 {
	if p.det != nil {
		return p.det.held
	}
	var n int64
	for _, st := range p.Steps {
		if st.Kind != StepTruncate && !isZeroPage(st.data) {
			n += st.Len
		}
	}
	return n
}

// sum hashes the offsets and contents of the cache's reads, which it
// holds: the head, then its windows and prefetched ranges in the order
// they were read.
// The caller holds c.mu.
func (c *readCache) sum(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var hdr [16]byte
	for _, w := range c.reads {
		s := w.span()
		binary.LittleEndian.PutUint64(hdr[:8], uint64(s.off))
		binary.LittleEndian.PutUint64(hdr[8:], uint64(s.end))
		h.Write(hdr[:])
		h.Write(w.b)
	}
	return h.Sum64()
}

// matches reads the ranges of fp into the cache c, which must not have
// read anything yet, in the same order, and reports whether they hold
// what they held when the plan was prepared, for the same edit. Either
// way the cache keeps what it read, for what comes next.
func (c *readCache) matches(fp *fingerprint, e *Edit) bool {
	if fp.size != c.size || len(fp.spans) == 0 || !reflect.DeepEqual(&fp.edit, e) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.head != nil {
		return false
	}
	if err := c.fillHead(); err != nil || c.reads[0].span() != fp.spans[0] {
		return false
	}
	for _, s := range fp.spans[1:] {
		if s.end-s.off > windowSize {
			c.prefetch(s.off, s.end) // a prefetched range: read again whole
		} else if len(c.wins) == maxWindows {
			return false
		} else if _, err := c.fillRange(s.off, s.end); err != nil {
			return false
		}
		if c.reads[len(c.reads)-1].span() != s {
			return false
		}
	}
	return c.sum(fp.seed) == fp.sum
}
