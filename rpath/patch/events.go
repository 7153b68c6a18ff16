package patch

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// Event is one line of auto-patchelf's --structured-logs: an event type
// (SkipFile, SetInterpreter, Dependency, IgnoredDependency, SetRpath) and
// its fields in the order of the Python dataclass that prints it.
type Event struct {
	Type   string
	Fields []EventField
}

// EventField is one field of an Event. Value is a string, a bool, or nil
// (JSON null).
type EventField struct {
	Key   string
	Value any
}

// EventOptions says how AutoPatchelfEvents spells what it prints.
type EventOptions struct {
	// Display turns the absolute path of a file to patch into the path
	// auto-patchelf would print: its --paths argument as given, joined with
	// the path below it. Nil prints absolute paths.
	Display func(path string) string
}

// AutoPatchelfEvents returns the events nixpkgs' auto-patchelf prints with
// --structured-logs for the decisions in rep, in its order: per file, in
// the order files were patched, a SkipFile, or a SetInterpreter for
// executables, a Dependency for every dependency looked up in the
// libraries, and a SetRpath when the RUNPATH is not empty; after every
// file, an IgnoredDependency for each ignored one. Where it differs, and
// why: docs/auto-patchelf.md.
func AutoPatchelfEvents(rep *Report, opts EventOptions) []Event {
	display := opts.Display
	if display == nil {
		display = func(p string) string { return p }
	}
	var out, ignored []Event
	for _, f := range rep.Files {
		file := display(f.Path)
		if f.facts.skip != policy.SkipNone {
			if reason := skipReason(f); reason != "" {
				out = append(out, Event{"SkipFile", []EventField{{"file", file}, {"reason", reason}}})
			}
			continue
		}
		if len(f.Errors) > 0 && f.Kind == "" {
			continue // unreadable: auto-patchelf stops with a traceback there
		}
		if f.Interpreter != "" {
			out = append(out, Event{"SetInterpreter", []EventField{{"file", file}, {"interpreter_path", PyPath(f.Interpreter)}}})
		}
		for _, d := range f.Deps {
			name := d.Name
			if !strings.HasPrefix(name, "any(") {
				name = PyPath(name)
			}
			switch d.How {
			case policy.HowStore:
				out = append(out, Event{"Dependency", []EventField{{"file", file}, {"name", name}, {"found", true}, {"location", d.Dir}}})
			case policy.HowMissing, policy.HowIgnored, policy.HowDriver:
				out = append(out, Event{"Dependency", []EventField{{"file", file}, {"name", name}, {"found", false}, {"location", nil}}})
				if d.Pattern != "" {
					ignored = append(ignored, Event{"IgnoredDependency", []EventField{{"file", file}, {"name", name}, {"pattern", d.Pattern}}})
				}
			}
		}
		if f.RunPath != "" {
			out = append(out, Event{"SetRpath", []EventField{{"file", file}, {"rpath", f.RunPath}}})
		}
	}
	return append(out, ignored...)
}

// skipReason is auto-patchelf's SkipFile reason, or "" where it prints
// nothing (a file that is not ELF).
func skipReason(f *File) string {
	switch f.facts.skip {
	case policy.SkipArch:
		return fmt.Sprintf("its architecture (%s) differs from target (%s)", pyArch(f.facts.machine), pyArch(f.facts.target.Machine))
	case policy.SkipOSABI:
		return fmt.Sprintf("its OS ABI (%s) is not compatible with target (%s)", pyOSABI(f.facts.osabi), pyOSABI(f.facts.target.OSABI))
	case policy.SkipKind:
		switch f.Kind {
		case "static":
			return "it is statically linked"
		case "relocatable":
			return "it contains no segment"
		case "static-pie":
			return "it is a static PIE: nothing loads its dependencies"
		case "dynamic-loader":
			return "it is a dynamic loader"
		case "debug-object":
			return "it looks like a separate debug object"
		}
		return "it is neither an executable nor a shared library"
	}
	return ""
}

// PyPath is str(pathlib.PurePosixPath(p)): repeated slashes and "."
// components dropped, no trailing slash, exactly two leading slashes kept
// (POSIX leaves their meaning open), "." for an empty path. auto-patchelf
// prints every path it took as an argument or built with pathlib so.
func PyPath(p string) string {
	if p == "" {
		return "."
	}
	lead := ""
	switch {
	case strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///"):
		lead = "//"
	case strings.HasPrefix(p, "/"):
		lead = "/"
	}
	var parts []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	s := lead + strings.Join(parts, "/")
	if s == "" {
		return "."
	}
	return s
}

// DisplayPaths returns an EventOptions.Display for the paths to patch as
// the user gave them: a file found below the absolute form of given[i] is
// printed as PyPath(given[i]) joined with the path below it.
func DisplayPaths(given []string) func(string) string {
	type root struct{ abs, shown string }
	var roots []root
	for _, g := range given {
		a, err := filepath.Abs(g)
		if err != nil {
			continue
		}
		roots = append(roots, root{a, PyPath(g)})
	}
	return func(p string) string {
		for _, r := range roots {
			if p == r.abs {
				return r.shown
			}
			if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(r.abs, "/")+"/"); ok {
				if r.shown == "." {
					return rest
				}
				return strings.TrimSuffix(r.shown, "/") + "/" + rest
			}
		}
		return p
	}
}

// pyArch is pyelftools' ELFFile.get_machine_arch() name of a machine.
func pyArch(m elf.Machine) string {
	if s, ok := pyArchNames[m]; ok {
		return s
	}
	return "<unknown>"
}

var pyArchNames = map[elf.Machine]string{
	elf.EM_SPARC: "SPARC", elf.EM_386: "x86", elf.EM_68K: "Motorola 68000", elf.EM_88K: "Motorola 88000",
	elf.EM_860: "Intel 80860", elf.EM_MIPS: "MIPS", elf.EM_S370: "IBM System/370",
	elf.EM_MIPS_RS3_LE: "MIPS RS3000 Little-endian", elf.EM_PARISC: "Hewlett-Packard PA-RISC",
	elf.EM_SPARC32PLUS: "Enhanced SPARC", elf.EM_960: "Intel 80960", elf.EM_PPC: "PowerPC",
	elf.EM_PPC64: "64-bit PowerPC", elf.EM_S390: "IBM System/390", elf.EM_ARM: "ARM",
	elf.EM_ALPHA: "Digital Alpha", elf.EM_SH: "Hitachi SH", elf.EM_SPARCV9: "SPARC Version 9",
	elf.EM_IA_64: "Intel IA-64", elf.EM_X86_64: "x64", elf.EM_AARCH64: "AArch64",
	elf.EM_CUDA: "NVIDIA CUDA", elf.EM_AMDGPU: "AMD GPU", elf.EM_RISCV: "RISC-V",
	elf.EM_BPF: "Linux BPF - in-kernel virtual machine", elf.EM_MICROBLAZE: "Xilinx MicroBlaze 32-bit RISC",
	elf.EM_XTENSA: "Tensilica Xtensa", elf.EM_ALTERA_NIOS2: "Altera Nios II",
	elf.EM_TILEGX: "Tilera TILE-Gx", elf.EM_MCST_ELBRUS: "MCST Elbrus", elf.EM_AVR: "Atmel AVR 8-bit",
	elf.EM_OPENRISC: "OpenRISC 32-bit", elf.EM_ARC_COMPACT: "ARC International ARCompact",
	elf.EM_ARC_COMPACT2: "Synopsys ARCompact V2", elf.EM_M32R: "Mitsubishi M32R", 252: "C-SKY", 0x5441: "Fujitsu FR-V",
}

// pyOSABI is pyelftools' name of an OS ABI (the number where it has none).
func pyOSABI(o elf.OSABI) string {
	if s, ok := pyOSABINames[o]; ok {
		return s
	}
	return strconv.Itoa(int(o))
}

var pyOSABINames = map[elf.OSABI]string{
	0: "ELFOSABI_SYSV", 1: "ELFOSABI_HPUX", 2: "ELFOSABI_NETBSD", 3: "ELFOSABI_LINUX", 4: "ELFOSABI_HURD",
	6: "ELFOSABI_SOLARIS", 7: "ELFOSABI_AIX", 8: "ELFOSABI_IRIX", 9: "ELFOSABI_FREEBSD", 10: "ELFOSABI_TRU64",
	11: "ELFOSABI_MODESTO", 12: "ELFOSABI_OPENBSD", 13: "ELFOSABI_OPENVMS", 14: "ELFOSABI_NSK",
	15: "ELFOSABI_AROS", 16: "ELFOSABI_FENIXOS", 17: "ELFOSABI_CLOUD", 53: "ELFOSABI_SORTIX",
	64: "ELFOSABI_ARM_AEABI", 97: "ELFOSABI_ARM", 102: "ELFOSABI_CELL_LV2", 255: "ELFOSABI_STANDALONE",
}

// PythonJSON is the event as auto-patchelf prints it:
// json.dumps({type: asdict(event)}, default=str), with Python's separators
// (", " and ": ") and escapes (every non-ASCII character as \uXXXX, bytes
// that are not UTF-8 as the lone surrogates Python decodes them to).
func (e Event) PythonJSON() string {
	var b strings.Builder
	b.WriteString("{")
	pyString(&b, e.Type)
	b.WriteString(": {")
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteString(", ")
		}
		pyString(&b, f.Key)
		b.WriteString(": ")
		switch v := f.Value.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case string:
			pyString(&b, v)
		default:
			pyString(&b, fmt.Sprint(v))
		}
	}
	b.WriteString("}}")
	return b.String()
}

// pyString writes s as Python's json.dumps (ensure_ascii=True) does.
func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			// os.fsdecode's surrogateescape: byte 0xXY becomes U+DCXY.
			fmt.Fprintf(b, `\udc%02x`, s[i])
			i++
			continue
		}
		i += n
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || (r >= 0x7f && r <= 0xffff):
			fmt.Fprintf(b, `\u%04x`, r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
