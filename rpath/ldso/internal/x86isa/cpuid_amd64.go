package x86isa

// cpuid executes CPUID with EAX=leaf and ECX=sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 executes XGETBV with ECX=0; only valid when OSXSAVE is set.
func xgetbv0() (eax, edx uint32)

// Read returns this CPU's registers, read as glibc reads them: leaf 7 only
// when the highest basic leaf allows, leaf 0x80000001 only when the highest
// extended leaf does, XCR0 only when the OS has set OSXSAVE.
func Read() (Regs, bool) {
	var r Regs
	r.MaxLeaf, r.Vendor[0], r.Vendor[2], r.Vendor[1] = cpuid(0, 0)
	if r.MaxLeaf < 1 {
		return r, true
	}
	r.Leaf1EAX, _, r.Leaf1ECX, r.Leaf1EDX = cpuid(1, 0)
	if r.MaxLeaf >= 7 {
		_, r.Leaf7EBX, _, _ = cpuid(7, 0)
	}
	r.MaxExtLeaf, _, _, _ = cpuid(0x80000000, 0)
	if r.MaxExtLeaf >= 0x80000001 {
		_, _, r.Ext1ECX, _ = cpuid(0x80000001, 0)
	}
	if r.Leaf1ECX&ecxOSXSAVE != 0 {
		lo, hi := xgetbv0()
		r.XCR0 = uint64(hi)<<32 | uint64(lo)
	}
	return r, true
}
