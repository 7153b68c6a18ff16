package elfedit

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOverlayView: the verifier reads a range of the planned file without
// a copy only when one step writes all of it and no later step writes any
// of it; otherwise it reads (and copies) through the overlay.
func TestOverlayView(t *testing.T) {
	a, b := bytes.Repeat([]byte{'a'}, 50), bytes.Repeat([]byte{'b'}, 10)
	o := &overlay{baseSize: 200, size: 240, steps: []Step{
		{Kind: StepUnused, Off: 100, Len: 50, data: a},
		{Kind: StepCommit, Off: 120, Len: 10, data: b},
		{Kind: StepTruncate, Len: 240},
	}}
	for _, tc := range []struct {
		name   string
		off, n int64
		want   []byte // nil: no view
	}{
		{"inside the first step, clear of the later one", 100, 10, a[:10]},
		{"inside the later step", 120, 10, b},
		{"across the later step's start", 115, 10, nil},
		{"across the first step's start", 90, 20, nil},
		{"bytes of the old file only", 10, 20, nil},
		{"past the planned end", 235, 10, nil},
		{"empty", 100, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := o.view(tc.off, tc.n)
			if tc.want == nil {
				assert.False(t, ok)
				return
			}
			assert.True(t, ok)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, len(got), cap(got), "an append must not write into the step")
		})
	}
}
