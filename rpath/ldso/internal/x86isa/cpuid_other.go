//go:build !amd64

package x86isa

// Read reports false: this program does not run on an x86-64 CPU, so it
// cannot say what one supports.
func Read() (Regs, bool) { return Regs{}, false }
