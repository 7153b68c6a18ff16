// Package x86isa computes the x86-64 micro-architecture levels glibc's
// loader finds on a CPU, and the platform name it gives some Intel CPUs,
// from the CPUID and XCR0 values it reads, so that the loader simulation
// searches the glibc-hwcaps subdirectories ld.so searches and expands
// $PLATFORM as it does.
//
// The rules are glibc's, not the psABI's list of /proc/cpuinfo names:
// sysdeps/x86/get-isa-level.h (get_isa_level: which features each level
// needs), sysdeps/x86/cpu-features.c (update_active: which of them are
// usable only with OS support, and init_cpu_features: the processors whose
// AVX glibc turns off), and sysdeps/x86_64/dl-hwcaps-subdirs.c (a level's
// subdirectory is searched when it and every lower level are met). The
// kernel's cpuinfo names differ: a CPU with LZCNT may not show "abm", and
// cpuinfo says nothing of the state the OS saves.
//
// [Regs.Level] is a pure function of the register values, so it is tested
// on any machine; [Read] executes CPUID on amd64 and reports false
// elsewhere.
package x86isa

import "strconv"

// Regs are the CPUID and XCR0 values the level depends on, as glibc's
// get_common_indices and get_extended_indices read them.
type Regs struct {
	// MaxLeaf is CPUID(0).EAX, the highest basic leaf.
	MaxLeaf uint32
	// Vendor is CPUID(0) EBX, EDX, ECX: "GenuineIntel", "AuthenticAMD"…
	Vendor [3]uint32
	// Leaf1 is CPUID(1): EAX (family, model, stepping), ECX and EDX
	// (feature bits).
	Leaf1EAX, Leaf1ECX, Leaf1EDX uint32
	// Leaf7EBX is CPUID(7, 0).EBX; ignored when MaxLeaf < 7.
	Leaf7EBX uint32
	// MaxExtLeaf is CPUID(0x80000000).EAX, the highest extended leaf.
	MaxExtLeaf uint32
	// Ext1ECX is CPUID(0x80000001).ECX; ignored when MaxExtLeaf <
	// 0x80000001.
	Ext1ECX uint32
	// XCR0 is XGETBV(0): the register state the OS saves. Ignored
	// unless Leaf1ECX has OSXSAVE (XGETBV faults then).
	XCR0 uint64
}

// Level is a GNU_PROPERTY_X86_ISA_1 level: 0 when even the baseline is
// missing, 1 for the baseline (x86-64), 2 to 4 for x86-64-v2 to v4.
type Level int

// Feature bits, as the Intel SDM and AMD APM number them.
const (
	// CPUID(1).EDX
	edxFPU  = 1 << 0
	edxCX8  = 1 << 8
	edxCMOV = 1 << 15
	edxMMX  = 1 << 23
	edxFXSR = 1 << 24
	edxSSE  = 1 << 25
	edxSSE2 = 1 << 26
	// CPUID(1).ECX
	ecxSSE3       = 1 << 0
	ecxSSSE3      = 1 << 9
	ecxFMA        = 1 << 12
	ecxCMPXCHG16B = 1 << 13
	ecxSSE41      = 1 << 19
	ecxSSE42      = 1 << 20
	ecxMOVBE      = 1 << 22
	ecxPOPCNT     = 1 << 23
	ecxOSXSAVE    = 1 << 27
	ecxAVX        = 1 << 28
	ecxF16C       = 1 << 29
	// CPUID(7, 0).EBX
	ebxBMI1     = 1 << 3
	ebxAVX2     = 1 << 5
	ebxBMI2     = 1 << 8
	ebxAVX512F  = 1 << 16
	ebxAVX512DQ = 1 << 17
	ebxAVX512PF = 1 << 26 // Xeon Phi only
	ebxAVX512ER = 1 << 27 // Xeon Phi only
	ebxAVX512CD = 1 << 28
	ebxAVX512BW = 1 << 30
	ebxAVX512VL = 1 << 31
	// CPUID(0x80000001).ECX
	extLAHF64 = 1 << 0
	extLZCNT  = 1 << 5 // "abm" in /proc/cpuinfo on AMD only
	// XCR0
	xcrSSE    = 1 << 1
	xcrYMM    = 1 << 2
	xcrOpmask = 1 << 5
	xcrZMMHi  = 1 << 6 // upper halves of ZMM0-15
	xcrHi16   = 1 << 7 // ZMM16-31
)

// usable is glibc's CPU_FEATURE_USABLE_P for the features the levels
// need: the CPUID bits, with AVX, AVX2, FMA and F16C only when the OS saves
// XMM and YMM state and AVX-512 only when it also saves the opmask and ZMM
// state (update_active).
type usable struct {
	baseline, v2, v3, v4 bool
	// haswell and xeonPhi are the sets init_cpu_features names a
	// platform for on Intel processors; avx512_1 the set it gave the
	// legacy hwcap bit HWCAP_X86_AVX512_1 for, before glibc 2.37.
	haswell, xeonPhi, avx512_1 bool
}

func (r Regs) usable() usable {
	var leaf7, ext1 uint32
	if r.MaxLeaf >= 7 {
		leaf7 = r.Leaf7EBX
	}
	if r.MaxExtLeaf >= 0x80000001 {
		ext1 = r.Ext1ECX
	}
	all := func(v, mask uint32) bool { return v&mask == mask }

	var xcr0 uint64
	if r.Leaf1ECX&ecxOSXSAVE != 0 {
		xcr0 = r.XCR0
	}
	osYMM := xcr0&(xcrSSE|xcrYMM) == xcrSSE|xcrYMM
	osZMM := osYMM && xcr0&(xcrOpmask|xcrZMMHi|xcrHi16) == xcrOpmask|xcrZMMHi|xcrHi16
	avx := osYMM && r.Leaf1ECX&ecxAVX != 0 && !r.avxDisabled()
	avx512f := osZMM && leaf7&ebxAVX512F != 0

	return usable{
		baseline: all(r.Leaf1EDX, edxFPU|edxCX8|edxCMOV|edxMMX|edxFXSR|edxSSE|edxSSE2),
		v2: all(r.Leaf1ECX, ecxCMPXCHG16B|ecxPOPCNT|ecxSSE3|ecxSSSE3|ecxSSE41|ecxSSE42) &&
			all(ext1, extLAHF64),
		v3: avx && all(leaf7, ebxAVX2|ebxBMI1|ebxBMI2) &&
			all(r.Leaf1ECX, ecxF16C|ecxFMA|ecxMOVBE) && all(ext1, extLZCNT),
		v4: avx512f && all(leaf7, ebxAVX512BW|ebxAVX512CD|ebxAVX512DQ|ebxAVX512VL),
		haswell: avx && all(leaf7, ebxAVX2|ebxBMI1|ebxBMI2) &&
			all(r.Leaf1ECX, ecxFMA|ecxMOVBE|ecxPOPCNT) && all(ext1, extLZCNT),
		xeonPhi: avx512f && all(leaf7, ebxAVX512CD|ebxAVX512ER|ebxAVX512PF),
		avx512_1: avx512f && all(leaf7, ebxAVX512CD|ebxAVX512BW|ebxAVX512DQ|ebxAVX512VL) &&
			leaf7&ebxAVX512ER == 0,
	}
}

// intel is the vendor string "GenuineIntel".
var intel = [3]uint32{0x756e6547, 0x49656e69, 0x6c65746e}

// Platform returns the $PLATFORM (dl_platform) glibc's x86-64 loader
// sets on this CPU in place of the kernel's AT_PLATFORM, "x86_64", and
// "" when it keeps that: on Intel processors only, "xeon_phi" with
// AVX512CD, AVX512ER and AVX512PF usable, else "haswell" with AVX2, FMA,
// BMI1, BMI2, LZCNT, MOVBE and POPCNT usable (init_cpu_features, glibc
// 2.26 and later). An AMD processor with the same features keeps
// "x86_64".
func (r Regs) Platform() string {
	if r.Vendor != intel {
		return ""
	}
	switch u := r.usable(); {
	case u.xeonPhi:
		return "xeon_phi"
	case u.haswell:
		return "haswell"
	}
	return ""
}

// LegacyHwcaps returns the legacy hwcap names glibc 2.26 to 2.36 gave
// this CPU (dl_hwcap under the mask HWCAP_IMPORTANT), highest bit first,
// as `ld.so --help` lists them: "avx512_1" on an Intel processor with
// AVX512CD, AVX512BW, AVX512DQ and AVX512VL usable and no AVX512ER, then
// "x86_64", which every x86-64 processor has (init_cpu_features). glibc
// 2.37 dropped the subdirectories they named.
func (r Regs) LegacyHwcaps() []string {
	if r.Vendor == intel && r.usable().avx512_1 {
		return []string{"avx512_1", "x86_64"}
	}
	return []string{"x86_64"}
}

// avxDisabled reports the processors on which glibc turns AVX and AVX2 off
// after reading them (init_cpu_features): Zhaoxin family 6 models 0x0f and
// 0x19, family 7 models 0x1b (Wudaokou) and 0x3b (Lujiazui).
func (r Regs) avxDisabled() bool {
	centaur := r.Vendor == [3]uint32{0x746e6543, 0x48727561, 0x736c7561}  // "CentaurHauls"
	shanghai := r.Vendor == [3]uint32{0x68532020, 0x68676e61, 0x20206961} // "  Shanghai  "
	if !centaur && !shanghai {
		return false
	}
	family := r.Leaf1EAX >> 8 & 0x0f
	model := r.Leaf1EAX>>4&0x0f + r.Leaf1EAX>>12&0xf0
	switch family {
	case 6:
		return model == 0x0f || model == 0x19
	case 7:
		return model == 0x1b || model == 0x3b
	}
	return false
}

// Level is the ISA level glibc computes from these registers
// (get_isa_level): the highest level whose features, and every lower
// level's, are all usable.
func (r Regs) Level() Level {
	u := r.usable()
	switch {
	case !u.baseline:
		return 0
	case !u.v2:
		return 1
	case !u.v3:
		return 2
	case !u.v4:
		return 3
	}
	return 4
}

// Hwcaps returns the glibc-hwcaps subdirectories ld.so searches at this
// level, best first: none below x86-64-v2.
func (l Level) Hwcaps() []string {
	var out []string
	for v := min(int(l), 4); v >= 2; v-- {
		out = append(out, "x86-64-v"+strconv.Itoa(v))
	}
	return out
}
