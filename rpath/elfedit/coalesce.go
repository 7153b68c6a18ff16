package elfedit

import (
	"cmp"
	"slices"
	"strings"
	"syscall"
)

// A plan's steps are its writes, and on a tree of small files their
// number is much of the cost: each is a system call. coalesce merges
// writes of the same kind that follow each other in a plan and touch the
// same pages: unused and neutral bytes together, hygiene with hygiene. The commit stays after every unused and neutral
// write and before every hygiene write, so a plan keeps its crash-safe
// order; it takes in the hygiene writes that follow it in the file
// (joinCommit). A merged write covers its parts and the bytes
// between them, written as they are at that point of the plan (the
// original bytes before the commit, the result's after it), so the file
// goes through the same states a loader could see, with fewer stops in
// between.

// mergeGap bounds the bytes between two writes that coalesce fills in,
// unless the plan writes all but at most one page between them anyway.
// Below a page, those bytes lie in pages the two writes dirty anyway; past
// it, mostly in pages other writes of the plan dirty (a renumbered symbol
// table between an old interpreter and an old string table that are both
// cleared, with the unchanged undefined symbols before it). The merged
// write then adds at most one page to write back, as a gap of a page
// would, and saves a system call (a fifth write for the second clearing
// was common on trees of small files: bench/HISTORY.md).
const mergeGap = 4096

// pageSize is the unit of write-back that the merge rule counts in.
const pageSize = 4096

// mergeMax bounds a merged write: past it, a copy of the parts into one
// buffer costs more than the system calls it saves.
const mergeMax = 1 << 20

// coalesce returns steps with each run of steps of one kind merged where
// they overlap, touch, or lie less than mergeGap apart with the bytes
// between them at hand (in the read cache, or a reader that is not a
// file). A merged write takes the place of its first part. Commits and
// truncations never merge.
func (f *File) coalesce(steps []Step) []Step {
	if len(steps) < 2 {
		return steps
	}
	dirty := dirtyPages(steps)
	var out []Step
	for i := 0; i < len(steps); {
		k := steps[i].Kind
		j := i + 1
		for k != StepCommit && k != StepTruncate && j < len(steps) && f.mergeable(steps[j-1], steps[j]) {
			j++
		}
		if j-i < 2 {
			out = append(out, steps[i:j]...)
		} else {
			out = append(out, f.merge(steps[i:j], out, dirty)...)
		}
		i = j
	}
	return f.joinCommit(out, dirty)
}

// mergeable reports whether steps a and b, one after the other, may be
// in one run of merged writes: writes of one kind, or an unused and a
// neutral write inside the file. Both come before the commit and change
// nothing a loader reads, each alone or together, so a write of both is
// neutral: the padding layout's new string table (unused) and the
// extended first PT_LOAD (neutral) lie a few hundred bytes apart. A
// region past the old end stays a write of its own, unused.
func (f *File) mergeable(a, b Step) bool {
	if a.Kind == b.Kind {
		return true
	}
	inside := func(st Step) bool {
		return (st.Kind == StepUnused || st.Kind == StepNeutral) && st.Off+st.Len <= f.size
	}
	return inside(a) && inside(b)
}

// near reports whether a write at off may be merged with one that ends at
// end (end <= off): the bytes between lie in the file, and are fewer than
// mergeGap or all but at most one page of them are dirtied anyway.
func (f *File) near(dirty []rng, end, off int64) bool {
	return off-end <= 0 || off <= f.size && (off-end < mergeGap || unwritten(dirty, end, off) <= 1)
}

// joinCommit merges into the commit the hygiene writes that follow it in
// the file, touching it or near it, in one write from the commit's first
// byte (most small files' plans clear the old interpreter or string table
// right after the header table the commit writes). The order stays
// crash-safe: a killed write leaves a prefix, so the commit's bytes land
// before the clearing they make safe. Hygiene before the commit stays a
// write of its own; against a power loss, Apply with sync writes the two
// parts apart with a flush between them (Step.head).
func (f *File) joinCommit(steps []Step, dirty []rng) []Step {
	ci := slices.IndexFunc(steps, func(s Step) bool { return s.Kind == StepCommit })
	if ci < 0 {
		return steps
	}
	c := steps[ci]
	var after []int // the hygiene writes after the commit, by offset
	for k := ci + 1; k < len(steps); k++ {
		if steps[k].Kind == StepHygiene {
			after = append(after, k)
		}
	}
	slices.SortFunc(after, func(a, b int) int { return cmp.Compare(steps[a].Off, steps[b].Off) })
	lo, hi := c.Off, c.Off+c.Len
	var take []int
	for _, k := range after {
		st := steps[k]
		if st.Off < hi || !f.near(dirty, hi, st.Off) || st.Off+st.Len-lo > mergeMax {
			break
		}
		take = append(take, k)
		hi = st.Off + st.Len
	}
	if len(take) == 0 {
		return steps
	}
	// A hygiene write left apart that overlaps a joined one would now run
	// after it, and win where it lost: leave them all apart then.
	for _, k := range after[len(take):] {
		if st := steps[k]; st.Off < hi && st.Off+st.Len > lo {
			return steps
		}
	}
	// The bytes between are as they are after the steps before the
	// commit (the commit does not reach them).
	parts := []Step{c}
	whats := []string{c.What}
	for _, k := range take {
		parts = append(parts, steps[k])
		whats = append(whats, steps[k].What)
	}
	buf, ok := f.joinBytes(lo, hi, parts, steps[:ci])
	if !ok {
		return steps
	}
	out := make([]Step, 0, len(steps)-len(take))
	for k, st := range steps {
		switch {
		case k == ci:
			out = append(out, Step{Kind: StepCommit, What: strings.Join(whats, "; "), Off: lo, Len: hi - lo, data: buf, head: c.Len})
		case !slices.Contains(take, k):
			out = append(out, st)
		}
	}
	return out
}

// dirtyPages returns the pages the steps write (page numbers), as sorted,
// disjoint runs.
func dirtyPages(steps []Step) []rng {
	var runs []rng
	for _, st := range steps {
		if st.Kind != StepTruncate && st.Len > 0 {
			runs = append(runs, rng{uint64(st.Off / pageSize), uint64((st.Off+st.Len-1)/pageSize + 1)})
		}
	}
	return union(runs)
}

// unwritten counts the pages of [lo, hi) bytes that no run of pages covers.
func unwritten(runs []rng, lo, hi int64) int64 {
	first, end := uint64(lo/pageSize), uint64((hi-1)/pageSize+1)
	n := int64(end - first)
	for _, r := range runs {
		if r.hi > first && r.lo < end {
			n -= int64(min(r.hi, end) - max(r.lo, first))
		}
	}
	return n
}

// merge coalesces group, steps of one kind (or of kinds mergeable), into
// as few writes as it can;
// before are the steps that run before them (whose bytes the gaps after
// the commit must show), dirty the pages the whole plan writes.
func (f *File) merge(group, before []Step, dirty []rng) []Step {
	idx := make([]int, len(group))
	for k := range idx {
		idx[k] = k
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(group[a].Off, group[b].Off) })
	type cluster struct {
		lo, hi  int64
		members []int // indexes into group
		first   int   // smallest member index: the cluster's place in the order
		kind    StepKind
	}
	var cs []*cluster
	for _, k := range idx {
		st := group[k]
		if n := len(cs); n > 0 {
			c := cs[n-1]
			// Writes of two kinds (mergeable) join only when the bytes
			// between are fewer than mergeGap: in pages they dirty.
			join := f.near(dirty, c.hi, st.Off) && (st.Kind == c.kind || st.Off-c.hi < mergeGap)
			if join && max(c.hi, st.Off+st.Len)-c.lo <= mergeMax {
				c.hi = max(c.hi, st.Off+st.Len)
				c.members = append(c.members, k)
				c.first = min(c.first, k)
				continue
			}
		}
		cs = append(cs, &cluster{lo: st.Off, hi: st.Off + st.Len, members: []int{k}, first: k, kind: st.Kind})
	}
	slices.SortFunc(cs, func(a, b *cluster) int { return a.first - b.first })
	var out []Step
	for _, c := range cs {
		if len(c.members) == 1 {
			out = append(out, group[c.members[0]])
			continue
		}
		slices.Sort(c.members) // later steps win where parts overlap
		parts := make([]Step, len(c.members))
		for i, k := range c.members {
			parts[i] = group[k]
		}
		buf, ok := f.joinBytes(c.lo, c.hi, parts, before)
		if !ok {
			// The bytes between are not at hand: the parts stay apart.
			out = append(out, parts...)
			continue
		}
		var whats []string
		for _, st := range parts {
			if !slices.Contains(whats, st.What) {
				whats = append(whats, st.What)
			}
		}
		kind := parts[0].Kind
		for _, st := range parts {
			if st.Kind == StepNeutral {
				kind = StepNeutral // with unused parts (mergeable)
			}
		}
		out = append(out, Step{Kind: kind, What: strings.Join(whats, "; "), Off: c.lo, Len: c.hi - c.lo, data: buf})
	}
	return out
}

// joinBytes returns, in the file's scratch, the bytes of [lo, hi) that
// writing parts in their order leaves (a later part wins where two
// overlap), and between them the bytes as they are after the steps before
// (stateAt); ok is false when those are not at hand.
func (f *File) joinBytes(lo, hi int64, parts, before []Step) ([]byte, bool) {
	covered := make([]rng, len(parts))
	for i, st := range parts {
		covered[i] = rng{uint64(st.Off), uint64(st.Off + st.Len)}
	}
	// Every byte of it is written below: a part or a gap.
	buf := f.scratchToRead(uint64(hi - lo))
	at := lo
	for _, r := range append(union(covered), rng{uint64(hi), uint64(hi)}) {
		if gap := int64(r.lo); gap > at && !f.stateAt(buf[at-lo:gap-lo], at, before) {
			return nil, false
		}
		at = max(at, int64(r.hi))
	}
	for _, st := range parts {
		copy(buf[st.Off-lo:], st.data)
	}
	return buf, true
}

// stateAt fills b with the bytes at off as they are after the steps
// before: the original bytes, with those steps' writes over them. It
// reports false when the original bytes would take a read of the file
// (a read cache that does not hold them) or lie past its end.
func (f *File) stateAt(b []byte, off int64, before []Step) bool {
	if off < 0 || off+int64(len(b)) > f.size {
		return false
	}
	if c, ok := f.r.(*readCache); ok {
		if !c.cachedOnly(b, off) {
			return false
		}
	} else if _, err := f.r.ReadAt(b, off); err != nil {
		return false
	}
	for _, st := range before {
		if st.Kind == StepTruncate {
			continue
		}
		lo, hi := max(off, st.Off), min(off+int64(len(b)), st.Off+st.Len)
		if lo < hi {
			copy(b[lo-off:hi-off], st.data[lo-st.Off:hi-st.Off])
		}
	}
	return true
}

// zeroPage is zero bytes, never written to: the data of the steps that
// clear (an old string table, moved sections), which plans then neither
// allocate nor hold. It is a read-only anonymous mapping, outside the Go
// heap: its pages, only ever read, are the kernel's one zero page, so even
// a library's megabytes of old string table are cleared without a buffer
// (a heap slice would count against the collector's heap goal, and a
// fresh one per plan was, on a tree of libraries, a twentieth of all that
// planning allocated). A write to it faults, as it should. Where the
// mapping cannot be made, a heap slice of 1 MiB stands in.
var zeroPage = func() []byte {
	b, err := syscall.Mmap(-1, 0, zeroMax, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]byte, 1<<20)
	}
	return b
}()

// zeroMax is the size of the zero mapping: virtual memory only, larger
// than any string table a loader would accept in practice.
const zeroMax = 256 << 20

// zeros returns n zero bytes that no one may write to.
func zeros(n uint64) []byte {
	if n <= uint64(len(zeroPage)) {
		return zeroPage[:n:n]
	}
	return make([]byte, n)
}

// isZeroPage reports whether b is a slice of zeroPage.
func isZeroPage(b []byte) bool {
	return len(b) > 0 && &b[0] == &zeroPage[0]
}
