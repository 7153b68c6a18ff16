package nvdriver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Use names the libcuda a process should take.
type Use string

const (
	// UseDriver is the running driver's own libcuda (the driver link).
	UseDriver Use = "driver"
	// UseCompat is cuda_compat's libcuda (forward compatibility).
	UseCompat Use = "compat"
	// UseNone means no libcuda can work: no NVIDIA kernel module is loaded.
	UseNone Use = "none"
)

// Compat is what a cuda_compat libcuda says about itself: the driver
// version it was built as (its file name, libcuda.so.580.95.05, or the
// version string it carries) and its forward-compatibility note, when it
// has one.
type Compat struct {
	Version string
	Note    *CompatNote
}

// Machine is what the machine that runs a program says: the loaded
// kernel module's version ("" when none is loaded) and, when known, the
// device codes that the compat note's "device" list is made of. Nil
// Devices means unknown: nothing can read them before a libcuda is
// loaded, so the run-time choice never has them.
type Machine struct {
	Module  string
	Devices []int
	// Tegra is set on a Jetson whose GPU is driven by nvgpu
	// (/sys/module/nvgpu), which has no module version to read.
	Tegra bool
}

// Choice is the libcuda to take and why, in words for a person.
// Fallback marks a driver taken although the module is older than compat
// (rules 4 and 5): compat cannot run there, and the driver may be too old
// for a program built for compat's CUDA, so neither choice may work.
type Choice struct {
	Use      Use    `json:"use"`
	Reason   string `json:"reason"`
	Fallback bool   `json:"fallback,omitempty"`
}

// Choose decides between cuda_compat's libcuda and the driver's own on a
// machine. The rule is NVIDIA's forward compatibility (CUDA Compatibility
// guide, "Forward Compatibility"): cuda_compat's user-mode driver runs on
// an older kernel module only, of a branch it lists, on a device it
// lists; on a module of its own version or newer, it fails at cuInit with
// CUDA error 803 (system driver mismatch). In order:
//
//  1. no kernel module: nothing can work, except on a Jetson driven by
//     nvgpu, which has no version to compare: compat when given, as the
//     jetpack-nixos builds that use cuda_compat intend;
//  2. no compat, or its version unknown: the driver;
//  3. the module is not older than compat (the same branch counts:
//     compat 580.95.05 on 580.159.04 takes the driver): the driver;
//  4. the note lists driver branches and the module's is not one: the
//     driver, the only one that can start;
//  5. the devices are known, the note lists devices, and one is not
//     listed: the driver;
//  6. otherwise compat.
//
// The full version is compared, not the branch alone: a 580.126 module
// with a 580.82 compat fails (nvidia-container-toolkit #1697), and a
// branch list alone would pick compat there. The selector library built
// by rpath/selector applies rules 1-4 and 6 in C at process start from the
// same inputs; its tests compare the two on a shared table.
func Choose(c Compat, m Machine) Choice {
	switch {
	case m.Module == "" && m.Tegra && c.Version != "":
		return Choice{Use: UseCompat, Reason: "a Jetson driven by nvgpu has no module version to compare: cuda_compat " + c.Version + " is taken, as the build intends"}
	case m.Module == "" && m.Tegra:
		return Choice{Use: UseDriver, Reason: "a Jetson driven by nvgpu, and no cuda_compat"}
	case m.Module == "":
		return Choice{Use: UseNone, Reason: "no NVIDIA kernel module is loaded: no libcuda can work on this machine"}
	case c.Version == "":
		return Choice{Use: UseDriver, Reason: "no cuda_compat libcuda of a known version"}
	case Compare(m.Module, c.Version) >= 0:
		return Choice{Use: UseDriver, Reason: fmt.Sprintf("the driver %s is not older than cuda_compat %s, whose libcuda would fail on it with CUDA error 803", m.Module, c.Version)}
	}
	if n := c.Note; n != nil && len(n.Driver) > 0 && !slices.Contains(n.Driver, Branch(m.Module)) {
		return Choice{Use: UseDriver, Fallback: true, Reason: fmt.Sprintf("cuda_compat %s supports drivers of branches %s; the driver %s is of none of them", c.Version, joinInts(n.Driver), m.Module)}
	}
	if n := c.Note; n != nil && len(n.Device) > 0 && m.Devices != nil {
		for _, d := range m.Devices {
			if !slices.Contains(n.Device, d) {
				return Choice{Use: UseDriver, Fallback: true, Reason: fmt.Sprintf("cuda_compat %s does not support device %d (forward compatibility is for data-center and Jetson GPUs)", c.Version, d)}
			}
		}
	}
	return Choice{Use: UseCompat, Reason: fmt.Sprintf("the driver %s is older than cuda_compat %s and of a branch it supports", m.Module, c.Version)}
}

// Branch is a driver version's first number: 580 for 580.159.04; 0 when
// there is none.
func Branch(v string) int {
	b, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(b)
	if err != nil {
		return 0
	}
	return n
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// ReadMachine reads what Choose needs of the machine whose procfs and
// sysfs are mounted at proc and sys. Devices stay unknown.
func ReadMachine(proc, sys string) Machine {
	m := Machine{Module: KernelModule(proc, sys)}
	if m.Module == "" {
		if st, err := os.Stat(filepath.Join(sys, "module/nvgpu")); err == nil && st.IsDir() {
			m.Tegra = true
		}
	}
	return m
}
