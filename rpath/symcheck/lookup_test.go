package symcheck

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSummaryIndex: a summary's table finds, for every name id, exactly
// the candidates a scan of its sorted cands finds (none for the names it
// lacks), whatever the ids' spread and however many names it holds.
func TestSummaryIndex(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	tests := []struct {
		name        string
		names, upto int // distinct names drawn below upto
		maxPerName  int
	}{
		{"empty", 0, 10, 1},
		{"one", 1, 1, 1},
		{"dense", 1000, 1000, 1},
		{"sparse, versions", 500, 100000, 3},
		{"past 2^16 names", 70000, 140000, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cands []cand
			for _, id := range rng.Perm(tt.upto)[:tt.names] {
				for k := range 1 + rng.Intn(tt.maxPerName) {
					cands = append(cands, cand{id: uint32(id), vi: uint16(k)})
				}
			}
			s := &summary{covered: uint32(tt.upto), cands: byName(cands)}
			s.index()
			require.True(t, slices.IsSortedFunc(s.cands, func(a, b cand) int { return int(a.id) - int(b.id) }))
			byID := map[uint32][]cand{}
			for _, c := range s.cands {
				byID[c.id] = append(byID[c.id], c)
			}
			for id := range uint32(tt.upto + 10) {
				want := byID[id]
				got := s.of(id)
				if len(want) == 0 {
					require.Empty(t, got, "id %d", id)
					require.False(t, s.has(id), "id %d", id)
					continue
				}
				require.Equal(t, want, got, "id %d", id)
				require.True(t, s.has(id), "id %d", id)
			}
		})
	}
}
