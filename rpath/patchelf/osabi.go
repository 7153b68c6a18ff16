package patchelf

import (
	"debug/elf"
	"fmt"
	"strings"
)

// osabiNames are the OS ABIs --print-os-abi names and --set-os-abi
// accepts, with patchelf's spellings; other values print as 0xNN.
var osabiNames = []struct {
	abi   elf.OSABI
	name  string
	alias []string // also accepted, compared lower-case
}{
	{elf.ELFOSABI_NONE, "System V", []string{"system v", "system-v", "sysv"}},
	{elf.ELFOSABI_HPUX, "HP-UX", []string{"hp-ux"}},
	{elf.ELFOSABI_NETBSD, "NetBSD", []string{"netbsd"}},
	{elf.ELFOSABI_LINUX, "Linux", []string{"linux", "gnu"}},
	{elf.ELFOSABI_HURD, "GNU Hurd", []string{"gnu hurd", "gnu-hurd", "hurd"}},
	{elf.ELFOSABI_SOLARIS, "Solaris", []string{"solaris"}},
	{elf.ELFOSABI_AIX, "AIX", []string{"aix"}},
	{elf.ELFOSABI_IRIX, "IRIX", []string{"irix"}},
	{elf.ELFOSABI_FREEBSD, "FreeBSD", []string{"freebsd"}},
	{elf.ELFOSABI_TRU64, "Tru64", []string{"tru64"}},
	{elf.ELFOSABI_OPENBSD, "OpenBSD", []string{"openbsd"}},
	{elf.ELFOSABI_OPENVMS, "OpenVMS", []string{"openvms"}},
}

// osabiName is --print-os-abi's name of an OS ABI.
func osabiName(a elf.OSABI) string {
	for _, n := range osabiNames {
		if n.abi == a {
			return n.name
		}
	}
	return fmt.Sprintf("0x%02X", uint8(a))
}

// parseOSABI reads --set-os-abi's argument as patchelf does: blanks around
// it ignored, case ignored, one of the names above.
func parseOSABI(s string) (elf.OSABI, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, n := range osabiNames {
		for _, a := range n.alias {
			if s == a {
				return n.abi, true
			}
		}
	}
	return 0, false
}
