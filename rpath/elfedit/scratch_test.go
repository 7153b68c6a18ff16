package elfedit

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLend: Buffers lends slices of its size classes again once given
// back; asked for zeros it clears what the last borrower left, and only
// then (a slice read over whole is not cleared first). Sizes outside the
// classes are allocated and never pooled.
func TestLend(t *testing.T) {
	var b Buffers
	for _, n := range []uint64{512, 3000, 70 << 10, 4 << 20} {
		buf := b.lend(n, true)
		assert.Len(t, buf, int(n))
		assert.Equal(t, 1<<(scratchClass(n)+scratchMinShift), cap(buf), "n=%d: the class's size", n)
		for i := range buf {
			buf[i] = 0xAA
		}
		b.giveBack(buf)
		again := b.lend(n, true)
		assert.True(t, bytes.Equal(again, make([]byte, n)), "n=%d: zeros asked for", n)
		b.giveBack(again)
	}
	for _, n := range []uint64{100, 5 << 20} {
		assert.Equal(t, -1, scratchClass(n))
		assert.Len(t, b.lend(n, false), int(n))
	}
	var nilBufs *Buffers
	assert.True(t, bytes.Equal(nilBufs.lend(4096, false), make([]byte, 4096)), "without a pool: allocated, so zero")
}
