package nvdriver_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
)

func TestKernelModule(t *testing.T) {
	for _, tc := range []struct {
		name, proc, sys, want string
	}{
		{"proprietary", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.2.0\n", "", "580.159.04"},
		{"open", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct  9 2025\n", "", "580.159.04"},
		{"aarch64", "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.10  Release Build\n", "", "570.86.10"},
		{"sysfs only", "", "580.95.05\n", "580.95.05"},
		{"proc wins over sysfs", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  x\n", "575.57.08\n", "580.159.04"},
		{"garbage", "no driver here\n", "not a version\n", ""},
		{"none", "", "", ""},
		// The bounds the selector's C reader has (it takes the version
		// at the start of each process): the first 8191 bytes, versions
		// of at most 63 bytes, ASCII white space.
		{"proc past 8 KiB", strings.Repeat("x", 8191) + "Kernel Module  580.1.2\n", "", ""},
		{"proc version ends at 8 KiB", strings.Repeat("x", 8172) + "Kernel Module 580.159.04\n", "", "580.1"},
		{"proc version too long, then one", "Kernel Module 1." + strings.Repeat("1", 62) + " Kernel Module 580.1.2\n", "", "580.1.2"},
		{"proc version of 63 bytes", "Kernel Module 1." + strings.Repeat("1", 61) + "\n", "", "1." + strings.Repeat("1", 61)},
		{"sys no-break space", "", "\u00a0580.95.05\n", ""},
		{"sys vertical tabs", "", "\v580.95.05\v\n", "580.95.05"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, sys := t.TempDir(), t.TempDir()
			if tc.proc != "" {
				require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia/version"), []byte(tc.proc), 0o644))
			}
			if tc.sys != "" {
				require.NoError(t, os.MkdirAll(filepath.Join(sys, "module/nvidia"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(sys, "module/nvidia/version"), []byte(tc.sys), 0o644))
			}
			assert.Equal(t, tc.want, nvdriver.KernelModule(proc, sys))
		})
	}
}

// TestKernelModuleFIFO: a FIFO where the version file should be gives
// nothing at once; it does not wait for a writer.
func TestKernelModuleFIFO(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(proc, "driver/nvidia/version"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "module/nvidia"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sys, "module/nvidia/version"), []byte("580.95.05\n"), 0o644))
	done := make(chan string, 1)
	go func() { done <- nvdriver.KernelModule(proc, sys) }()
	select {
	case v := <-done:
		assert.Equal(t, "580.95.05", v)
	case <-time.After(10 * time.Second):
		t.Fatal("KernelModule waits on a FIFO")
	}
}

func TestNameVersionAndCompare(t *testing.T) {
	for name, want := range map[string]string{
		"libcuda.so.580.159.04":            "580.159.04",
		"/usr/lib/libcuda.so.535.309.01":   "535.309.01",
		"libcuda.so.390.157":               "390.157",
		"libcuda.so.1":                     "",
		"libcuda.so":                       "",
		"libnvidia-ml.so.580.159.04":       "",
		"libcuda.so.580.159.04.bak":        "",
		"compat/libcuda.so.580.95.05":      "580.95.05",
		"libcuda.so.1.1":                   "",
		"libcuda.so.12.4.127":              "",
		"libcuda.so.580.159.04-something":  "",
		"/x/libcuda.so.580.159.04/libc.so": "",
	} {
		assert.Equal(t, want, nvdriver.NameVersion(name), name)
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"580.95.05", "580.159.04", -1}, // numeric, not lexical: 95 < 159
		{"580.159.04", "580.95.05", 1},
		{"580.159.04", "580.159.04", 0},
		{"590.48.01", "580.159.04", 1},
		{"390.157", "390.157.0", 0},
		// Parts compare as numbers of any length, the same on 32 and 64
		// bits and in the selector's C: no clamping, no overflow.
		{"580.0159", "580.159", 0},
		{"580.99999999999999999999", "580.99999999999999999998", 1},
		{"580.9223372036854775808", "580.9223372036854775807", 1},
		{"580.3000000000", "580.4000000000", -1},
		{"580.x", "580.0", 0},
		{"580..1", "580.0.1", 0},
		{"580.", "580", 0},
	} {
		assert.Equal(t, tc.want, nvdriver.Compare(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
	}
}

// lib builds a shared library with soname libcuda.so.1 whose read-only
// data holds the given strings, as a real libcuda (or a stub) does.
func lib(t *testing.T, strs ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := "const char *const strs[] = {\n"
	for _, s := range strs {
		src += "\t\"" + s + "\",\n"
	}
	src += "\t0 };\nint cuInit(unsigned f) { return strs[f] != 0; }\n"
	out := filepath.Join(dir, "libcuda.so")
	fixtures.Place(t, fixtures.C{Source: src, Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}}, out)
	return out
}

// TestReadLibcuda: the version comes from the bare version string (as in
// Debian's libcuda1 535.309.01, whose .rodata holds "535.309.01" and
// "libnvidia-pkcs11.so.535.309.01"); with several, the one a library name
// confirms; a file with neither a version nor /proc/driver/nvidia is a
// stub.
func TestReadLibcuda(t *testing.T) {
	for _, tc := range []struct {
		name    string
		strs    []string
		version string
		stub    bool
	}{
		{"real", []string{"/proc/driver/nvidia", "535.309.01", "libnvidia-pkcs11.so.535.309.01"}, "535.309.01", false},
		{"version only", []string{"580.95.05"}, "580.95.05", false},
		{"confirmed among several", []string{"/proc/driver/nvidia", "100.10", "580.159.04", "libnvidia-pkcs11-openssl3.so.580.159.04"}, "580.159.04", false},
		{"profiles path confirms", []string{"/proc/driver/nvidia", "100.10", "580.159.04", "/usr/share/nvidia/nvidia-application-profiles-580.159.04-rc"}, "580.159.04", false},
		{"several, none confirmed", []string{"/proc/driver/nvidia", "100.10", "580.159.04"}, "", false},
		{"stub", []string{"CUDA driver is a stub library", "libcuda.so.1"}, "", true},
		{"versions in longer strings do not count", []string{"/proc/driver/nvidia", "version 580.159.04", "12.4"}, "", false},
		{"a device node marks a driver too", []string{"/dev/nvidiactl"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := nvdriver.ReadLibcudaFile(lib(t, tc.strs...))
			require.NoError(t, err)
			assert.Equal(t, tc.version, l.Version)
			assert.Equal(t, tc.stub, l.Stub)
		})
	}
}

// TestReadLibcudaChunks: strings that straddle the 1 MiB read boundary are
// read whole.
func TestReadLibcudaChunks(t *testing.T) {
	for _, at := range []int{1<<20 - 5, 1<<20 - 1, 1 << 20, 2<<20 - 3} {
		data := make([]byte, 3<<20)
		copy(data[at:], "580.159.04\x00")
		copy(data[100:], "/proc/driver/nvidia\x00")
		l, err := nvdriver.ReadLibcuda(bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		assert.Equal(t, "580.159.04", l.Version, "at %#x", at)
		assert.False(t, l.Stub)
	}
	// A short read is an error, not a silently shorter scan.
	_, err := nvdriver.ReadLibcuda(bytes.NewReader(make([]byte, 10)), 20)
	assert.Error(t, err)
	_, err = nvdriver.ReadLibcuda(bytes.NewReader(nil), 2<<30)
	assert.ErrorContains(t, err, "more than")
}
