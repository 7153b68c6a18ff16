package policy

import (
	"debug/elf"
	"fmt"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// SkippedNotELF is the reason a file that does not start with the ELF
// magic is skipped.
const SkippedNotELF = "not ELF"

// Target is the architecture the main job patches for, the interpreter's:
// a file of another class or machine, or of an OS ABI that does not load
// with it, is skipped (auto-patchelf does the same).
type Target struct {
	Class   elf.Class
	Machine elf.Machine
	OSABI   elf.OSABI
}

// InterpreterTarget reads the target from the ELF header of an
// interpreter (any ELF file of the architecture will do).
func InterpreterTarget(path string) (Target, error) {
	f, err := elfedit.Open(path)
	if err != nil {
		return Target{}, err
	}
	defer f.Close()
	return Target{Class: f.Header.Class, Machine: f.Header.Machine, OSABI: f.Header.OSABI}, nil
}

// SkipReason says why the main job, patching for t (nil: any
// architecture), leaves the file described by in alone, in the words of
// its report (File.Skipped); "" when it patches it. cudapatch lint skips
// the same files with the same words.
func SkipReason(in elfedit.Info, t *Target) string {
	_, reason := SkipOf(in, t)
	return reason
}

// SkipOf is SkipReason with the kind of reason, which auto-patchelf's
// SkipFile event words its own way.
func SkipOf(in elfedit.Info, t *Target) (Skip, string) {
	switch in.Kind {
	case elfedit.KindExecutable, elfedit.KindLibrary:
	default:
		return SkipKind, string(in.Kind)
	}
	class, machine, osabi := in.ELFClass(), in.ELFMachine(), in.ELFOSABI()
	if t == nil {
		return SkipNone, ""
	}
	if t.Class != class || t.Machine != machine {
		return SkipArch, fmt.Sprintf("%v %v, not the interpreter's architecture", class, machine)
	}
	if !OSABICompatible(t.OSABI, osabi) {
		return SkipOSABI, fmt.Sprintf("OS ABI %v, not compatible with the interpreter's %v", osabi, t.OSABI)
	}
	return SkipNone, ""
}

// Skip says why a file was skipped, for auto-patchelf's SkipFile event.
type Skip int

// Why files are skipped.
const (
	SkipNone Skip = iota
	SkipNotELF
	SkipNotRegular
	SkipKind
	SkipArch
	SkipOSABI
)

// OSABICompatible is auto-patchelf's rule: equal, or either side SYSV
// (ELFOSABI_NONE, "unspecified") — GNU/Linux files load with SYSV ones.
func OSABICompatible(a, b elf.OSABI) bool {
	return a == b || a == elf.ELFOSABI_NONE || b == elf.ELFOSABI_NONE || a == elf.ELFOSABI_LINUX && b == elf.ELFOSABI_LINUX
}
