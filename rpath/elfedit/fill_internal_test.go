package elfedit

import (
	"bytes"
	"fmt"
	"testing"
)

// TestFillTail: a file whose reservation's write was cut at a page
// boundary ends in the fill pattern, and a next edit reads it as a
// pending journal that cuts the file back to the old end, whatever the
// old end's place in its unit; a tail shorter than one unit, or a pattern
// with one byte that is not its own, is no journal (nothing is cut).
func TestFillTail(t *testing.T) {
	for _, old := range []int64{4000, 4001, 4079, 4080, 4088, 8191, 12288} {
		for _, n := range []int64{1, 15, 16, 17, 31, 32, 100, 5000} {
			t.Run(fmt.Sprintf("old=%d/n=%d", old, n), func(t *testing.T) {
				b := bytes.Repeat([]byte{0x7f}, int(old)) // not zeros, not the pattern
				b = append(b, make([]byte, n)...)
				fill(b[old:], old, old)
				j, err := readJournal(bytes.NewReader(b), int64(len(b)))
				if err != nil {
					t.Fatal(err)
				}
				if n < fillUnit {
					if j != nil {
						t.Fatalf("a tail of %d pattern bytes read as a journal from 0x%x", n, j.oldSize)
					}
					return
				}
				if j == nil || !j.pending || j.oldSize != old {
					t.Fatalf("got %+v, want a pending journal from %d", j, old)
				}
				rc, err := j.recover(bytes.NewReader(b))
				if err != nil || rc.size != old || len(rc.writes) != 0 {
					t.Fatalf("recovery %+v, %v: want a cut to %d", rc, err, old)
				}
				// One byte not the pattern's, anywhere past the old end:
				// not this package's, left as it is.
				for _, at := range []int64{old, old + n/2, old + n - 1} {
					c := bytes.Clone(b)
					c[at] ^= 0x55
					if j, err := readJournal(bytes.NewReader(c), int64(len(c))); err != nil || j != nil {
						t.Fatalf("byte %d changed: %+v, %v; want no journal", at, j, err)
					}
				}
			})
		}
	}
}
