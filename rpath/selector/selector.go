// Package selector generates and builds the selector: a small shared
// library with SONAME libcuda.so.1 that a program's RUNPATH names before
// the driver link, in place of the cuda_compat directory. When the process
// starts it reads the loaded kernel module's version, decides between
// cuda_compat's libcuda and the driver's own by nvdriver.Choose's rules,
// loads the chosen one by absolute path and forwards every entry point to
// it. A program that links libcuda.so.1 and one that dlopens it by name get
// the same library, and only that one real libcuda is ever mapped.
//
// It builds on rpath/nvdriver (the decision and the compat note) and the
// standard library; it runs the C compiler it is given.
//
// # The library
//
// Source writes one C file. Each function of Spec.Functions is an
// assembler trampoline (x86_64 and aarch64) that jumps through a table.
// The table starts pointing at a resolver that saves the argument
// registers, runs the one-time initialisation, restores them and jumps on,
// so a call that arrives before the selector's constructor (an init-order
// corner) still reaches the right library; the constructor runs the same
// initialisation at load. The initialisation:
//
//   - reads the module version from PROC/driver/nvidia/version (the token
//     after "Kernel Module", as nvdriver.KernelModule does), else
//     SYS/module/nvidia/version;
//   - applies nvdriver.Choose's rules 1-4 and 6 with the compat version and
//     driver branches fixed at generation (the devices are unknown before a
//     libcuda is loaded, so rule 5 never applies); with no module version
//     but SYS/module/nvgpu present (a Jetson), compat;
//   - dlopens the chosen file by absolute path (RTLD_NOW|RTLD_LOCAL): the
//     compat file, or the first of Spec.Driver that loads;
//   - fills the table by dlsym. A function the chosen library lacks returns
//     801 (CUDA_ERROR_NOT_SUPPORTED); with no kernel module, or when the
//     chosen file cannot be loaded, every function returns 100
//     (CUDA_ERROR_NO_DEVICE).
//
// It reads no environment variable, writes nothing to stdout or stderr and
// needs no privilege. When the chosen library's own constructor calls one
// of its exported functions and that call binds to the selector (the
// selector comes first in the global scope), the call is answered from the
// library being loaded, without waiting for the initialisation it is part
// of.
//
// Data symbols are not forwarded: the real libcuda's cudbg* variables are
// read by the CUDA debugger from the real library, which is mapped and
// named in the link map as usual; the selector exports functions only.
// Functions that a driver newer than compat adds are not exported either:
// Spec.Functions is fixed at generation (programs that take entry points
// through cuGetProcAddress, as cudart does, get the real library's).
//
// The selector carries a note, section .note.cudapatch.selector (owner
// "cudapatch"), holding what it was generated from as JSON; Read reads it,
// so that a selector can be told from a real libcuda.
package selector

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
)

// Name is the selector's file name and SONAME.
const Name = "libcuda.so.1"

// NoteSection is the section that marks a selector and holds its Info.
const NoteSection = ".note.cudapatch.selector"

// noteOwner is the note's name field.
const noteOwner = "cudapatch"

// MaxFunctions bounds the functions a selector forwards (libcuda 580
// exports under a thousand).
const MaxFunctions = 1 << 14

// maxNote bounds the note section read back.
const maxNote = 1 << 20

// Spec is what a selector is generated from.
type Spec struct {
	// Compat is the absolute path of cuda_compat's libcuda file, the one
	// dlopened when compat is chosen.
	Compat string
	// Info is what that file says about itself (nvdriver.ReadCompat): its
	// version and the note's driver branches are what the decision uses.
	Info nvdriver.Compat
	// Driver lists absolute paths of the driver's libcuda, tried in order
	// when the driver is chosen (/run/opengl-driver/lib/libcuda.so.1); a
	// path that loads the selector itself is passed over.
	Driver []string
	// Functions are the names forwarded, usually Functions(Compat).
	Functions []string
	// Proc and Sys are where procfs and sysfs are mounted; "" means
	// /proc and /sys. Tests point them at fake trees.
	Proc, Sys string
}

// Info is what a selector's note says: what it was generated from.
type Info struct {
	Compat        string   `json:"compat"`
	CompatVersion string   `json:"compat_version"`
	Branches      []int    `json:"driver_branches"`
	Driver        []string `json:"driver"`
	Proc          string   `json:"proc"`
	Sys           string   `json:"sys"`
	Functions     int      `json:"functions"`
}

// CompatInfo is the compat side of the decision, as the selector applies
// it: the version and the driver branches (no device list).
func (i *Info) CompatInfo() nvdriver.Compat {
	c := nvdriver.Compat{Version: i.CompatVersion}
	if len(i.Branches) > 0 {
		c.Note = &nvdriver.CompatNote{Format: 1, Driver: slices.Clone(i.Branches)}
	}
	return c
}

// Choose is the choice the selector makes on machine m: nvdriver.Choose
// without devices, which nothing reads before a libcuda is loaded.
func (i *Info) Choose(m nvdriver.Machine) nvdriver.Choice {
	m.Devices = nil
	return nvdriver.Choose(i.CompatInfo(), m)
}

// ErrNotSelector is returned by Read for a file without the selector's
// note: a real libcuda, a stub, another library.
var ErrNotSelector = errors.New("not a cudapatch selector (no " + NoteSection + " note)")

// Functions lists the exported, defined function symbols of a libcuda
// file, sorted: the entry points a selector forwards. Objects (the
// debugger's cudbg* variables) are left out, and so are _init and _fini.
func Functions(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: dynamic symbols: %w", path, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range syms {
		typ, bind := elf.ST_TYPE(s.Info), elf.ST_BIND(s.Info)
		switch {
		case typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC,
			bind != elf.STB_GLOBAL && bind != elf.STB_WEAK,
			s.Section == elf.SHN_UNDEF,
			elf.ST_VISIBILITY(s.Other) != elf.STV_DEFAULT && elf.ST_VISIBILITY(s.Other) != elf.STV_PROTECTED,
			s.Name == "_init" || s.Name == "_fini",
			!isIdent(s.Name), seen[s.Name]:
			continue
		}
		seen[s.Name] = true
		out = append(out, s.Name)
		if len(out) > MaxFunctions {
			return nil, fmt.Errorf("%s: more than %d exported functions", path, MaxFunctions)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no exported functions", path)
	}
	slices.Sort(out)
	return out, nil
}

// isIdent reports whether s is a C identifier, the names a trampoline can
// carry.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// check validates a spec and returns it with the defaults filled in.
func (s Spec) check() (Spec, error) {
	if s.Proc == "" {
		s.Proc = "/proc"
	}
	if s.Sys == "" {
		s.Sys = "/sys"
	}
	paths := append([]string{s.Compat, s.Proc, s.Sys}, s.Driver...)
	for _, p := range paths {
		if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return s, fmt.Errorf("selector: %q is not an absolute path", p)
		}
	}
	if len(s.Driver) == 0 {
		return s, errors.New("selector: no driver libcuda path")
	}
	if !nvdriver.IsVersion(s.Info.Version) {
		return s, fmt.Errorf("selector: %s: compat version %q is not a driver version", s.Compat, s.Info.Version)
	}
	if len(s.Functions) == 0 || len(s.Functions) > MaxFunctions {
		return s, fmt.Errorf("selector: %d functions, want 1 to %d", len(s.Functions), MaxFunctions)
	}
	seen := map[string]bool{}
	for _, f := range s.Functions {
		switch {
		case !isIdent(f) || f == "_init" || f == "_fini" || strings.HasPrefix(f, "cudapatch_sel"):
			return s, fmt.Errorf("selector: %q cannot be forwarded", f)
		case seen[f]:
			return s, fmt.Errorf("selector: %q listed twice", f)
		}
		seen[f] = true
	}
	return s, nil
}

// info is the note a spec's selector carries.
func (s Spec) info() Info {
	i := Info{Compat: s.Compat, CompatVersion: s.Info.Version, Driver: s.Driver, Proc: s.Proc, Sys: s.Sys, Functions: len(s.Functions)}
	if s.Info.Note != nil {
		i.Branches = s.Info.Note.Driver
	}
	return i
}

// Build generates the selector of spec and compiles it with cc (the
// compiler and any flags of its own, e.g. {"gcc"} or
// {"aarch64-linux-gnu-gcc"}) into outDir/libcuda.so.1, replacing any
// file there only once the new one is complete.
func Build(ctx context.Context, spec Spec, cc []string, outDir string) error {
	if len(cc) == 0 {
		return errors.New("selector: no C compiler")
	}
	src, err := Source(spec)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(outDir, ".selector-")
	if err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	defer os.RemoveAll(tmp)
	c := filepath.Join(tmp, "selector.c")
	if err := os.WriteFile(c, src, 0o644); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	lib := filepath.Join(tmp, Name)
	// Relative names, run in tmp: the source's name is kept in the
	// library (its STT_FILE symbol), and a random directory there would
	// make two builds of one spec differ.
	args := append(slices.Clone(cc[1:]), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
		"-Wl,-soname,"+Name, "-Wl,-z,noexecstack", "-o", Name, "selector.c", "-ldl", "-lpthread")
	cmd := exec.CommandContext(ctx, cc[0], args...)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("selector: %s: %w: %s", cc[0], err, oneLine(out))
	}
	if err := os.Chmod(lib, 0o555); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	if err := os.Rename(lib, filepath.Join(outDir, Name)); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	return nil
}

// oneLine is a compiler's output for a one-line error: its lines joined,
// at most 400 bytes.
func oneLine(out []byte) string {
	s := strings.Join(strings.Fields(string(bytes.ReplaceAll(bytes.TrimSpace(out), []byte("\n"), []byte(" | ")))), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// Read reads the note of a selector file; ErrNotSelector (wrapped, with
// the path) when the file has none.
func Read(path string) (*Info, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	s := f.Section(NoteSection)
	if s == nil || s.Type != elf.SHT_NOTE {
		return nil, fmt.Errorf("%s: %w", path, ErrNotSelector)
	}
	if s.Size > maxNote {
		return nil, fmt.Errorf("%s: %s: %d bytes, more than %d", path, NoteSection, s.Size, maxNote)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, NoteSection, err)
	}
	if len(data) < 12 {
		return nil, fmt.Errorf("%s: %s: %d bytes, too short for a note", path, NoteSection, len(data))
	}
	namesz := uint64(f.ByteOrder.Uint32(data[0:]))
	descsz := uint64(f.ByteOrder.Uint32(data[4:]))
	descOff := 12 + (namesz+3)&^3
	if 12+namesz > uint64(len(data)) || descOff+descsz > uint64(len(data)) {
		return nil, fmt.Errorf("%s: %s: the note runs past the section", path, NoteSection)
	}
	if name := string(bytes.TrimRight(data[12:12+namesz], "\x00")); name != noteOwner {
		return nil, fmt.Errorf("%s: %s: owner %q, want %q", path, NoteSection, name, noteOwner)
	}
	var i Info
	if err := json.Unmarshal(bytes.TrimRight(data[descOff:descOff+descsz], "\x00"), &i); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, NoteSection, err)
	}
	return &i, nil
}

// cString quotes s as a C string literal: printable ASCII as is, the rest
// in octal.
func cString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\' || c == '?':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\%03o", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Source returns the C source of the selector for spec: one file, for
// x86_64 or aarch64 (#error elsewhere), built with -shared -fPIC -ldl.
// Defined when compiling, CUDAPATCH_SELECTOR_TIMING exports
// cudapatch_selector_init_ns, the nanoseconds the initialisation took;
// CUDAPATCH_SELECTOR_DECIDE_MAIN leaves out the forwarding and makes a
// program that prints the decision (the tests compare it with
// nvdriver.Choose).
func Source(spec Spec) ([]byte, error) {
	s, err := spec.check()
	if err != nil {
		return nil, err
	}
	note, err := json.Marshal(s.info())
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(head)
	fmt.Fprintf(&b, "#define SEL_N %d\n", len(s.Functions))
	b.WriteString("static const char sel_names[] =\n")
	for _, f := range s.Functions {
		fmt.Fprintf(&b, "\t\"%s\\0\"\n", f)
	}
	b.WriteString("\t;\n")
	fmt.Fprintf(&b, "static const char sel_compat[] = %s;\n", cString(s.Compat))
	// A leading 'v': the bare version string is what a real libcuda
	// carries, and nvdriver.ReadLibcuda must not find one here.
	fmt.Fprintf(&b, "static const char sel_compat_version[] = %s;\n", cString("v"+s.Info.Version))
	var branches []string
	if s.Info.Note != nil {
		for _, d := range s.Info.Note.Driver {
			branches = append(branches, strconv.Itoa(d)+"LL")
		}
	}
	fmt.Fprintf(&b, "#define SEL_NBRANCHES %d\n", len(branches))
	// long long: Go's int on the 64-bit machines the selector is for, so
	// a note's branch past 32 bits is not cut to another.
	fmt.Fprintf(&b, "static const long long sel_branches[] = {%s};\n", strings.Join(append(branches, "0"), ", "))
	b.WriteString("static const char *const sel_driver[] = {")
	for _, d := range s.Driver {
		b.WriteString(cString(d) + ", ")
	}
	b.WriteString("0};\n")
	fmt.Fprintf(&b, "static const char sel_proc_version[] = %s;\n", cString(filepath.Join(s.Proc, "driver/nvidia/version")))
	fmt.Fprintf(&b, "static const char sel_sys_version[] = %s;\n", cString(filepath.Join(s.Sys, "module/nvidia/version")))
	fmt.Fprintf(&b, "static const char sel_nvgpu[] = %s;\n", cString(filepath.Join(s.Sys, "module/nvgpu")))
	descsz := len(note) + 1
	fmt.Fprintf(&b, "__attribute__((section(%q), used, aligned(4)))\n", NoteSection)
	fmt.Fprintf(&b, "static const struct { unsigned namesz, descsz, type; char name[%d]; char desc[%d]; } sel_note = {\n",
		(len(noteOwner)+1+3)&^3, (descsz+3)&^3)
	fmt.Fprintf(&b, "\t%d, %d, 1, %s,\n\t%s};\n", len(noteOwner)+1, descsz, cString(noteOwner), cString(string(note)))
	b.WriteString(body)
	b.WriteString("#ifndef CUDAPATCH_SELECTOR_DECIDE_MAIN\n")
	for _, a := range []struct{ macro, tramp string }{{"__x86_64__", trampX86}, {"__aarch64__", trampARM}} {
		fmt.Fprintf(&b, "#if defined(%s)\n__asm__(\".text\\n\"\n", a.macro)
		for i, f := range s.Functions {
			fmt.Fprintf(&b, a.tramp, f, i, 8*i)
		}
		b.WriteString(");\n#endif\n")
	}
	b.WriteString("#endif\n")
	return b.Bytes(), nil
}

// ForCompat is the Spec of the selector for the cuda_compat directory dir
// (its libcuda.so.1, links followed): its version, note and functions
// read from the file. driver lists the driver's libcuda files to try.
func ForCompat(dir string, driver []string) (Spec, error) {
	lib, err := filepath.EvalSymlinks(filepath.Join(dir, Name))
	if err != nil {
		return Spec{}, fmt.Errorf("cuda_compat: %w", err)
	}
	if lib, err = filepath.Abs(lib); err != nil {
		return Spec{}, fmt.Errorf("cuda_compat: %w", err)
	}
	info, err := nvdriver.ReadCompat(lib)
	if err != nil {
		return Spec{}, fmt.Errorf("cuda_compat: %w", err)
	}
	if info.Version == "" {
		return Spec{}, fmt.Errorf("cuda_compat: %s: no driver version in its name or its contents", lib)
	}
	fns, err := Functions(lib)
	if err != nil {
		return Spec{}, fmt.Errorf("cuda_compat: %w", err)
	}
	return Spec{Compat: lib, Info: info, Driver: driver, Functions: fns}, nil
}
