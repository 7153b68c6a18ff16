// Package patchelf is a drop-in patchelf on elfedit: patchelf's command
// line, what it prints and in which order, its error messages and exit
// codes, with every change to a file made as one elfedit.Edit (crash-safe,
// verified, only the bytes that must change). cmd/cudapatch wires it to
// `cudapatch patchelf` and to the binary installed as "patchelf"; the
// deliberate differences from patchelf are listed there and in
// docs/patchelf-suite.md.
package patchelf

import (
	"bytes"
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

	"github.com/cudapatch/cudapatch/rpath"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
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
  [--build-resolution-cache]		Records resolved DT_NEEDED paths in a .note.nixos.ldcache note (cudapatch's rules: the driver link is a run-time hint, never a stub)
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
	buildCache                           bool
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
		case "--build-resolution-cache":
			o.buildCache = true
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
	case o.forceRPath && o.buildCache:
		return nil, pfErr("--build-resolution-cache cannot be combined with --force-rpath")
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
			kept, removed := rpath.ShrinkPath(old, f.Needed(), o.allowedPrefixes, f.Header.Machine, rpath.ProbeMachine)
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
	if err := resolutionCache(f, o, &e, stderr, debugf); err != nil {
		return err
	}
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

// resolutionCache does what patchelf does to the resolution note
// (.note.nixos.ldcache) of a file whose other changes are in e: an edit of
// the search path or of DT_NEEDED drops a note that no longer holds
// (--remove-rpath, and --shrink-rpath of a file without one, always do),
// and --build-resolution-cache writes one for the file as it will be, with
// patchelf's messages and its rule that a note already there is either up
// to date or an error. The note is computed by rpath/ldcache with
// cudapatch's rules for the driver link and stub directories.
func resolutionCache(f *elfedit.File, o *patchelfOpts, e *elfedit.Edit, stderr io.Writer, debugf func(string, ...any)) error {
	e.Derived = append(e.Derived, ldcache.NoteID)
	_, hasOld := f.RunPath()
	if !hasOld {
		_, hasOld = f.RPath()
	}
	if o.removeRPath || o.shrinkRPath && !hasOld {
		e.RemoveNotes = append(e.RemoveNotes, ldcache.NoteID)
	}
	if !o.buildCache {
		return nil
	}
	warn := func(why string) {
		fmt.Fprintf(stderr, "warning: --build-resolution-cache: %s; no cache written\n", why)
	}
	errPresent := pfErr("--build-resolution-cache: a resolution cache note is already present; rebuild from an unpatched binary")
	old, present := existingCache(f)
	// The note goes when this invocation changes what it describes; then a
	// fresh one is built as if there had been none.
	if present && (len(e.RemoveNotes) > 0 || derivedChanges(f, e)) {
		present = false
	}
	if !f.IsDynamic() {
		if present {
			return errPresent
		}
		warn("no dynamic section (statically linked?)")
		return nil
	}
	cache, outcome := ldcache.Build(neededAfter(f.Needed(), e), searchPathAfter(f, e), ldcache.OS{},
		rpath.ResolutionRules(rpath.DefaultDriverLink, rpath.DefaultDriverLink32))
	switch outcome {
	case ldcache.NothingToResolve:
		if present {
			return errPresent
		}
		warn("no DT_NEEDED entries or run path to resolve")
		return nil
	case ldcache.NothingResolved:
		if present {
			return errPresent
		}
		warn("no libraries resolved against the run path")
		return nil
	}
	for _, en := range cache {
		debugf("resolved %s to %s", en.Name, en.PathList())
	}
	desc := cache.Encode()
	if present {
		if !bytes.Equal(old, desc) {
			return errPresent
		}
		debugf("resolution cache already up to date")
		return nil
	}
	e.SetNote = &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: desc}
	return nil
}

// existingCache finds a resolution note the way patchelf does, by its
// section's name (a section objcopy added counts, whatever it holds), or
// by a note with the note's owner and type. desc is nil when the section
// holds no well-formed note.
func existingCache(f *elfedit.File) (desc []byte, present bool) {
	notes, _ := f.Notes()
	for _, n := range notes {
		if n.NoteID == ldcache.NoteID {
			return n.Desc, true
		}
	}
	for _, s := range f.Sections {
		if s.Name == ldcache.Section {
			return nil, true
		}
	}
	return nil, false
}

// derivedChanges reports whether the edit changes the search path or
// DT_NEEDED, after which patchelf drops the note.
func derivedChanges(f *elfedit.File, e *elfedit.Edit) bool {
	if e.RemovePath {
		_, run := f.RunPath()
		_, rp := f.RPath()
		return run || rp
	}
	if e.SetPath != nil {
		old, ok := f.RunPath()
		if !ok {
			old, ok = f.RPath()
		}
		if !ok || old != *e.SetPath {
			return true
		}
	}
	return !slices.Equal(f.Needed(), neededAfter(f.Needed(), e))
}

// neededAfter is DT_NEEDED as the edit leaves it (elfedit's order: added
// names first, in the order given, names already needed not added again).
func neededAfter(needed []string, e *elfedit.Edit) []string {
	out := slices.DeleteFunc(slices.Clone(needed), func(n string) bool { return slices.Contains(e.RemoveNeeded, n) })
	for _, r := range e.ReplaceNeeded {
		for i := range out {
			if out[i] == r.Old {
				out[i] = r.New
			}
		}
	}
	var add []string
	for _, n := range e.AddNeeded {
		if !slices.Contains(out, n) && !slices.Contains(add, n) {
			add = append(add, n)
		}
	}
	return append(add, out...)
}

// searchPathAfter is the search path the loader reads after the edit:
// DT_RUNPATH, else DT_RPATH.
func searchPathAfter(f *elfedit.File, e *elfedit.Edit) string {
	switch {
	case e.RemovePath:
		return ""
	case e.SetPath != nil:
		return *e.SetPath
	}
	if p, ok := f.RunPath(); ok {
		return p
	}
	p, _ := f.RPath()
	return p
}
