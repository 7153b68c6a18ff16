package elfedit

import (
	"cmp"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"io"
	"reflect"
	"slices"
	"syscall"
	"time"
)

// A batch is written only when every file of it has been planned without
// error, so a caller plans every file first and writes them later. Planning
// and verifying each file twice doubles most of the work on small files;
// Batch.Prepare lets the commit reuse the first plan, and only when the file
// still holds, in every byte the plan was made from, what it held then.
// A plan is a function of those bytes, the file's size and the edit, so
// the plan made again would be the same: reusing it skips the work, not
// a check.

// A settled file (its ctime older than the read by more than the
// kernel's stamps are coarse) that still has the identity it had when it
// was read holds the same bytes: every write sets ctime. Its fingerprint
// hashes only the bytes the write takes from the file, so the write does
// not read the whole file again; any other file's hashes every byte read.

// Settling times (see fileIdent.settled): a ctime with nanoseconds is
// stamped from the kernel's coarse clock (a tick behind, 10 ms at most)
// at its file system's granularity (1 ns to 10 ms where it keeps
// nanoseconds at all); one in whole seconds may be FAT's 2 s.
const (
	settleFine   = 100 * time.Millisecond
	settleCoarse = 3 * time.Second
)

// fileIdent is what stat says of a file that changes with its bytes.
type fileIdent struct {
	dev, ino, nlink uint64
	size            int64
	mtime, ctime    syscall.Timespec
}

func identOf(st *syscall.Stat_t) fileIdent {
	return fileIdent{dev: uint64(st.Dev), ino: uint64(st.Ino), nlink: uint64(st.Nlink), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// settled reports whether the file's ctime is old enough, at the time at
// (taken before the stat the identity comes from), that any later write
// stamps a different one.
func (id fileIdent) settled(at time.Time) bool {
	margin := settleFine
	if id.ctime.Nsec == 0 {
		margin = settleCoarse
	}
	return time.Unix(id.ctime.Unix()).Before(at.Add(-margin))
}

// fingerprint identifies the bytes a prepared plan was made from: every
// range its file's read cache read (the head, then each window), and a
// hash of their offsets and contents under a seed of its own; or, for a
// settled file (ident set), the file's identity and a hash of the ranges
// the write takes from the file.
type fingerprint struct {
	spans []span
	seed  maphash.Seed
	sum   uint64
	size  int64
	ident *fileIdent
	edit  Edit
	// The file's values before and after the plan, which the commit reports.
	before, after Info
}

// prepare plans e as Plan does and, when it can, detaches the plan from
// the file for a later write: when the file was read through a read cache
// that still holds every byte it read, the result is verified as EditFile
// verifies it, and, if keep (nil keeps all) accepts the bytes the plan
// would hold (HeldBytes), the plan keeps its writes as pieces (detach.go)
// and a fingerprint of what it was made from. A commit given it
// (batched.plan) then writes it without planning again while the file
// reads the same. Otherwise the plan is returned tied to the file. keep is
// asked first with 0: a keep that refuses that is not asked again.
func (f *File) prepare(e Edit, keep func(held int64) bool) (*Plan, error) {
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
	if c.settled != nil {
		fp.ident = c.settled
		fp.spans = mergeSpans(append(d.sources(), p.undoSpans()...))
	} else {
		fp.spans = make([]span, len(c.reads))
		for i, w := range c.reads {
			fp.spans[i] = w.span()
		}
	}
	sum, ok := c.sumSpans(fp.seed, fp.spans)
	if !ok {
		return p, nil
	}
	fp.sum = sum
	p.fp, p.f, p.det, p.hints = fp, nil, d, nil
	for i := range p.Steps {
		p.Steps[i].data = nil // held as pieces
	}
	return p, nil
}

// Prepared reports whether the plan is detached from its file, with a
// fingerprint its commit can check (see Batch.Prepare).
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

// sumSpans hashes the offsets and contents of spans, which the cache
// holds, under seed; false if it does not hold one whole. The caller
// holds c.mu.
func (c *readCache) sumSpans(seed maphash.Seed, spans []span) (uint64, bool) {
	var h maphash.Hash
	h.SetSeed(seed)
	var hdr [16]byte
	for _, s := range spans {
		binary.LittleEndian.PutUint64(hdr[:8], uint64(s.off))
		binary.LittleEndian.PutUint64(hdr[8:], uint64(s.end))
		h.Write(hdr[:])
		for at := s.off; at < s.end; {
			v := c.viewFrom(at)
			if len(v) == 0 {
				return 0, false
			}
			v = v[:min(int64(len(v)), s.end-at)]
			h.Write(v)
			at += int64(len(v))
		}
	}
	return h.Sum64(), true
}

// mergeSpansGap is the largest gap between two ranges a settled file's
// write reads (mergeSpans) that is read along with them rather than
// costing a read of its own.
const mergeSpansGap = 16 << 10

// mergeSpans sorts spans and joins those that overlap or lie within
// mergeSpansGap of each other. Empty spans are dropped.
func mergeSpans(spans []span) []span {
	spans = slices.DeleteFunc(spans, func(s span) bool { return s.end <= s.off })
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.off <= out[n-1].end+mergeSpansGap {
			out[n-1].end = max(out[n-1].end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// holdsAgain reports whether the file c reads, whose stat is st, still
// holds what the plan fingerprinted by fp was made from, for the same
// edit: for a settled file, the same identity and the same bytes in the
// ranges the write takes from the file, which it reads (readSpans); for
// another, every byte it read (matches).
func (c *readCache) holdsAgain(fp *fingerprint, st *syscall.Stat_t, e *Edit) bool {
	if fp.ident == nil {
		return c.matches(fp, e)
	}
	return identOf(st) == *fp.ident && reflect.DeepEqual(&fp.edit, e) && c.readSpans(fp)
}

// readSpans reads the ranges of fp into the cache c, which must not have
// read anything yet, each whole, and reports whether they hash as they
// did when the plan was prepared. The cache keeps what it read.
func (c *readCache) readSpans(fp *fingerprint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.head != nil || len(c.reads) > 0 {
		return false
	}
	for _, s := range fp.spans {
		buf := c.lendLocked(uint64(s.end-s.off), false)
		m, err := c.f.ReadAt(buf, s.off)
		if err != nil && !errors.Is(err, io.EOF) || int64(m) != s.end-s.off {
			return false
		}
		c.big = append(c.big, window{off: s.off, b: buf[:m]})
		c.reads = append(c.reads, window{s.off, buf[:m]})
	}
	sum, ok := c.sumSpans(fp.seed, fp.spans)
	return ok && sum == fp.sum
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
	sum, ok := c.sumSpans(fp.seed, fp.spans)
	return ok && sum == fp.sum
}
