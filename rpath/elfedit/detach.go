package elfedit

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"sort"
)

// A prepared plan (Batch.Prepare) is held while the rest of the batch is
// planned, and most of what it writes is bytes the file already has
// (moved tables, symbols renumbered by a byte or two, zeros). A detached
// plan holds each step as pieces: the file's own bytes by offset (with
// the few that differ), zeros, and only what is new as bytes of its own;
// the commit rebuilds the steps from the bytes it reads again for the
// fingerprint. A candidate source (the same offset, or a layout's hint)
// is used only for the bytes it equals: a wrong hint costs memory, never
// a byte of the result.

// srcHint says that a plan writes, at file offset out, n bytes laid out
// as a copy of the original file's bytes at src (a moved table): where a
// detached plan may refer to them instead of holding a copy.
type srcHint struct{ out, src, n uint64 }

// hint records a copy a layout made (see srcHint).
func (b *builder) hint(out, src, n uint64) {
	if n > 0 {
		b.hints = append(b.hints, srcHint{out, src, n})
	}
}

// piece is part of a detached step's bytes: n bytes, either zeros
// (src is pieceZero), literal (src is pieceLit: the detached plan's
// lit[lo:hi]), or the original file's bytes at src with the patch
// lit[lo:hi] applied (see appendPatch).
type piece struct {
	n, src int64
	lo, hi int
}

const (
	pieceLit  = -1
	pieceZero = -2
)

// pieceOverhead is what a piece costs besides its bytes, and planOverhead
// what a detached plan costs besides its pieces (the fingerprint with its
// Infos, the steps): both are counted in what a kept plan holds
// (HeldBytes), so that the budget bounds the heap, not only the bytes.
const (
	pieceOverhead = 32
	planOverhead  = 1 << 10
)

// detachBlock is the unit the comparison chooses a source for; runs of
// blocks with the same choice become one piece.
const detachBlock = 64

// hintReach is how many hints starting before a block are tried for it.
const hintReach = 4

// maxPatchShare bounds a patched copy: a block whose patch would take more
// than 1/maxPatchShare of its bytes is held as it is.
const maxPatchShare = 4

// detached is what a detached plan holds: each step's pieces, the bytes
// their literals and patches take, and the total (HeldBytes).
type detached struct {
	pieces [][]piece
	lit    []byte
	held   int64
}

// detach finds the pieces of every step of p in what the cache read. The
// caller holds c.mu, and the cache holds every byte it read (holdsAll).
func (c *readCache) detach(p *Plan) *detached {
	d := &detached{pieces: make([][]piece, len(p.Steps))}
	lit := c.bufs.lend(16<<10, false)[:0] // grown by append if need be
	slices.SortFunc(p.hints, func(a, b srcHint) int { return cmp.Compare(a.out, b.out) })
	n := 0
	for i, st := range p.Steps {
		switch {
		case st.Kind == StepTruncate:
		case isZeroPage(st.data):
			d.pieces[i] = []piece{{n: st.Len, src: pieceZero}}
		default:
			d.pieces[i] = c.piecesOf(st.data, st.Off, p.hints, &lit)
		}
		n += len(d.pieces[i])
	}
	d.lit = make([]byte, len(lit)) // lit's appends left it larger
	copy(d.lit, lit)
	c.bufs.giveBack(lit)
	d.held = planOverhead + int64(n)*pieceOverhead + int64(len(d.lit))
	return d
}

// sources lists the ranges of the file the pieces copy.
func (d *detached) sources() []span {
	var out []span
	for _, ps := range d.pieces {
		for _, pc := range ps {
			if pc.src >= 0 {
				out = append(out, span{pc.src, pc.src + pc.n})
			}
		}
	}
	return out
}

// piecesOf splits data, written at file offset out, into pieces: each
// block of it is zeros, a copy of bytes the cache holds (the continuation
// of the previous block's source, a hinted source, or the block's own
// offset) with at most a few bytes patched, or literal. Literal and patch
// bytes are appended to *lit, which the pieces index.
func (c *readCache) piecesOf(data []byte, out int64, hints []srcHint, lit *[]byte) []piece {
	var ps []piece
	next := int64(-1) // the source that would continue the last piece
	var patch []byte  // the last piece's patch, while it is a copy
	var last int64    // the end of the last patched byte in that piece
	// begin starts a piece, ending the last: a copy's patch goes to lit.
	begin := func(src int64) {
		if k := len(ps) - 1; k >= 0 && ps[k].src >= 0 && len(patch) > 0 {
			ps[k].lo = len(*lit)
			*lit = append(*lit, patch...)
			ps[k].hi = len(*lit)
		}
		patch, last = patch[:0], 0
		ps = append(ps, piece{src: src, lo: len(*lit), hi: len(*lit)})
	}
	for pos := 0; pos < len(data); {
		// Runs that continue the last piece are taken whole: a moved
		// table is megabytes of bytes the file has, and zeros as long.
		if k := len(ps) - 1; k >= 0 && (ps[k].src == pieceZero || ps[k].src >= 0 && next >= 0) {
			var n int
			if ps[k].src == pieceZero {
				n = commonPrefix(data[pos:], zeroPage)
			} else {
				n = commonPrefix(data[pos:], c.viewFrom(next))
				next += int64(n)
			}
			ps[k].n += int64(n)
			if pos += n; pos == len(data) {
				break
			}
		}
		blk := data[pos:min(pos+detachBlock, len(data))]
		at := out + int64(pos)
		pos += len(blk)
		if isZeros(blk) {
			if len(ps) == 0 || ps[len(ps)-1].src != pieceZero {
				begin(pieceZero)
			}
			ps[len(ps)-1].n += int64(len(blk))
			next = -1
			continue
		}
		best, cost := int64(-1), len(blk)/maxPatchShare
		var bestView []byte
		try := func(src int64) {
			if src < 0 || best >= 0 && cost == 0 {
				return
			}
			if v, ok := c.viewLocked(src, int64(len(blk))); ok {
				if k := patchCost(blk, v, cost); k < cost || best < 0 && k <= cost {
					best, cost, bestView = src, k, v
				}
			}
		}
		try(next)
		// The hints that start at or before at, nearest first (a few: a
		// hint missed costs memory, not bytes).
		i := sort.Search(len(hints), func(k int) bool { return hints[k].out > uint64(at) })
		for k := i - 1; k >= 0 && k >= i-hintReach; k-- {
			if h := hints[k]; uint64(at)-h.out < h.n {
				try(int64(h.src + (uint64(at) - h.out)))
			}
		}
		try(at)
		if best < 0 {
			if len(ps) == 0 || ps[len(ps)-1].src != pieceLit {
				begin(pieceLit)
			}
			*lit = append(*lit, blk...)
			ps[len(ps)-1].n += int64(len(blk))
			ps[len(ps)-1].hi = len(*lit)
			next = -1
			continue
		}
		if best != next || len(ps) == 0 || ps[len(ps)-1].src < 0 {
			begin(best)
		}
		k := &ps[len(ps)-1]
		if cost > 0 {
			patch, last = appendPatch(patch, blk, bestView, k.n, last)
		}
		k.n += int64(len(blk))
		next = best + int64(len(blk))
	}
	begin(pieceZero) // ends the last piece
	return ps[:len(ps)-1]
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for _, step := range []int{4096, 64, 1} {
		for i+step <= n && bytes.Equal(a[i:i+step], b[i:i+step]) {
			i += step
		}
	}
	return i
}

// viewFrom returns what the cache holds contiguously from off on (nil if
// nothing). The caller holds c.mu.
func (c *readCache) viewFrom(off int64) []byte {
	if c.closed || off < 0 {
		return nil
	}
	if off < int64(len(c.head)) {
		return c.head[off:]
	}
	for _, ws := range [2][]window{c.wins, c.big} {
		for _, w := range ws {
			if off >= w.off && off < w.off+int64(len(w.b)) {
				return w.b[off-w.off:]
			}
		}
	}
	return nil
}

// isZeros reports whether b is all zero bytes.
func isZeros(b []byte) bool {
	return bytes.Equal(b, zeroPage[:len(b)])
}

// diffWord marks the bytes of want[i:i+8] (fewer at the end) that differ
// from src's: byte k of the result is non-zero where byte i+k differs.
func diffWord(want, src []byte, i int) uint64 {
	if i+8 <= len(want) {
		return binary.LittleEndian.Uint64(want[i:]) ^ binary.LittleEndian.Uint64(src[i:])
	}
	var x uint64
	for j := len(want) - 1; j >= i; j-- {
		if x <<= 8; want[j] != src[j] {
			x |= 1
		}
	}
	return x
}

// patchCost is the number of bytes the patch turning src into want would
// take (two a differing byte, as appendPatch writes them when they are
// near each other), or a number above limit once it passes it.
func patchCost(want, src []byte, limit int) int {
	if bytes.Equal(want, src) {
		return 0
	}
	cost := 0
	for i := 0; i < len(want) && cost <= limit; i += 8 {
		for x := diffWord(want, src, i); x != 0; x &^= 0xff << (bits.TrailingZeros64(x) &^ 7) {
			cost += 2
		}
	}
	return cost
}

// A patch is a sequence of (gap, byte): skip gap bytes (a uvarint) of the
// copy, then write the byte. appendPatch appends the differences between
// want and src, a block at offset base of its piece; last is where the
// piece's previous patched byte ended. It returns the patch and the new
// last.
func appendPatch(patch, want, src []byte, base, last int64) ([]byte, int64) {
	for i := 0; i < len(want); i += 8 {
		for x := diffWord(want, src, i); x != 0; x &^= 0xff << (bits.TrailingZeros64(x) &^ 7) {
			j := i + bits.TrailingZeros64(x)/8
			at := base + int64(j)
			if gap := uint64(at - last); gap < 0x80 {
				patch = append(patch, byte(gap), want[j])
			} else {
				patch = append(binary.AppendUvarint(patch, gap), want[j])
			}
			last = at + 1
		}
	}
	return patch, last
}

// applyPatch writes patch over dst (see appendPatch). It reports false for
// a patch that runs past dst.
func applyPatch(dst, patch []byte) bool {
	at := uint64(0)
	for len(patch) > 0 {
		gap, n := binary.Uvarint(patch)
		if n <= 0 || len(patch) < n+1 {
			return false
		}
		at += gap
		if at >= uint64(len(dst)) {
			return false
		}
		dst[at] = patch[n]
		at++
		patch = patch[n+1:]
	}
	return true
}

// viewLocked is view for a caller that holds c.mu, and over the windows
// too: at Prepare and right after matches, none has been replaced.
func (c *readCache) viewLocked(off, n int64) ([]byte, bool) {
	if v := c.viewFrom(off); n > 0 && int64(len(v)) >= n {
		return v[:n], true
	}
	return nil, false
}

// materialize rebuilds the steps of a detached plan from the cache, which
// holds again what the plan was made from (matches), into scratch lent
// until the cache is closed. It reports false if a piece's source is not
// in the cache or its patch does not fit, and the plan is then made again.
func (c *readCache) materialize(p *Plan, d *detached) ([]Step, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	steps := make([]Step, len(p.Steps))
	for i, st := range p.Steps {
		steps[i] = st
		ps := d.pieces[i]
		if st.Kind == StepTruncate {
			continue
		}
		if len(ps) == 1 && ps[0].src == pieceZero {
			steps[i].data = zeros(uint64(st.Len))
			continue
		}
		buf := c.lendLocked(uint64(st.Len), false)
		at := int64(0)
		for _, pc := range ps {
			dst := buf[at : at+pc.n]
			switch pc.src {
			case pieceZero:
				clear(dst)
			case pieceLit:
				copy(dst, d.lit[pc.lo:pc.hi])
			default:
				v, ok := c.viewLocked(pc.src, pc.n)
				if !ok {
					// A copy across two of the cache's reads.
					for k := int64(0); k < pc.n; {
						m, ok := c.cached(dst[k:], pc.src+k)
						if !ok {
							return nil, false
						}
						k += int64(m)
					}
				} else {
					copy(dst, v)
				}
				if !applyPatch(dst, d.lit[pc.lo:pc.hi]) {
					return nil, false
				}
			}
			at += pc.n
		}
		if at != st.Len {
			return nil, false
		}
		steps[i].data = buf
	}
	return steps, true
}
