package nvdriver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/nvdriver/nvdrivertest"
)

// TestChoose runs the shared compat-or-driver table.
func TestChoose(t *testing.T) {
	rows := nvdrivertest.ChooseTable(t)
	assert.GreaterOrEqual(t, len(rows), 15)
	for _, r := range rows {
		t.Run(r.Line, func(t *testing.T) {
			got := nvdriver.Choose(r.Compat, r.Machine)
			assert.Equal(t, r.Want, got.Use, "%s", got.Reason)
			assert.Contains(t, got.Reason, r.Reason)
		})
	}
}
