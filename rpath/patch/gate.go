package patch

import (
	"context"
	"sync"
	"sync/atomic"
)

// defaultBigTable is the dynamic string table size above which files are
// worked on one at a time. A plan that copies the table holds it a few
// times in memory: CUDA libraries' tables are well under 1 MiB, but
// PyTorch's reach tens of MiB, and sixteen of those at once would take
// gigabytes.
const defaultBigTable = 2 << 20

// bigGate lets any number of files with small string tables through, and
// files with big ones one at a time. A job that finds the gate taken does
// not wait at it while other files are left (gatedParallel): it sets the
// big file aside for later and goes on with the others.
type bigGate struct {
	mu sync.Mutex
	// min is the string table size from which a file needs the gate.
	min int
}

func newBigGate(min int) *bigGate { return &bigGate{min: min} }

// needs reports whether a file whose string table has n bytes needs the
// gate (nothing does without one).
func (g *bigGate) needs(n int) bool { return g != nil && n >= g.min }

// enter is what an item of gatedParallel does first, for a file whose
// string table has n bytes, with held as gatedParallel passed it: a file
// that needs the gate, when gatedParallel does not hold it already,
// takes it if it is free. ok is false when it is taken: the item is
// declined. Otherwise leave gives back what was taken, if anything.
func (g *bigGate) enter(n int, held bool) (leave func(), ok bool) {
	if held || !g.needs(n) {
		return func() {}, true
	}
	if !g.mu.TryLock() {
		return nil, false
	}
	return g.mu.Unlock, true
}

// gatedParallel runs fn over the items 0..n-1 on jobs goroutines, as
// parallel does, for work some of whose items need the gate. fn(i, false)
// may decline an item that needs the gate when enter finds it taken: it gives
// back what it read and returns false. The item is then run again as
// fn(i, true), with the gate held for it, and must be done.
//
// A job runs a declined item whenever it gets the gate at once, and waits
// for the gate only when nothing else is left: the write phase takes the
// largest files first, so a job that waited at the gate would sit idle
// while another wrote the tree's big libraries one after the other.
func (g *bigGate) gatedParallel(ctx context.Context, jobs, n int, fn func(i int, held bool) bool) error {
	var next atomic.Int64
	var mu sync.Mutex
	var declined []int // FIFO: the order the items came in
	pop := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(declined) == 0 {
			return 0, false
		}
		i := declined[0]
		declined = declined[1:]
		return i, true
	}
	pending := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(declined) > 0
	}
	// held runs one declined item with the gate held, if there is one;
	// wait says whether to wait for the gate.
	held := func(wait bool) bool {
		if !pending() {
			return false
		}
		if wait {
			g.mu.Lock()
		} else if !g.mu.TryLock() {
			return false
		}
		defer g.mu.Unlock()
		i, ok := pop()
		if ok {
			fn(i, true)
		}
		return ok
	}
	var stopped atomic.Bool
	work := func() {
		for {
			if ctx.Err() != nil {
				stopped.Store(true)
				return
			}
			if held(false) {
				continue
			}
			if i := int(next.Add(1) - 1); i < n {
				if !fn(i, false) {
					mu.Lock()
					declined = append(declined, i)
					mu.Unlock()
				}
				continue
			}
			// Nothing left but what was declined: wait for the gate.
			// A job that declines an item after this one has looked
			// comes back here itself before it stops.
			if !held(true) {
				return
			}
		}
	}
	runWorkers(min(jobs, n), work)
	if stopped.Load() {
		return ctx.Err()
	}
	return nil
}
