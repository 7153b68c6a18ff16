package ldso

import (
	"debug/elf"
	"errors"
	"fmt"
	"path"
)

// HostShell is the program FindHost asks: every Linux system has one, and
// it is linked against the system's own libc.
const HostShell = "/bin/sh"

// Host is a system's own loader and libc, as its shell uses them.
type Host struct {
	// Interpreter is the shell's PT_INTERP, as written there
	// (/lib64/ld-linux-x86-64.so.2 on Debian, a store path on NixOS).
	Interpreter string
	// LibcDir is the directory the loader takes the shell's libc.so.6
	// from (/lib/x86_64-linux-gnu on Debian).
	LibcDir string
	// Class, Machine and OSABI are the interpreter's.
	Class   elf.Class
	Machine elf.Machine
	OSABI   elf.OSABI
}

// FindHost finds the loader and libc of the system installed under root
// ("" for this machine) without running anything: the interpreter HostShell
// names, and the directory the simulated loader finds its libc.so.6 in.
// Paths are logical (inside root). The error says why there is none: a
// static shell, a libc not found, a shell of no glibc system.
func FindHost(root string) (Host, error) {
	cfg := Config{Root: root, WorkDir: "/"}
	read := ElfReader()
	sh, err := newFsys(cfg)
	if err != nil {
		return Host{}, err
	}
	hp, err := sh.host(HostShell)
	if err != nil {
		return Host{}, fmt.Errorf("%s: %w", HostShell, err)
	}
	o, err := read(hp)
	if err != nil {
		return Host{}, fmt.Errorf("%s: %w", HostShell, err)
	}
	if o.Interp == "" {
		return Host{}, fmt.Errorf("%s has no interpreter (statically linked)", HostShell)
	}
	ip, err := sh.host(o.Interp)
	if err != nil {
		return Host{}, fmt.Errorf("%s's interpreter %s: %w", HostShell, o.Interp, err)
	}
	io, err := read(ip)
	if err != nil {
		return Host{}, fmt.Errorf("%s's interpreter %s: %w", HostShell, o.Interp, err)
	}
	if cfg, err = DefaultConfig(root, o.Class, o.Machine); err != nil {
		return Host{}, err
	}
	cfg.WorkDir = "/"
	tr, err := Resolve(cfg, read, HostShell)
	if err != nil {
		return Host{}, fmt.Errorf("%s: %w", HostShell, err)
	}
	for _, n := range tr.Needs {
		if n.Name == "libc.so.6" && n.Found() {
			return Host{Interpreter: o.Interp, LibcDir: path.Dir(n.Path), Class: io.Class, Machine: io.Machine, OSABI: io.OSABI}, nil
		}
	}
	return Host{}, errors.New(HostShell + " loads no libc.so.6 this loader finds (not a glibc system)")
}
