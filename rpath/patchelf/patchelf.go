// Package patchelf is a drop-in patchelf on elfedit: patchelf's command
// line, what it prints and in which order, its error messages and exit
// codes, with every change to a file made as one elfedit.Edit (crash-safe,
// verified, only the bytes that must change). cmd/cudapatch wires it to
// `cudapatch patchelf` and to the binary installed as "patchelf"; the
// deliberate differences from patchelf are listed there and in
// docs/patchelf-suite.md.
package patchelf

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// Version is the patchelf release whose command line this one
// implements. Scripts compare it (auditwheel wants >= 0.14).
const Version = "0.14.3"

const patchelfUsage = `syntax: patchelf
  [--set-interpreter FILENAME]
  [--page-size SIZE]		Checked (> 0) and ignored: cudapatch aligns added segments to the largest page size of the file's machine
  [--print-interpreter]
  [--print-soname]		Prints 'DT_SONAME' entry of .dynamic section (nothing if there is none)
  [--set-soname SONAME]		Sets 'DT_SONAME' entry to SONAME.
  [--set-rpath RPATH]		Writes DT_RUNPATH (DT_RPATH with --force-rpath); empty entries are dropped
  [--add-rpath RPATH]
  [--remove-rpath]
  [--shrink-rpath]
  [--allowed-rpath-prefixes PREFIXES]		With '--shrink-rpath', reject rpath entries not starting with the allowed prefix
  [--print-rpath]
  [--force-rpath]
  [--add-needed LIBRARY]
  [--remove-needed LIBRARY]
  [--replace-needed LIBRARY NEW_LIBRARY]
  [--print-needed]
  [--output FILE]
  [--debug]		Also prints the layout cudapatch chose for each file
  [--version]
  FILENAME...
`

// patchelfOpts is a parsed patchelf command line. As in patchelf, an
// option given twice keeps its last value, and the order of options and
// file names does not matter.
type patchelfOpts struct {
	printInterp, printSoname, printRPath, printNeeded bool

	setInterp string // "" leaves the interpreter alone, as in patchelf
	setSoname *string
	setRPath  *string
	addRPath  *string

	removeRPath, shrinkRPath, forceRPath bool
	allowedPrefixes                      []string

	addNeeded     []string // sorted and unique, the order patchelf adds them in
	removeNeeded  []string
	replaceNeeded []elfedit.Replace // one per old name, the last given wins

	pageSize int64 // checked, then ignored (see the top of the file)
	output   string
	debug    bool
	files    []string
}

// patchelfError is a message printed as "patchelf: MSG" with exit code 1.
type patchelfError string

func (e patchelfError) Error() string { return string(e) }

func pfErr(format string, args ...any) error { return patchelfError(fmt.Sprintf(format, args...)) }

// errHelp and errVersion end parsing the way patchelf's --help and
// --version do: at once, with exit code 0.
var (
	errHelp    = errors.New("help")
	errVersion = errors.New("version")
)

// unsupportedPatchelfOptions are patchelf options that this front end does
// not implement. patchelf itself would take an unknown option for a file
// name; naming it is more useful.
var unsupportedPatchelfOptions = []string{
	"--no-default-lib", "--clear-symbol-version", "--add-debug-tag",
	"--print-os-abi", "--set-os-abi", "--print-execstack", "--clear-execstack",
	"--set-execstack", "--rename-dynamic-symbols", "--no-sort", "--no-clobber-old-sections",
}

func parsePatchelfArgs(args []string) (*patchelfOpts, error) {
	o := &patchelfOpts{}
	replace := map[string]string{}
	var replaceOrder []string
	add := map[string]bool{}
	next := func(i *int) (string, error) {
		if *i+1 >= len(args) {
			return "", pfErr("missing argument")
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		var (
			v   string
			err error
		)
		switch a := args[i]; a {
		case "--set-interpreter", "--interpreter":
			if v, err = next(&i); err == nil {
				o.setInterp = v
			}
		case "--page-size":
			if v, err = next(&i); err == nil {
				if o.pageSize = cAtoi(v); o.pageSize <= 0 {
					err = pfErr("invalid argument to --page-size")
				}
			}
		case "--print-interpreter":
			o.printInterp = true
		case "--print-soname":
			o.printSoname = true
		case "--set-soname":
			if v, err = next(&i); err == nil {
				o.setSoname = &v
			}
		case "--remove-rpath":
			o.removeRPath = true
		case "--shrink-rpath":
			o.shrinkRPath = true
		case "--allowed-rpath-prefixes":
			if v, err = next(&i); err == nil {
				o.allowedPrefixes = strings.Split(v, ":")
			}
		case "--set-rpath":
			if v, err = next(&i); err == nil {
				o.setRPath = &v
			}
		case "--add-rpath":
			if v, err = next(&i); err == nil {
				o.addRPath = &v
			}
		case "--print-rpath":
			o.printRPath = true
		case "--force-rpath":
			o.forceRPath = true
		case "--print-needed":
			o.printNeeded = true
		case "--add-needed":
			if v, err = next(&i); err == nil {
				add[v] = true
			}
		case "--remove-needed":
			if v, err = next(&i); err == nil && !slices.Contains(o.removeNeeded, v) {
				o.removeNeeded = append(o.removeNeeded, v)
			}
		case "--replace-needed":
			if i+2 >= len(args) {
				return nil, pfErr("missing argument(s)")
			}
			if _, ok := replace[args[i+1]]; !ok {
				replaceOrder = append(replaceOrder, args[i+1])
			}
			replace[args[i+1]] = args[i+2]
			i += 2
		case "--output":
			if v, err = next(&i); err == nil {
				o.output = v
			}
		case "--debug":
			o.debug = true
		case "--help", "-h":
			return nil, errHelp
		case "--version":
			return nil, errVersion
		default:
			if slices.Contains(unsupportedPatchelfOptions, a) {
				return nil, pfErr("option %s is not supported by cudapatch's patchelf", a)
			}
			o.files = append(o.files, a)
		}
		if err != nil {
			return nil, err
		}
	}
	for _, old := range replaceOrder {
		o.replaceNeeded = append(o.replaceNeeded, elfedit.Replace{Old: old, New: replace[old]})
	}
	for n := range add {
		o.addNeeded = append(o.addNeeded, n)
	}
	slices.Sort(o.addNeeded)
	switch {
	case len(o.files) == 0:
		return nil, pfErr("missing filename")
	case o.output != "" && len(o.files) != 1:
		return nil, pfErr("--output option only allowed with single input file")
	case o.setRPath != nil && o.addRPath != nil:
		return nil, pfErr("--set-rpath option not allowed with --add-rpath")
	}
	return o, nil
}

// cAtoi is C's atoi, which patchelf uses for --page-size: leading blanks,
// an optional sign, then digits up to the first non-digit ("4096k" is 4096).
func cAtoi(s string) int64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	var n int64
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
		if n > 1<<40 {
			break // large enough to be valid; avoid overflow
		}
	}
	if neg {
		return -n
	}
	return n
}

// Main runs patchelf with the arguments after the program name and returns
// its exit code: 0, or 1 after printing "patchelf: MESSAGE". What patchelf
// prints goes to stdout and stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, patchelfUsage)
		return 1
	}
	o, err := parsePatchelfArgs(args)
	switch {
	case errors.Is(err, errHelp):
		fmt.Fprint(stderr, patchelfUsage)
		return 0
	case errors.Is(err, errVersion):
		fmt.Fprintf(stdout, "patchelf %s\n", Version)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "patchelf: %v\n", err)
		return 1
	}
	// Files are done one after the other and the first error stops the
	// run, leaving the files before it patched, as patchelf does.
	for _, path := range o.files {
		if err := patchelfFile(path, o, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "patchelf: %v\n", err)
			return 1
		}
	}
	return 0
}

// patchelfFile does everything the options ask of one file, in patchelf's
// order: print the interpreter, print and set the soname, set the
// interpreter, print the search path, change it, print DT_NEEDED, change
// DT_NEEDED. Every print shows the file as it was; every change goes into
// one Edit, written at the end.
func patchelfFile(path string, o *patchelfOpts, stdout, stderr io.Writer) error {
	debugf := func(format string, args ...any) {
		if o.debug {
			fmt.Fprintf(stderr, format+"\n", args...)
		}
	}
	fd, size, err := openForPatchelf(path)
	if err != nil {
		return err
	}
	defer fd.Close()
	if err := checkPatchelfHeader(fd, size); err != nil {
		return err
	}
	f, err := elfedit.NewFile(fd, size)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err) // cudapatch's message, not patchelf's
	}
	if !o.printInterp && !o.printRPath && !o.printSoname && !o.printNeeded {
		debugf("patching ELF file '%s'", path)
	}
	if o.pageSize > 0 {
		debugf("cudapatch: --page-size %d ignored: added segments are aligned to the largest page size of %v", o.pageSize, f.Header.Machine)
	}
	hasInterp := slices.ContainsFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_INTERP })
	errNoInterp := pfErr("cannot find section '.interp'. The input file is most likely statically linked")
	errNoDyn := pfErr("cannot find section '.dynamic'. The input file is most likely statically linked")
	isLib := f.Header.Type == elf.ET_DYN

	var e elfedit.Edit
	if o.printInterp {
		if !hasInterp {
			return errNoInterp
		}
		fmt.Fprintln(stdout, f.Interp)
	}
	if o.printSoname || o.setSoname != nil {
		if !isLib {
			debugf("this is not a dynamic library")
		} else if !f.IsDynamic() {
			return errNoDyn
		}
	}
	if o.printSoname && isLib {
		if s := f.Soname(); s != "" {
			fmt.Fprintln(stdout, s)
		}
	}
	if o.setSoname != nil && isLib {
		e.Soname = o.setSoname
	}
	if o.setInterp != "" {
		if !hasInterp {
			return errNoInterp
		}
		e.Interpreter = &o.setInterp
	}
	rpathOp := o.shrinkRPath || o.removeRPath || o.setRPath != nil || o.addRPath != nil
	if (o.printRPath || rpathOp || o.printNeeded ||
		len(o.addNeeded)+len(o.removeNeeded)+len(o.replaceNeeded) > 0) && !f.IsDynamic() {
		return errNoDyn
	}
	// DT_RUNPATH wins over DT_RPATH, as in the loader and in patchelf.
	old, hasOld := f.RunPath()
	if !hasOld {
		old, hasOld = f.RPath()
	}
	if o.printRPath {
		fmt.Fprintln(stdout, old)
	}
	if o.shrinkRPath && !hasOld {
		debugf("no RPATH to shrink")
	} else if rpathOp {
		// One search path operation per file; patchelf's precedence.
		var newPath string
		switch {
		case o.shrinkRPath:
			kept, removed := shrinkRPath(old, f.Needed(), o.allowedPrefixes, f.Header.Machine, probeMachine)
			for _, r := range removed {
				debugf("%s", r)
			}
			newPath = kept
		case o.removeRPath:
		case o.setRPath != nil:
			newPath = *o.setRPath
		case o.addRPath != nil:
			newPath = old + ":" + *o.addRPath
		}
		newPath = dropEmptyEntries(newPath)
		if newPath == "" {
			// Also for --remove-rpath, which --shrink-rpath outranks.
			e.RemovePath = true
		} else {
			e.SetPath = &newPath
			e.Tag = elfedit.TagRunPath
			if o.forceRPath {
				e.Tag = elfedit.TagRPath
			}
		}
		if newPath != old && (hasOld || newPath != "") {
			debugf("new rpath is '%s'", newPath)
		}
	}
	if o.printNeeded {
		for _, n := range f.Needed() {
			fmt.Fprintln(stdout, n)
		}
	}
	e.RemoveNeeded = o.removeNeeded
	e.ReplaceNeeded = o.replaceNeeded
	e.AddNeeded = o.addNeeded
	fd.Close()

	target := path
	if o.output != "" {
		target = o.output
		if err := copyForPatchelf(path, o.output); err != nil {
			return err
		}
	}
	if e.IsZero() {
		return nil
	}
	res, err := elfedit.EditFile(target, e, elfedit.Options{BreakHardLinks: true})
	if err != nil {
		return err
	}
	if res.Changed {
		debugf("writing %s", target)
		debugf("cudapatch: layout %s, %d bytes written, size 0x%x -> 0x%x",
			res.Plan.Strategy, res.Plan.Written, res.Plan.OldSize, res.Plan.NewSize)
		for _, st := range res.Plan.Steps {
			debugf("cudapatch:   %-8s 0x%x+0x%x %s", st.Kind, st.Off, st.Len, st.What)
		}
	}
	return nil
}

// openForPatchelf opens a file to read it, with patchelf's messages.
func openForPatchelf(path string) (*os.File, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, pfErr("getting info about '%s': %s", path, strerror(err))
	}
	if st.IsDir() {
		return nil, 0, pfErr("reading '%s': %s", path, strerror(syscall.EISDIR))
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, 0, pfErr("opening '%s': %s", path, strerror(err))
	}
	return fd, st.Size(), nil
}

// copyForPatchelf writes the input to --output before the edit, so the
// input stays untouched; like patchelf, the output is written even when
// nothing changes, with the input's permission bits.
func copyForPatchelf(src, dst string) error {
	if same(src, dst) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return pfErr("opening '%s': %s", src, strerror(err))
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return pfErr("getting info about '%s': %s", src, strerror(err))
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return pfErr("open: %s", strerror(err))
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return pfErr("write: %s", strerror(err))
	}
	if err := out.Chmod(st.Mode().Perm()); err != nil {
		out.Close()
		return pfErr("fchmod: %s", strerror(err))
	}
	if err := out.Close(); err != nil {
		return pfErr("close: %s", strerror(err))
	}
	return nil
}

func same(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// strerror renders an error the way C's strerror does ("No such file or
// directory"): Go's errno texts are the same words with a lower-case first
// letter.
func strerror(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return err.Error()
	}
	s := errno.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// checkPatchelfHeader gives patchelf's messages for the files patchelf
// rejects by their ELF header, in the order patchelf checks. Anything it
// accepts goes to elfedit, whose own checks are stricter and say more.
func checkPatchelfHeader(r io.ReaderAt, size int64) error {
	const ehdr32, ehdr64 = 52, 64
	if size < ehdr32 {
		return pfErr("missing ELF header")
	}
	var h [ehdr64]byte
	n, _ := r.ReadAt(h[:min(size, ehdr64)], 0)
	if n < ehdr32 {
		return pfErr("missing ELF header")
	}
	if string(h[:4]) != elf.ELFMAG {
		return pfErr("not an ELF executable")
	}
	if elf.Version(h[elf.EI_VERSION]) != elf.EV_CURRENT {
		return pfErr("unsupported ELF version")
	}
	class := elf.Class(h[elf.EI_CLASS])
	if class != elf.ELFCLASS32 && class != elf.ELFCLASS64 {
		return pfErr("ELF executable is not 32 or 64 bit")
	}
	var bo binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return pfErr("wrong ELF type")
	}
	if class == elf.ELFCLASS64 && n < ehdr64 {
		return pfErr("missing ELF header")
	}
	if t := elf.Type(bo.Uint16(h[16:])); t != elf.ET_EXEC && t != elf.ET_DYN {
		return pfErr("wrong ELF type")
	}
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum, shstrndx uint64
	if class == elf.ELFCLASS64 {
		phoff, shoff = bo.Uint64(h[32:]), bo.Uint64(h[40:])
		phentsize, phnum = uint64(bo.Uint16(h[54:])), uint64(bo.Uint16(h[56:]))
		shentsize, shnum = uint64(bo.Uint16(h[58:])), uint64(bo.Uint16(h[60:]))
		shstrndx = uint64(bo.Uint16(h[62:]))
	} else {
		phoff, shoff = uint64(bo.Uint32(h[28:])), uint64(bo.Uint32(h[32:]))
		phentsize, phnum = uint64(bo.Uint16(h[42:])), uint64(bo.Uint16(h[44:]))
		shentsize, shnum = uint64(bo.Uint16(h[46:])), uint64(bo.Uint16(h[48:]))
		shstrndx = uint64(bo.Uint16(h[50:]))
	}
	if phoff > uint64(size) || phnum*phentsize > uint64(size)-phoff {
		return pfErr("program header table out of bounds")
	}
	// patchelf also refuses files without section headers; elfedit does
	// not need them, so neither do we.
	if shnum > 0 && (shoff > uint64(size) || shnum*shentsize > uint64(size)-shoff) {
		return pfErr("section header table out of bounds")
	}
	if shnum > 0 && shstrndx >= shnum && shstrndx != uint64(elf.SHN_XINDEX) {
		return pfErr("string table index out of bounds")
	}
	want := uint64(56)
	if class == elf.ELFCLASS32 {
		want = 32
	}
	if phentsize != want {
		return pfErr("program headers have wrong size")
	}
	return nil
}

// dropEmptyEntries removes the empty entries of a search path, which glibc
// would take for the current directory.
func dropEmptyEntries(p string) string {
	return strings.Join(slices.DeleteFunc(strings.Split(p, ":"), func(s string) bool { return s == "" }), ":")
}

// shrinkRPath is patchelf --shrink-rpath on one search path. It keeps
//
//   - entries that are not absolute ($ORIGIN/../lib, relative ones): they
//     cannot be checked here and the prefix filter does not apply to them;
//   - absolute entries that start with one of the allowed prefixes (any
//     entry when there are none) and hold, under the name of a DT_NEEDED
//     entry not found in an earlier entry, an ELF file for the same machine.
//
// Empty entries are dropped. probe reports the machine of the ELF file at a
// path, or an error when there is none. removed lists patchelf's debug
// lines for the entries dropped.
func shrinkRPath(rpath string, needed, allowed []string, machine elf.Machine,
	probe func(path string) (elf.Machine, error)) (kept string, removed []string) {
	allowed = slices.DeleteFunc(slices.Clone(allowed), func(s string) bool { return s == "" })
	found := make([]bool, len(needed))
	var out []string
	for _, dir := range strings.Split(rpath, ":") {
		if dir != "" && dir[0] != '/' {
			out = append(out, dir)
			continue
		}
		if len(allowed) > 0 && !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(dir, p) }) {
			removed = append(removed, fmt.Sprintf("removing directory '%s' from RPATH because of non-allowed prefix", dir))
			continue
		}
		use := false
		for i, n := range needed {
			if found[i] || dir == "" {
				continue
			}
			lib := dir + "/" + n
			m, err := probe(lib)
			switch {
			case err != nil:
			case m != machine:
				removed = append(removed, fmt.Sprintf("ignoring library '%s' because its machine type differs", lib))
			default:
				found[i], use = true, true
			}
		}
		if !use {
			removed = append(removed, fmt.Sprintf("removing directory '%s' from RPATH", dir))
			continue
		}
		out = append(out, dir)
	}
	return strings.Join(out, ":"), removed
}

// probeMachine reads e_machine of the ELF file at path. A path that is
// missing, a directory, unreadable or not ELF is an error: the loader would
// not load it either.
func probeMachine(path string) (elf.Machine, error) {
	fd, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	var h [20]byte
	if _, err := io.ReadFull(fd, h[:]); err != nil {
		return 0, err
	}
	if string(h[:4]) != elf.ELFMAG {
		return 0, errors.New("not ELF")
	}
	if elf.Data(h[elf.EI_DATA]) == elf.ELFDATA2MSB {
		return elf.Machine(binary.BigEndian.Uint16(h[18:])), nil
	}
	return elf.Machine(binary.LittleEndian.Uint16(h[18:])), nil
}
