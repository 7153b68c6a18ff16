package patch_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// gatedWork is an fn for BigGate.Parallel that does what Patch's phases
// do: an item that needs the gate takes it, or is declined when another
// job holds it. It records how often each item was done, how many items
// were inside the gate at once, and the items run with the gate held
// that had not been declined first.
type gatedWork struct {
	gate     patch.BigGate
	big      func(i int) bool
	work     func(i int) // what doing item i takes, if anything
	mu       sync.Mutex
	done     map[int]int
	declined map[int]bool
	unasked  []int // run held without having been declined
	inside   atomic.Int32
	most     atomic.Int32
}

func newGatedWork(big func(int) bool) *gatedWork {
	return &gatedWork{gate: patch.NewBigGate(), big: big, done: map[int]int{}, declined: map[int]bool{}}
}

func (w *gatedWork) fn(i int, held bool) bool {
	if held {
		w.mu.Lock()
		if !w.declined[i] {
			w.unasked = append(w.unasked, i)
		}
		w.mu.Unlock()
	}
	if w.big(i) {
		leave, ok := w.gate.Enter(1, held) // 1 byte: big for NewBigGate's gate
		if !ok {
			w.mu.Lock()
			w.declined[i] = true
			w.mu.Unlock()
			return false
		}
		defer leave()
		n := w.inside.Add(1)
		for {
			m := w.most.Load()
			if n <= m || w.most.CompareAndSwap(m, n) {
				break
			}
		}
		defer w.inside.Add(-1)
	}
	if w.work != nil {
		w.work(i)
	}
	w.mu.Lock()
	w.done[i]++
	w.mu.Unlock()
	return true
}

// TestGatedParallelDoesEveryItemOnce: every item is done exactly once,
// big ones one at a time, and only a declined item is run again with the
// gate held.
func TestGatedParallelDoesEveryItemOnce(t *testing.T) {
	for _, jobs := range []int{1, 2, 8} {
		for _, n := range []int{0, 1, 7, 300} {
			t.Run(fmt.Sprintf("jobs=%d/n=%d", jobs, n), func(t *testing.T) {
				w := newGatedWork(func(i int) bool { return i%3 == 0 })
				w.work = func(i int) {
					if w.big(i) {
						time.Sleep(50 * time.Microsecond) // long enough to be met
					}
				}
				require.NoError(t, w.gate.Parallel(context.Background(), jobs, n, w.fn))
				for i := range n {
					assert.Equal(t, 1, w.done[i], "item %d done", i)
				}
				assert.Len(t, w.done, n)
				assert.LessOrEqual(t, w.most.Load(), int32(1), "big items inside the gate at once")
				assert.Empty(t, w.unasked, "items run with the gate held that were never declined")
				if jobs == 1 {
					assert.Empty(t, w.declined, "one job never finds the gate taken")
				}
			})
		}
	}
}

// TestGatedParallelDoesNotWaitWhileWorkIsLeft: while one job holds the gate
// for a big item, a job that meets another big item sets it aside and
// does the small ones. The first big item here finishes only once every
// small one is done: a job that waited at the gate instead would leave
// them undone, and the run would never end.
func TestGatedParallelDoesNotWaitWhileWorkIsLeft(t *testing.T) {
	const n = 10 // items 0 and 1 are big, 2..9 small
	smallDone := make(chan struct{})
	var small atomic.Int32
	w := newGatedWork(func(i int) bool { return i < 2 })
	var first atomic.Bool
	w.work = func(i int) {
		if i >= 2 {
			if small.Add(1) == n-2 {
				close(smallDone)
			}
			return
		}
		if first.CompareAndSwap(false, true) {
			select {
			case <-smallDone:
			case <-time.After(10 * time.Second):
				t.Errorf("the small items were not done while big item %d held the gate: a job waited at it", i)
			}
		}
	}
	require.NoError(t, w.gate.Parallel(context.Background(), 2, n, w.fn))
	for i := range n {
		assert.Equal(t, 1, w.done[i], "item %d done", i)
	}
	assert.Len(t, w.declined, 1, "the second big item, met while the first held the gate")
}

// TestGatedParallelStopsWhenCanceled: a canceled run stops taking items
// and says so.
func TestGatedParallelStopsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := newGatedWork(func(i int) bool { return i%2 == 0 })
	w.work = func(i int) {
		if i == 5 {
			cancel()
		}
	}
	err := w.gate.Parallel(ctx, 2, 1000, w.fn)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, len(w.done), 1000)
}

// TestBigFilesDecidedAndWrittenAlone: with every file needing the gate
// (SetBigTable 1), a tree is patched on 4 jobs exactly as with the
// default threshold; and on one job, where the gate is always free, each
// file is read once to be decided: a big file is closed and read again
// only when it must wait its turn.
func TestBigFilesDecidedAndWrittenAlone(t *testing.T) {
	files := map[string]cfix.Spec{
		"out/bin/prog":     exe("liba.so", "libb.so"),
		"out/bin/tool":     exe("libc1.so"),
		"out/lib/liba.so":  lib("liba.so", "libb.so"),
		"out/lib/libb.so":  lib("libb.so", "libc1.so"),
		"out/lib/libc1.so": lib("libc1.so"),
		"out/lib/libd.so":  lib("libd.so", "liba.so", "libc1.so"),
	}
	patched := func(opts patch.Config) map[string]string {
		tr := newTree(t)
		for rel, s := range files {
			tr.place(rel, s)
		}
		rep := tr.mustPatch([]string{"out"}, opts)
		assert.Equal(t, len(files), rep.Changed)
		got := map[string]string{}
		for rel := range files {
			got[rel] = strings.ReplaceAll(tr.runpathOf(rel), tr.root, "{root}")
		}
		return got
	}
	want := patched(patch.Config{Jobs: 4})
	for range 5 { // the order the jobs meet the files in varies
		cfg := patch.Config{Jobs: 4}
		patch.SetBigTable(&cfg, 1)
		got := patched(cfg)
		assert.Equal(t, want, got)
	}

	tr := newTree(t)
	for rel, s := range files {
		tr.place(rel, s)
	}
	opens := map[string]int{}
	cfg := patch.Config{Jobs: 1, Write: patch.WriteOptions{DryRun: true}}
	patch.SetBigTable(&cfg, 1)
	patch.CountOpens(&cfg, opens)
	_, err := patch.Run(context.Background(), &cfg, tr.ps("out"))
	require.NoError(t, err)
	wanted := map[string]bool{}
	for _, s := range files {
		for _, n := range s.Needed {
			wanted[n] = true
		}
	}
	for rel, s := range files {
		// A library another file needs is also read by the index's
		// probe, which does not park a big file's read for its decide
		// (it would hold its table until then).
		want := 1
		if wanted[s.Soname] {
			want = 2
		}
		assert.Equal(t, want, opens[tr.p(rel)], "opens of %s, a big file met with the gate free", rel)
	}
}
