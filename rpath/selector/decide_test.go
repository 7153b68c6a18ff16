package selector_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/nvdriver/nvdrivertest"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// decider builds the generated source's decision as a program:
// argv proc-file sys-file compat-version branches nvgpu-dir, prints "use
// module"; "spec" as the version or branches takes those generated from
// the spec's compat (info, or 580.95.05 without a note when nil).
func decider(t testing.TB, a arch) string { return specDecider(t, a, nil) }

func specDecider(t testing.TB, a arch, info *nvdriver.Compat) string {
	t.Helper()
	if info == nil {
		info = &nvdriver.Compat{Version: "580.95.05"}
	}
	src, err := selector.Source(selector.Spec{Compat: "/c/libcuda.so." + info.Version, Info: *info,
		Driver: []string{"/d/libcuda.so.1"}, Functions: []string{"cuInit"}})
	require.NoError(t, err)
	dir := t.TempDir()
	c := write(t, filepath.Join(dir, "decide.c"), string(src))
	prog := filepath.Join(dir, "decide")
	a.compile(t, "-O2", "-DCUDAPATCH_SELECTOR_DECIDE_MAIN", "-o", prog, c)
	return prog
}

// procLine is /proc/driver/nvidia/version's first line in one of the
// module's formats.
func procLine(format int, v string) string {
	switch format {
	case 0:
		return "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + v + "  Release Build  (dvs-builder@U16-I2-C04-35-3)  Fri Aug 29 23:27:42 UTC 2025\nGCC version:  gcc version 12.3.0\n"
	default:
		return "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + v + "  Thu Jan  9 21:30:00 UTC 2025\nGCC version:  gcc version 11.4.0\n"
	}
}

// TestDecisionMatchesChoose: the C decision of the generated source, fed
// the module version through fake proc and sys files, chooses as
// nvdriver.Choose does on every row of the shared table. Rows with known
// devices (rule 5) are left out: the selector decides before any libcuda
// is loaded, when no device can be read, so it never has them.
func TestDecisionMatchesChoose(t *testing.T) {
	for _, a := range arches() {
		t.Run(a.name, func(t *testing.T) {
			a.need(t)
			prog := decider(t, a)
			ran := 0
			for i, r := range nvdrivertest.ChooseTable(t) {
				if r.Machine.Devices != nil {
					continue
				}
				ran++
				dir := t.TempDir()
				proc, sys := filepath.Join(dir, "proc/driver/nvidia/version"), filepath.Join(dir, "sys/module/nvidia/version")
				if r.Machine.Module != "" {
					// Each source of the version in turn: proc in either
					// format, or sys alone.
					if i%3 == 2 {
						write(t, sys, r.Machine.Module+"\n")
					} else {
						write(t, proc, procLine(i%3, r.Machine.Module))
					}
				}
				require.Equal(t, r.Machine.Module, nvdriver.KernelModule(filepath.Join(dir, "proc"), filepath.Join(dir, "sys")), r.Line)
				compat, branches := "-", "-"
				if r.Compat.Version != "" {
					compat = r.Compat.Version
				}
				if r.Compat.Note != nil && len(r.Compat.Note.Driver) > 0 {
					var bs []string
					for _, b := range r.Compat.Note.Driver {
						bs = append(bs, strconv.Itoa(b))
					}
					branches = strings.Join(bs, ",")
				}
				nvgpu := filepath.Join(dir, "sys/module/nvgpu")
				if r.Machine.Tegra {
					require.NoError(t, os.MkdirAll(nvgpu, 0o755))
				}
				out, err := a.exec(t, nil, prog, proc, sys, compat, branches, nvgpu)
				require.NoError(t, err, "%s", out)
				want := nvdriver.Choose(r.Compat, r.Machine)
				require.Equal(t, r.Want, want.Use, "the table and Choose agree: %s", r.Line)
				module := r.Machine.Module
				if module == "" {
					module = "-"
				}
				assert.Equal(t, fmt.Sprintf("%s %s\n", want.Use, module), out, "row %q", r.Line)
			}
			require.Greater(t, ran, 10)
		})
	}
}

// TestModuleMatchesKernelModule: the C reader of the module version reads
// what nvdriver.KernelModule reads from odd proc and sys contents.
func TestModuleMatchesKernelModule(t *testing.T) {
	tests := []struct {
		name      string
		proc, sys *string
	}{
		{name: "open module", proc: ptr(procLine(0, "580.159.04"))},
		{name: "proprietary module", proc: ptr(procLine(1, "535.261.03"))},
		{name: "sys only", sys: ptr("580.159.04\n")},
		{name: "sys with spaces", sys: ptr(" \t570.86.10 \n")},
		{name: "sys two parts", sys: ptr("390.157")},
		{name: "sys not a version", sys: ptr("580.159.04.1\n")},
		{name: "sys four-digit part", sys: ptr("580.1590.04\n")},
		{name: "sys garbage", sys: ptr("loaded\n")},
		{name: "proc garbage, sys good", proc: ptr("NVRM version: something else\n"), sys: ptr("550.54.15\n")},
		{name: "proc wins over sys", proc: ptr(procLine(0, "580.159.04")), sys: ptr("550.54.15\n")},
		{name: "proc without a version", proc: ptr("NVRM version: NVIDIA UNIX Kernel Module for x86_64 Release\n")},
		{name: "proc second mark", proc: ptr("Kernel Module none; Kernel Module for aarch64\t565.57.01 rest\n")},
		{name: "proc trailing dots", proc: ptr("Kernel Module 580.159.04. x\n")},
		{name: "proc no space", proc: ptr("Kernel Module580.1\n")},
		{name: "proc one part", proc: ptr("Kernel Module  580 \n")},
		{name: "proc NUL before", proc: ptr("x\x00y Kernel Module  580.1.2\n")},
		{name: "proc for without word", proc: ptr("Kernel Module for  580.1.2\n")},
		{name: "proc past 8 KiB", proc: ptr(strings.Repeat("x", 8191) + "Kernel Module  580.1.2\n")},
		{name: "proc version ends at 8 KiB", proc: ptr(strings.Repeat("x", 8172) + "Kernel Module 580.159.04\n")},
		{name: "proc version too long, then one", proc: ptr("Kernel Module 1." + strings.Repeat("1", 62) + " Kernel Module 580.1.2\n")},
		{name: "proc version of 63 bytes", proc: ptr("Kernel Module 1." + strings.Repeat("1", 61) + "\n")},
		{name: "sys no-break space", sys: ptr("\u00a0580.95.05\n")},
		{name: "sys vertical tabs", sys: ptr("\v580.95.05\v\n")},
		{name: "nothing"},
		{name: "empty files", proc: ptr(""), sys: ptr("")},
	}
	for _, a := range arches() {
		t.Run(a.name, func(t *testing.T) {
			a.need(t)
			prog := decider(t, a)
			for _, tt := range tests {
				dir := t.TempDir()
				proc, sys := filepath.Join(dir, "proc/driver/nvidia/version"), filepath.Join(dir, "sys/module/nvidia/version")
				require.NoError(t, os.MkdirAll(filepath.Dir(proc), 0o755))
				if tt.proc != nil {
					write(t, proc, *tt.proc)
				}
				if tt.sys != nil {
					write(t, sys, *tt.sys)
				}
				want := nvdriver.KernelModule(filepath.Join(dir, "proc"), filepath.Join(dir, "sys"))
				out, err := a.exec(t, nil, prog, proc, sys, "-", "-", filepath.Join(dir, "sys/module/nvgpu"))
				require.NoError(t, err, "%s", out)
				_, got, _ := strings.Cut(strings.TrimSpace(out), " ")
				if got == "-" {
					got = ""
				}
				assert.Equal(t, want, got, tt.name)
			}
		})
	}
}

func ptr(s string) *string { return &s }
