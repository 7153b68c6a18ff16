package elfedit

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"strings"
)

// Kind classifies a file the way a patcher must treat it.
type Kind string

// The kinds of ELF file.
const (
	KindExecutable  Kind = "executable"     // has PT_INTERP (PIE or not)
	KindLibrary     Kind = "shared-library" // ET_DYN without PT_INTERP, not a PIE
	KindStatic      Kind = "static"         // ET_EXEC without PT_DYNAMIC
	KindStaticPIE   Kind = "static-pie"     // ET_DYN with DF_1_PIE and no PT_INTERP
	KindLoader      Kind = "dynamic-loader" // ET_DYN, an entry point, no PT_INTERP, no DT_NEEDED: ld.so itself
	KindDebugObject Kind = "debug-object"   // separate debug info, contents NOBITS
	KindRelocatable Kind = "relocatable"    // ET_REL
	KindOther       Kind = "other"          // core files and the like
)

// Note type of the freedesktop.org .note.dlopen ELF note
// (https://systemd.io/ELF_DLOPEN_METADATA/), owner "FDO".
const noteDlopenType = 0x407c0c0a

// DlopenNote is one entry of a .note.dlopen note: libraries a file may
// dlopen, in order of preference.
type DlopenNote struct {
	Soname      []string `json:"soname"`
	Feature     string   `json:"feature,omitempty"`
	Description string   `json:"description,omitempty"`
	Priority    string   `json:"priority,omitempty"`
}

// Info is what a patcher or a linter needs to know about one file.
type Info struct {
	Class       string       `json:"class"`
	Data        string       `json:"data"`
	Machine     string       `json:"machine"`
	OSABI       string       `json:"osabi"`
	Type        string       `json:"type"`
	Kind        Kind         `json:"kind"`
	Interpreter string       `json:"interpreter,omitempty"`
	Soname      string       `json:"soname,omitempty"`
	Needed      []string     `json:"needed,omitempty"`
	RPath       *string      `json:"rpath,omitempty"`
	RunPath     *string      `json:"runpath,omitempty"`
	Flags1      uint64       `json:"flags_1,omitempty"`
	Dlopen      []DlopenNote `json:"dlopen,omitempty"`
	// ExecStack is the stack flag of PT_GNU_STACK: "X" (executable) or
	// "-"; "" when there is no PT_GNU_STACK.
	ExecStack string `json:"exec_stack,omitempty"`
	// Debug says whether .dynamic has a DT_DEBUG entry.
	Debug bool `json:"dt_debug,omitempty"`
	// Spare is the number of unused DT_NULL slots after the terminator: how
	// many entries can be added without moving .dynamic.
	Spare int `json:"spare_dynamic_slots"`

	class   elf.Class
	machine elf.Machine
	osabi   elf.OSABI
}

// ELFClass, ELFMachine and ELFOSABI return the typed header values.
func (i *Info) ELFClass() elf.Class     { return i.class }
func (i *Info) ELFMachine() elf.Machine { return i.machine }
func (i *Info) ELFOSABI() elf.OSABI     { return i.osabi }

// Kind classifies the file.
func (f *File) Kind() Kind {
	h := f.Header
	switch {
	case f.debugOnly:
		return KindDebugObject
	case h.Type == elf.ET_REL:
		return KindRelocatable
	case h.Type != elf.ET_EXEC && h.Type != elf.ET_DYN:
		return KindOther
	case f.interpProg >= 0:
		if h.Type == elf.ET_DYN && !f.isPIE() {
			// A library that can also be run, like libc.so.6: the loaders
			// treat it as a library when it is loaded as a dependency.
			return KindLibrary
		}
		return KindExecutable
	case f.dynProg < 0:
		return KindStatic
	case h.Type == elf.ET_EXEC:
		return KindStatic // dynamic section but no interpreter: nothing loads its deps
	case f.isPIE():
		return KindStaticPIE
	case h.Entry != 0 && len(f.Needed()) == 0 && isLoaderName(f.Soname()):
		// A self-relocating object that can be run and needs nothing,
		// named like a dynamic loader: glibc's ld.so (ld-linux*.so.*,
		// ld64.so.*, ld.so.*) or musl's (ld-musl-*). Like a static PIE, it
		// relocates itself before anything else runs.
		return KindLoader
	}
	return KindLibrary
}

// isLoaderName reports the SONAMEs of Linux dynamic loaders.
func isLoaderName(soname string) bool {
	return strings.HasPrefix(soname, "ld-") || strings.HasPrefix(soname, "ld64.so.") || strings.HasPrefix(soname, "ld.so.")
}

func (f *File) isPIE() bool {
	v, _ := f.dynVal(elf.DT_FLAGS_1)
	return v&uint64(elf.DF_1_PIE) != 0
}

// Needed returns the DT_NEEDED names in order.
func (f *File) Needed() []string {
	var out []string
	for _, d := range f.Dynamic[:max(f.dynLen, 0)] {
		if d.Tag == elf.DT_NEEDED {
			s, _ := cstring(f.strtab, d.Val)
			out = append(out, s)
		}
	}
	return out
}

// RunPath returns DT_RUNPATH and whether the file has one.
func (f *File) RunPath() (string, bool) { return f.dynString(elf.DT_RUNPATH) }

// RPath returns DT_RPATH and whether the file has one.
func (f *File) RPath() (string, bool) { return f.dynString(elf.DT_RPATH) }

// Soname returns DT_SONAME, or "" if there is none.
func (f *File) Soname() string { s, _ := f.dynString(elf.DT_SONAME); return s }

// Info summarises the file.
func (f *File) Info() Info {
	h := f.Header
	in := Info{
		Class: h.Class.String(), Data: h.Data.String(), Machine: h.Machine.String(),
		OSABI: h.OSABI.String(), Type: h.Type.String(), Kind: f.Kind(),
		Interpreter: f.Interp, Soname: f.Soname(), Needed: f.Needed(),
		class: h.Class, machine: h.Machine, osabi: h.OSABI,
	}
	if s, ok := f.RPath(); ok {
		in.RPath = &s
	}
	if s, ok := f.RunPath(); ok {
		in.RunPath = &s
	}
	in.Flags1, _ = f.dynVal(elf.DT_FLAGS_1)
	_, in.Debug = f.dynVal(elf.DT_DEBUG)
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_STACK {
			in.ExecStack = "-"
			if p.Flags&elf.PF_X != 0 {
				in.ExecStack = "X"
			}
		}
	}
	if f.dynLen >= 0 && len(f.Dynamic) > 0 {
		in.Spare = len(f.Dynamic) - f.dynLen - 1
	}
	in.Dlopen, _ = f.DlopenNotes()
	return in
}

// DlopenNotes returns the entries of every FDO .note.dlopen note in the
// PT_NOTE segments. A note whose JSON does not parse is an error; files
// without such notes return nil.
func (f *File) DlopenNotes() ([]DlopenNote, error) {
	var out []DlopenNote
	ns, err := f.allNotes()
	for _, n := range ns {
		if !n.Loaded || n.Owner != "FDO" || n.Type != noteDlopenType {
			continue
		}
		var entries []DlopenNote
		if err := json.Unmarshal(bytes.TrimRight(n.Desc, "\x00"), &entries); err != nil {
			return out, formatErr(n.Off, ".note.dlopen: %v", err)
		}
		out = append(out, entries...)
	}
	return out, err
}

func alignUp(v, a uint64) uint64 {
	if a <= 1 {
		return v
	}
	return (v + a - 1) &^ (a - 1)
}
