package x86isa

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// feature is one bit a level needs: where CPUID puts it and the lowest
// level that needs it.
type feature struct {
	reg   func(*Regs) *uint32
	mask  uint32
	level Level
}

var (
	leaf1ECX = func(r *Regs) *uint32 { return &r.Leaf1ECX }
	leaf1EDX = func(r *Regs) *uint32 { return &r.Leaf1EDX }
	leaf7EBX = func(r *Regs) *uint32 { return &r.Leaf7EBX }
	ext1ECX  = func(r *Regs) *uint32 { return &r.Ext1ECX }
)

// features are the bits of glibc's get_isa_level, by the names its
// cpu-features.h gives them.
var features = map[string]feature{
	"FPU": {leaf1EDX, edxFPU, 1}, "CX8": {leaf1EDX, edxCX8, 1}, "CMOV": {leaf1EDX, edxCMOV, 1},
	"MMX": {leaf1EDX, edxMMX, 1}, "FXSR": {leaf1EDX, edxFXSR, 1}, "SSE": {leaf1EDX, edxSSE, 1},
	"SSE2": {leaf1EDX, edxSSE2, 1},

	"CMPXCHG16B": {leaf1ECX, ecxCMPXCHG16B, 2}, "LAHF64_SAHF64": {ext1ECX, extLAHF64, 2},
	"POPCNT": {leaf1ECX, ecxPOPCNT, 2}, "SSE3": {leaf1ECX, ecxSSE3, 2}, "SSSE3": {leaf1ECX, ecxSSSE3, 2},
	"SSE4_1": {leaf1ECX, ecxSSE41, 2}, "SSE4_2": {leaf1ECX, ecxSSE42, 2},

	"AVX": {leaf1ECX, ecxAVX, 3}, "AVX2": {leaf7EBX, ebxAVX2, 3}, "BMI1": {leaf7EBX, ebxBMI1, 3},
	"BMI2": {leaf7EBX, ebxBMI2, 3}, "F16C": {leaf1ECX, ecxF16C, 3}, "FMA": {leaf1ECX, ecxFMA, 3},
	"LZCNT": {ext1ECX, extLZCNT, 3}, "MOVBE": {leaf1ECX, ecxMOVBE, 3},
	// Not a level's feature, but AVX's state can only be asked with it.
	"OSXSAVE": {leaf1ECX, ecxOSXSAVE, 3},

	"AVX512F": {leaf7EBX, ebxAVX512F, 4}, "AVX512BW": {leaf7EBX, ebxAVX512BW, 4},
	"AVX512CD": {leaf7EBX, ebxAVX512CD, 4}, "AVX512DQ": {leaf7EBX, ebxAVX512DQ, 4},
	"AVX512VL": {leaf7EBX, ebxAVX512VL, 4},
}

const (
	genuineIntel = "GenuineIntel"
	centaurHauls = "CentaurHauls"
	xcrAVX       = xcrSSE | xcrYMM | 1 // x87, SSE, AVX state
	xcrAVX512    = xcrAVX | xcrOpmask | xcrZMMHi | xcrHi16
)

// cpu builds the registers of a CPU of the given vendor with every
// feature of every level up to and including level, and xcr0 saved.
func cpu(vendor string, level Level, xcr0 uint64) Regs {
	r := Regs{MaxLeaf: 0xd, MaxExtLeaf: 0x80000008, XCR0: xcr0}
	for i := range 3 { // the name is EBX, EDX, ECX, little-endian
		b := []byte(vendor[4*i : 4*i+4])
		r.Vendor[i] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	}
	for _, f := range features {
		if f.level <= level {
			*f.reg(&r) |= f.mask
		}
	}
	return r
}

// without clears the named features.
func without(r Regs, names ...string) Regs {
	for _, n := range names {
		f := features[n]
		*f.reg(&r) &^= f.mask
	}
	return r
}

// with sets other fields through set.
func with(r Regs, set func(*Regs)) Regs {
	set(&r)
	return r
}

func TestLevel(t *testing.T) {
	v4 := cpu(genuineIntel, 4, xcrAVX512)
	tests := []struct {
		name string
		regs Regs
		want Level
	}{
		// A VM whose /proc/cpuinfo lacks "abm": glibc reads LZCNT from
		// CPUID 0x80000001 ECX bit 5, whatever cpuinfo names.
		{"AVX-512 VM with LZCNT, no cpuinfo abm", v4, 4},
		{"the same without LZCNT", without(v4, "LZCNT"), 2},
		{"AVX-512 CPU", v4, 4},
		{"AVX-512 CPU, OS saves no ZMM state", with(v4, func(r *Regs) { r.XCR0 = xcrAVX }), 3},
		{"AVX-512 CPU, OS saves no opmask state", with(v4, func(r *Regs) { r.XCR0 = xcrAVX512 &^ xcrOpmask }), 3},
		{"AVX-512 CPU, OS saves ZMM but no YMM state", with(v4, func(r *Regs) { r.XCR0 = xcrAVX512 &^ xcrYMM }), 2},
		{"AVX2 CPU", cpu(genuineIntel, 3, xcrAVX), 3},
		// Two machines' registers as read there, with the level their
		// ld.so --list-diagnostics printed (isa_1 0xf and 0x7).
		{"Xeon family 6 model 0xcf VM, AVX-512 and AMX state", Regs{
			MaxLeaf: 0x20, Vendor: [3]uint32{0x756e6547, 0x49656e69, 0x6c65746e},
			Leaf1EAX: 0xc06f2, Leaf1ECX: 0xfffa3203, Leaf1EDX: 0x1f8bfbff, Leaf7EBX: 0xf1bf27eb,
			MaxExtLeaf: 0x80000008, Ext1ECX: 0x121, XCR0: 0x602e7,
		}, 4},
		{"EPYC family 0x19 VM, AVX2", Regs{
			MaxLeaf: 0xd, Vendor: [3]uint32{0x68747541, 0x69746e65, 0x444d4163},
			Leaf1EAX: 0xa00f11, Leaf1ECX: 0xfffa3203, Leaf1EDX: 0x178bfbff, Leaf7EBX: 0x219c07ab,
			MaxExtLeaf: 0x80000021, Ext1ECX: 0x4003f3, XCR0: 0x7,
		}, 3},
		{"AVX2 CPU, OS XSAVE off", without(cpu(genuineIntel, 3, xcrAVX), "OSXSAVE"), 2},
		{"AVX2 CPU, OS XSAVE on, YMM state not saved", cpu(genuineIntel, 3, xcrSSE|1), 2},
		{"AVX-512 flags, OS XSAVE off (XCR0 not read)", without(v4, "OSXSAVE"), 2},
		{"v2-only CPU (Nehalem)", cpu(genuineIntel, 2, 0), 2},
		{"baseline CPU (K8)", cpu("AuthenticAMD", 1, 0), 1},
		{"no SSE2", without(cpu(genuineIntel, 1, 0), "SSE2"), 0},
		{"v2 features without the baseline", without(cpu(genuineIntel, 2, 0), "CMOV"), 0},
		{"highest basic leaf 6 hides leaf 7", with(v4, func(r *Regs) { r.MaxLeaf = 6 }), 2},
		{"no extended leaf 0x80000001 hides LAHF", with(v4, func(r *Regs) { r.MaxExtLeaf = 0x80000000 }), 1},
		// glibc turns AVX off on these Zhaoxin models (init_cpu_features).
		{"Zhaoxin Lujiazui (family 7, model 0x3b)", with(cpu(centaurHauls, 3, xcrAVX), func(r *Regs) { r.Leaf1EAX = 0x000307b0 }), 2},
		{"Zhaoxin Wudaokou, Shanghai vendor", with(cpu("  Shanghai  ", 3, xcrAVX), func(r *Regs) { r.Leaf1EAX = 0x000107b0 }), 2},
		{"Zhaoxin family 6 model 0x19", with(cpu(centaurHauls, 3, xcrAVX), func(r *Regs) { r.Leaf1EAX = 0x00010690 }), 2},
		{"Zhaoxin Yongfeng (family 7, model 0x5b)", with(cpu(centaurHauls, 3, xcrAVX), func(r *Regs) { r.Leaf1EAX = 0x000507b0 }), 3},
		{"model 0x3b of another vendor", with(cpu(genuineIntel, 3, xcrAVX), func(r *Regs) { r.Leaf1EAX = 0x000307b0 }), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.regs.Level())
		})
	}
}

// TestLevelNeedsEveryFeature: an AVX-512 CPU without any one feature of
// level n is at level n-1.
func TestLevelNeedsEveryFeature(t *testing.T) {
	v4 := cpu(genuineIntel, 4, xcrAVX512)
	for name, f := range features {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, f.level-1, without(v4, name).Level())
		})
	}
}

func TestHwcaps(t *testing.T) {
	tests := []struct {
		level Level
		want  []string
	}{
		{0, nil},
		{1, nil},
		{2, []string{"x86-64-v2"}},
		{3, []string{"x86-64-v3", "x86-64-v2"}},
		{4, []string{"x86-64-v4", "x86-64-v3", "x86-64-v2"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.level.Hwcaps(), "level %d", tt.level)
	}
}

// TestPlatform: glibc names a platform on Intel processors only, from
// the features it finds usable, as for the levels.
func TestPlatform(t *testing.T) {
	v3, v4 := cpu(genuineIntel, 3, xcrAVX), cpu(genuineIntel, 4, xcrAVX512)
	phi := with(v4, func(r *Regs) { r.Leaf7EBX |= ebxAVX512ER | ebxAVX512PF })
	tests := []struct {
		name string
		regs Regs
		want string
	}{
		{"AVX2 CPU", v3, "haswell"},
		{"AVX-512 CPU", v4, "haswell"},
		{"Xeon Phi", phi, "xeon_phi"},
		{"AVX512ER without AVX512PF", with(v4, func(r *Regs) { r.Leaf7EBX |= ebxAVX512ER }), "haswell"},
		{"Xeon Phi, OS saves no ZMM state", with(phi, func(r *Regs) { r.XCR0 = xcrAVX }), "haswell"},
		{"Xeon Phi without AVX512CD", without(phi, "AVX512CD"), "haswell"},
		{"AVX2 CPU without FMA", without(v3, "FMA"), ""},
		{"AVX2 CPU without LZCNT", without(v3, "LZCNT"), ""},
		{"AVX2 CPU without MOVBE", without(v3, "MOVBE"), ""},
		{"AVX2 CPU without POPCNT", without(v3, "POPCNT"), ""},
		{"AVX2 CPU without BMI2", without(v3, "BMI2"), ""},
		{"AVX2 CPU, OS saves no YMM state", cpu(genuineIntel, 3, xcrSSE|1), ""},
		{"haswell's features without F16C (not one of them)", without(v3, "F16C"), "haswell"},
		{"AMD CPU with every feature", cpu("AuthenticAMD", 4, xcrAVX512), ""},
		{"Zhaoxin CPU with every feature", cpu(centaurHauls, 3, xcrAVX), ""},
		{"Nehalem", cpu(genuineIntel, 2, 0), ""},
		// Registers read on two VMs: the Xeon's ld.so
		// --list-diagnostics printed dl_platform="haswell" (and
		// isa_1=0xf); the EPYC's is TestLevel's.
		{"Xeon family 6 model 0xcf VM", Regs{
			MaxLeaf: 0x1c, Vendor: [3]uint32{0x756e6547, 0x49656e69, 0x6c65746e},
			Leaf1EAX: 0xc06f2, Leaf1ECX: 0xfffa3203, Leaf1EDX: 0x1f8bfbff, Leaf7EBX: 0xf1bf2ffb,
			MaxExtLeaf: 0x80000021, Ext1ECX: 0x121, XCR0: 0xe7,
		}, "haswell"},
		{"EPYC family 0x19 VM", Regs{
			MaxLeaf: 0xd, Vendor: [3]uint32{0x68747541, 0x69746e65, 0x444d4163},
			Leaf1EAX: 0xa00f11, Leaf1ECX: 0xfffa3203, Leaf1EDX: 0x178bfbff, Leaf7EBX: 0x219c07ab,
			MaxExtLeaf: 0x80000021, Ext1ECX: 0x4003f3, XCR0: 0x7,
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.regs.Platform())
		})
	}
}

// TestLegacyHwcaps checks the legacy hwcap names of glibc 2.26 to 2.36
// (init_cpu_features): "x86_64" always, "avx512_1" on Intel processors
// only, never beside AVX512ER. The host's are compared with its loader's
// `ld.so --help` in rpath/ldso (TestDefaultConfigMatchesLoader).
func TestLegacyHwcaps(t *testing.T) {
	v4 := cpu(genuineIntel, 4, xcrAVX512)
	both, plain := []string{"avx512_1", "x86_64"}, []string{"x86_64"}
	tests := []struct {
		name string
		regs Regs
		want []string
	}{
		{"AVX-512 CPU", v4, both},
		{"AVX2 CPU", cpu(genuineIntel, 3, xcrAVX), plain},
		{"Xeon Phi", with(v4, func(r *Regs) { r.Leaf7EBX |= ebxAVX512ER | ebxAVX512PF }), plain},
		{"AVX512ER without AVX512PF", with(v4, func(r *Regs) { r.Leaf7EBX |= ebxAVX512ER }), plain},
		{"without AVX512CD", without(v4, "AVX512CD"), plain},
		{"without AVX512BW", without(v4, "AVX512BW"), plain},
		{"without AVX512DQ", without(v4, "AVX512DQ"), plain},
		{"without AVX512VL", without(v4, "AVX512VL"), plain},
		{"OS saves no ZMM state", with(v4, func(r *Regs) { r.XCR0 = xcrAVX }), plain},
		{"AMD CPU with every feature", cpu("AuthenticAMD", 4, xcrAVX512), plain},
		{"Nehalem", cpu(genuineIntel, 2, 0), plain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.regs.LegacyHwcaps())
		})
	}
}
