package patch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClosureWhere: the callers of a holder are what its DT_NEEDED
// closure reaches and keep accepts, itself excluded, through cycles.
func TestClosureWhere(t *testing.T) {
	// 0 → 1 → 2 → 0 (a cycle), 1 → 3; 4 alone; 5 → 4.
	adj := [][]int{{1}, {2, 3}, {0}, nil, nil, {4}}
	all := func(int) bool { return true }
	odd := func(j int) bool { return j%2 == 1 }
	for _, c := range []struct {
		from int
		keep func(int) bool
		want []int
	}{
		{0, all, []int{1, 2, 3}},
		{0, odd, []int{1, 3}},
		{2, all, []int{0, 1, 3}},
		{3, all, nil},
		{4, all, nil},
		{5, all, []int{4}},
		{5, odd, nil},
	} {
		require.Equal(t, c.want, closureWhere(adj, c.from, c.keep), "from %d", c.from)
	}
}
