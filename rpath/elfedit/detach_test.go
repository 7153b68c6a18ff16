package elfedit

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memSource is a file in memory, for a read cache.
type memSource struct{ *bytes.Reader }

func (memSource) Close() error { return nil }

// cacheHolding is a read cache that has read all of file (the head, then
// the rest in one prefetched range), as a Prepare finds it.
func cacheHolding(t *testing.T, file []byte) *readCache {
	t.Helper()
	c := newReadCache(memSource{bytes.NewReader(file)}, int64(len(file)), nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NoError(t, c.fillHead())
	c.prefetch(int64(len(c.head)), int64(len(file)))
	require.True(t, c.holdsAll())
	return c
}

// TestDetachRoundTrip: whatever a step writes, and whatever the hints say
// (right, wrong, out of the file), the pieces detach finds rebuild it
// byte for byte; right hints and the step's own offset make the pieces
// hold a fraction of what the step writes.
func TestDetachRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	file := make([]byte, 300<<10)
	for i := range file {
		if i%5000 < 3000 { // with stretches of zeros
			file[i] = byte(r.IntN(256))
		}
	}
	for trial := range 200 {
		// A step of up to 200 KiB: copies of the file (some with a byte
		// changed every few dozen, as renumbered symbols are), zeros,
		// new bytes, and the file's bytes at the step's own offset.
		out := int64(r.IntN(len(file) + 1000))
		var data []byte
		var right []srcHint
		fresh := 0 // the new bytes
		for len(data) < 1+r.IntN(200<<10) {
			n := 1 + r.IntN(20<<10)
			switch r.IntN(5) {
			case 0, 1:
				src := r.IntN(len(file) - n)
				b := bytes.Clone(file[src : src+n])
				if r.IntN(2) == 0 {
					for i := r.IntN(24); i < n; i += 24 {
						b[i]++
					}
				}
				right = append(right, srcHint{uint64(out) + uint64(len(data)), uint64(src), uint64(n)})
				data = append(data, b...)
			case 2:
				data = append(data, make([]byte, n)...)
			case 3:
				fresh += n
				for range n {
					data = append(data, byte(r.IntN(256)))
				}
			case 4:
				at := out + int64(len(data))
				if at+int64(n) <= int64(len(file)) {
					data = append(data, file[at:at+int64(n)]...)
				}
			}
		}
		hints := right
		if trial%2 == 1 { // wrong ones only, some past the end of the file
			hints = nil
			for range 5 {
				hints = append(hints, srcHint{uint64(out) + uint64(r.IntN(len(data))), uint64(r.IntN(2 * len(file))), uint64(r.IntN(len(data)))})
			}
		}
		c := cacheHolding(t, file)
		p := &Plan{Steps: []Step{{Kind: StepUnused, Off: out, Len: int64(len(data)), data: data}}, hints: hints}
		c.mu.Lock()
		d := c.detach(p)
		c.mu.Unlock()
		steps, ok := c.materialize(p, d)
		require.True(t, ok, "trial %d", trial)
		require.True(t, bytes.Equal(data, steps[0].data), "trial %d: the step rebuilt", trial)
		if trial%2 == 0 {
			assert.LessOrEqual(t, int(d.held), planOverhead+fresh+len(data)/8+len(d.pieces[0])*pieceOverhead,
				"trial %d: beyond the new bytes, pieces and patches only", trial)
		}
	}
}

// TestDetachHoldsLittle: a plan of a real file holds, detached, a small
// part of what it writes: the moved tables are the file's own bytes.
func TestDetachHoldsLittle(t *testing.T) {
	file := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range file {
		file[i] = byte(r.IntN(256))
	}
	c := cacheHolding(t, file)
	// A region at the end: 40 KiB of the file's bytes from 8 KiB on, 300
	// new bytes; the old range cleared.
	moved := bytes.Clone(file[8<<10 : 48<<10])
	region := append(moved, bytes.Repeat([]byte{'n'}, 300)...)
	p := &Plan{Steps: []Step{
		{Kind: StepUnused, Off: int64(len(file)), Len: int64(len(region)), data: region},
		{Kind: StepHygiene, Off: 8 << 10, Len: 40 << 10, data: zeros(40 << 10)},
	}, hints: []srcHint{{uint64(len(file)), 8 << 10, 40 << 10}}}
	c.mu.Lock()
	d := c.detach(p)
	c.mu.Unlock()
	assert.Equal(t, 300, len(d.lit), "only the new bytes are held")
	assert.Less(t, d.held, int64(len(region))/10)
	steps, ok := c.materialize(p, d)
	require.True(t, ok)
	assert.Equal(t, region, steps[0].data)
	assert.True(t, isZeroPage(steps[1].data), "a clearing step stays the shared zeros")
}
