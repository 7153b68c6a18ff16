//go:build linux && amd64

package x86isa

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadMatchesGlibc compares Read, Level and Platform with what this
// machine's loader read and computed itself, as `ld.so
// --list-diagnostics` (glibc 2.33 and later) prints them: the CPUID words
// of its cpu_features, the ISA level bits (isa_1: 1 baseline, 2 v2, 4 v3,
// 8 v4) and dl_platform.
func TestReadMatchesGlibc(t *testing.T) {
	const loader = "/lib64/ld-linux-x86-64.so.2"
	if _, err := os.Stat(loader); err != nil {
		t.Skipf("no x86-64 glibc loader: %v", err)
	}
	cmd := exec.Command(loader, "--list-diagnostics")
	cmd.Env = []string{} // no GLIBC_TUNABLES masking features
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("%s --list-diagnostics (glibc 2.33 or later): %v", loader, err)
	}
	diag := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^x86\.cpu_features\.(\S+)=0x([0-9a-f]+)$`).FindAllStringSubmatch(string(out), -1) {
		v, err := strconv.ParseUint(m[2], 16, 64)
		require.NoError(t, err, m[0])
		diag[m[1]] = v
	}
	// glibc's indices: features[0] is leaf 1, [1] leaf 7, [2] leaf
	// 0x80000001; cpuid[0..3] are EAX, EBX, ECX, EDX.
	fields := []struct {
		key string
		got func(Regs) uint64
	}{
		{"basic.max_cpuid", func(r Regs) uint64 { return uint64(r.MaxLeaf) }},
		{"features[0x0].cpuid[0x0]", func(r Regs) uint64 { return uint64(r.Leaf1EAX) }},
		{"features[0x0].cpuid[0x2]", func(r Regs) uint64 { return uint64(r.Leaf1ECX) }},
		{"features[0x0].cpuid[0x3]", func(r Regs) uint64 { return uint64(r.Leaf1EDX) }},
		{"features[0x1].cpuid[0x1]", func(r Regs) uint64 { return uint64(r.Leaf7EBX) }},
		{"features[0x2].cpuid[0x2]", func(r Regs) uint64 { return uint64(r.Ext1ECX) }},
		{"isa_1", func(r Regs) uint64 { return 1<<r.Level() - 1 }},
	}
	r, ok := Read()
	require.True(t, ok)
	for _, f := range fields {
		want, ok := diag[f.key]
		if !assert.True(t, ok, "%s --list-diagnostics prints no x86.cpu_features.%s", loader, f.key) {
			continue
		}
		assert.Equal(t, want, f.got(r), "x86.cpu_features.%s", f.key)
	}
	// dl_platform is AT_PLATFORM ("x86_64") unless glibc set its own.
	m := regexp.MustCompile(`(?m)^dl_platform="([^"]*)"$`).FindStringSubmatch(string(out))
	if assert.NotNil(t, m, "%s --list-diagnostics prints no dl_platform", loader) {
		want := m[1]
		if want == "x86_64" {
			want = ""
		}
		assert.Equal(t, want, r.Platform(), "dl_platform")
	}
	t.Logf("%#x: level %d, %q, platform %q", r, r.Level(), r.Level().Hwcaps(), r.Platform())
}
