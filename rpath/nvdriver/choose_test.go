package nvdriver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			fallback := strings.Contains(got.Reason, "none of them") || strings.Contains(got.Reason, "does not support device")
			assert.Equal(t, fallback, got.Fallback, "Fallback")
		})
	}
}

// TestReadMachine: the module's version from procfs, else sysfs; a
// Jetson's nvgpu module when neither has one.
func TestReadMachine(t *testing.T) {
	root := t.TempDir()
	proc, sys := filepath.Join(root, "proc"), filepath.Join(root, "sys")
	assert.Equal(t, nvdriver.Machine{}, nvdriver.ReadMachine(proc, sys))
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "module/nvgpu"), 0o755))
	assert.Equal(t, nvdriver.Machine{Tegra: true}, nvdriver.ReadMachine(proc, sys))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia/version"),
		[]byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)\n"), 0o644))
	assert.Equal(t, nvdriver.Machine{Module: "580.159.04"}, nvdriver.ReadMachine(proc, sys))
}
