package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/doctor"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
)

// TestDoctorThisMachine runs doctor on the real machine. Without an NVIDIA
// kernel module (this CI machine) it must exit 0 and say so plainly; with
// one it must at least report the module.
func TestDoctorThisMachine(t *testing.T) {
	out, errOut, code := runCLI(t, nil, "doctor")
	assert.Empty(t, errOut)
	_, errProc := os.Stat("/proc/driver/nvidia/version")
	_, errSys := os.Stat("/sys/module/nvidia/version")
	if errProc != nil && errSys != nil {
		assert.Equal(t, exitOK, code, out)
		assert.Contains(t, out, "no NVIDIA kernel module is loaded")
		assert.Contains(t, out, "No NVIDIA GPU driver is loaded on this machine, so there is nothing to fix here.")
	} else {
		assert.Contains(t, []int{exitOK, exitFindings}, code)
		assert.Contains(t, out, "NVIDIA kernel module")
	}
	out, _, _ = runCLI(t, nil, "doctor", "--json")
	var rep doctor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.NotEmpty(t, rep.Checks)
}

// TestDoctorFakeTree: the lint fixture root with a loaded module; a stub
// directory in LD_LIBRARY_PATH is a problem (exit 1), the clean program
// loads the driver link's libcuda.
func TestDoctorFakeTree(t *testing.T) {
	tr := linttest.Build(t)
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia/version"), []byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"), 0o644))
	clean := "/nix/store/99999999999999999999999999999999-clean/bin/clean"
	args := []string{"doctor", "--root", tr.Root, "--proc", proc, "--sys", t.TempDir(), clean}
	out, errOut, code := runCLI(t, nil, args...)
	assert.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "ok      NVIDIA kernel module 580.159.04 is loaded")
	assert.Contains(t, out, "would load libcuda.so.1 from the driver link")
	assert.Contains(t, out, "No problems found.")

	out, _, code = runCLI(t, []string{"LD_LIBRARY_PATH=" + linttest.Stubs}, args...)
	assert.Equal(t, exitFindings, code, out)
	assert.Contains(t, out, "problem LD_LIBRARY_PATH holds the stub directory")
	assert.Contains(t, out, "  fix:    unset LD_LIBRARY_PATH")

	_, errOut, code = runCLI(t, nil, "doctor", "a", "b")
	assert.Equal(t, exitUsage, code)
	assert.NotEmpty(t, errOut)
	_, _, code = runCLI(t, nil, "doctor", "--root", tr.Root, "/nonexistent")
	assert.Equal(t, exitUsage, code)
}
