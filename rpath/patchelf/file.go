package patchelf

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// patchelfFile does everything the options ask of one file, in patchelf's
// order: print the interpreter, the OS ABI, the soname; set the soname and
// the interpreter; print the search path, change it; print the stack flag;
// print DT_NEEDED, change DT_NEEDED. Every print shows the file as it was.
// The changes to .dynamic and the interpreter go into one Edit; the OS
// ABI, the stack flag and symbol versions, fields changed where they are,
// into one Edit each, written after it.
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
	sh, err := checkPatchelfHeader(fd, size)
	if err != nil {
		return err
	}
	if err := sh.checkOps(o, stderr); err != nil {
		return err
	}
	f, err := elfedit.NewFile(fd, size)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err) // cudapatch's message, not patchelf's
	}
	if note := f.InterruptedNote(); note != "" {
		// Read as the loader maps it; the edit, if any, finishes or
		// undoes that edit first (elfedit.EditFile).
		fmt.Fprintf(stderr, "cudapatch: note: %s: %s\n", path, note)
	}
	prints := o.printInterp || o.printRPath || o.printSoname || o.printNeeded || o.printOSABI || o.printExecstack
	if !prints {
		debugf("patching ELF file '%s'", path)
	}
	if o.pageSize > 0 {
		debugf("cudapatch: --page-size %d ignored: added segments are aligned to the largest page size of %v", o.pageSize, f.Header.Machine)
	}
	j := newFileJob(f, sh, o, stdout, stderr, debugf)
	for _, step := range []func() error{j.headerOps, j.dynamicOps, j.stackOps, j.neededOps, j.symbolOps} {
		if err := step(); err != nil {
			return err
		}
	}
	if err := resolutionCache(f, o, &j.e, stderr, debugf); err != nil {
		return err
	}
	fd.Close()
	return writePatchelf(path, o, append([]elfedit.Edit{j.e}, j.fields...), debugf)
}

// fileJob is the work on one file, step by step in patchelf's order: what
// it prints, and the edits planned so far (e, and the fields changed in
// place, one edit each).
type fileJob struct {
	f              *elfedit.File
	o              *patchelfOpts
	stdout, stderr io.Writer
	debugf         func(string, ...any)
	e              elfedit.Edit
	fields         []elfedit.Edit

	hasInterp   bool
	isLib       bool
	errNoInterp error
	errNoDyn    error
}

func newFileJob(f *elfedit.File, sh *elfShape, o *patchelfOpts, stdout, stderr io.Writer, debugf func(string, ...any)) *fileJob {
	j := &fileJob{f: f, o: o, stdout: stdout, stderr: stderr, debugf: debugf,
		hasInterp:   slices.ContainsFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_INTERP }),
		isLib:       f.Header.Type == elf.ET_DYN,
		errNoInterp: pfErr("cannot find section '.interp'. The input file is most likely statically linked"),
		errNoDyn:    pfErr("cannot find section '.dynamic'. The input file is most likely statically linked"),
	}
	if d := sh.section(".dynamic"); d != nil && d.typ == elf.SHT_DYNAMIC && d.size > 0 && !slices.ContainsFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_DYNAMIC && p.Filesz > 0 }) {
		// patchelf edits such a section and succeeds, but no loader reads
		// it: readelf -d on its output says "There is no dynamic section
		// in this file" (its tests/phdr-corruption.sh, docs/patchelf-suite.md).
		j.errNoDyn = pfErr("section '.dynamic' is not loaded (no PT_DYNAMIC describes it), so no loader reads it")
	}
	return j
}

// headerOps: the interpreter, the OS ABI and the soname, printed and set.
func (j *fileJob) headerOps() error {
	f, o := j.f, j.o
	if o.printInterp {
		if !j.hasInterp {
			return j.errNoInterp
		}
		fmt.Fprintln(j.stdout, f.Interp)
	}
	if o.printOSABI {
		fmt.Fprintln(j.stdout, osabiName(f.Header.OSABI))
	}
	if o.setOSABI != nil {
		abi, ok := parseOSABI(*o.setOSABI)
		if !ok {
			return pfErr("unrecognized OS ABI")
		}
		j.fields = append(j.fields, elfedit.Edit{OSABI: &abi})
	}
	if o.printSoname || o.setSoname != nil {
		if !j.isLib {
			j.debugf("this is not a dynamic library")
		} else if !f.IsDynamic() {
			return j.errNoDyn
		}
	}
	if o.printSoname && j.isLib {
		if s := f.Soname(); s != "" {
			fmt.Fprintln(j.stdout, s)
		}
	}
	if o.setSoname != nil && j.isLib {
		j.e.Soname = o.setSoname
	}
	if o.setInterp != "" {
		if !j.hasInterp {
			return j.errNoInterp
		}
		j.e.Interpreter = &o.setInterp
	}
	return nil
}

// dynamicOps: the search path printed and changed, once the file is known
// to have a dynamic section for what asks one.
func (j *fileJob) dynamicOps() error {
	f, o := j.f, j.o
	// A separate debug object (objcopy --only-keep-debug) keeps the section
	// headers of .dynamic with no contents: patchelf prints an empty
	// search path for it and changes nothing.
	debugOnly := f.Kind() == elfedit.KindDebugObject
	rpathOp := o.shrinkRPath || o.removeRPath || o.setRPath != nil || o.addRPath != nil
	dynOp := rpathOp || o.printNeeded || o.addDebugTag || o.noDefaultLib || len(o.clearSymbolVersion) > 0 ||
		len(o.addNeeded)+len(o.removeNeeded)+len(o.replaceNeeded) > 0
	switch {
	case debugOnly && (o.printRPath || rpathOp):
		j.debugf("no dynamic section")
		if o.printRPath {
			fmt.Fprintln(j.stdout)
		}
		rpathOp = false
	case (o.printRPath || dynOp) && !f.IsDynamic():
		return j.errNoDyn
	}
	if f.IsDynamic() {
		return rpathEdit(f, o, &j.e, rpathOp, j.stdout, j.stderr, j.debugf)
	}
	return nil
}

// stackOps: the stack flag, printed or changed.
func (j *fileJob) stackOps() error {
	f, o := j.f, j.o
	if o.printExecstack {
		// patchelf prints the flag and then leaves it alone, and
		// --clear-execstack wins over --set-execstack.
		if i := slices.IndexFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_GNU_STACK }); i >= 0 {
			flag := "-"
			if f.Progs[i].Flags&elf.PF_X != 0 {
				flag = "X"
			}
			fmt.Fprintf(j.stdout, "execstack: %s\n", flag)
		}
	} else if o.clearExecstack || o.setExecstack {
		on := !o.clearExecstack
		j.fields = append(j.fields, elfedit.Edit{ExecStack: &on})
	}
	return nil
}

// neededOps: DT_NEEDED printed and changed, and the dynamic flags.
func (j *fileJob) neededOps() error {
	o := j.o
	if o.printNeeded {
		for _, n := range j.f.Needed() {
			fmt.Fprintln(j.stdout, n)
		}
	}
	j.e.RemoveNeeded = o.removeNeeded
	j.e.ReplaceNeeded = o.replaceNeeded
	j.e.AddNeeded = o.addNeeded
	j.e.AddDebug = o.addDebugTag
	j.e.NoDefaultLib = o.noDefaultLib
	return nil
}

// symbolOps: symbol versions cleared, dynamic symbols renamed.
func (j *fileJob) symbolOps() error {
	o := j.o
	if len(o.clearSymbolVersion) > 0 {
		for _, s := range o.clearSymbolVersion {
			j.debugf("clearing symbol version for %s", s)
		}
		j.fields = append(j.fields, elfedit.Edit{ClearSymbolVersion: o.clearSymbolVersion})
	}
	if o.renameSymbols != "" {
		m, err := readSymbolMap(o.renameSymbols)
		if err != nil {
			return err
		}
		j.e.RenameSymbols = m
	}
	return nil
}

// rpathEdit prints the search path and plans its change: one search path
// operation per file, with patchelf's precedence (shrink, remove, set,
// add). The new path is written as given, as patchelf writes it, but for
// an empty one, which removes the search path (patchelf writes an empty
// DT_RUNPATH, which glibc reads as the current directory). A path with an
// empty entry (a leading, trailing or doubled ':') is written too, since
// the caller asked for it (patchelf's own tests record it in the
// resolution cache as the "?" hint it is), with a warning: glibc reads
// the empty entry as the current directory at run time.
func rpathEdit(f *elfedit.File, o *patchelfOpts, e *elfedit.Edit, rpathOp bool, stdout, stderr io.Writer, debugf func(string, ...any)) error {
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
		return nil
	}
	if !rpathOp {
		return nil
	}
	var newPath string
	switch {
	case o.shrinkRPath:
		kept, removed := policy.ShrinkPath(old, f.Needed(), o.allowedPrefixes, f.Header.Machine, policy.ProbeMachine)
		for _, r := range removed {
			debugf("%s", r)
		}
		newPath = kept
	case o.removeRPath:
	case o.setRPath != nil:
		newPath = *o.setRPath
	case o.addRPath != nil:
		// patchelf's appendRPath: no ':' after an empty old path.
		newPath = *o.addRPath
		if old != "" {
			newPath = old + ":" + newPath
		}
	}
	if newPath != "" && hasEmptyEntry(newPath) {
		fmt.Fprintf(stderr, "patchelf: warning: search path '%s' has an empty entry, which the loader reads as the current directory\n", newPath)
	}
	if newPath == "" {
		// Also for --remove-rpath, which --shrink-rpath outranks.
		e.RemovePath = true
	} else {
		e.SetPath = &newPath
		e.EmptyEntries = true
		e.Tag = elfedit.TagRunPath
		if o.forceRPath {
			e.Tag = elfedit.TagRPath
		}
	}
	if newPath != old && (hasOld || newPath != "") {
		debugf("new rpath is '%s'", newPath)
	}
	return nil
}

// writePatchelf writes the edits, in order, to the file or to --output.
// An --output that is not a regular file (/dev/null, a pipe) gets the
// result through a temporary copy, which is edited and then copied there.
func writePatchelf(path string, o *patchelfOpts, edits []elfedit.Edit, debugf func(string, ...any)) error {
	target := path
	if o.output != "" {
		target = o.output
		if st, err := os.Stat(o.output); err == nil && !st.Mode().IsRegular() {
			tmp, err := os.MkdirTemp("", "cudapatch-patchelf-")
			if err != nil {
				return pfErr("creating a temporary directory: %s", strerror(err))
			}
			defer os.RemoveAll(tmp)
			target = filepath.Join(tmp, filepath.Base(path))
			defer func() { _ = copyForPatchelf(target, o.output) }()
		}
		if err := copyForPatchelf(path, target); err != nil {
			return err
		}
	}
	for _, e := range edits {
		if e.IsZero() {
			continue
		}
		res, err := elfedit.EditFile(target, e, elfedit.Options{BreakHardLinks: true, KeepOldSections: o.noClobberOld})
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
	}
	return nil
}

// readSymbolMap reads --rename-dynamic-symbols' map file: one "old new"
// pair a line (blank-separated; more fields are ignored, blank lines
// skipped), each old name once, with patchelf's messages.
func readSymbolMap(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, pfErr("Cannot open map file %s: %s", path, strerror(err))
	}
	m := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) == 1:
			return nil, pfErr("%s:%d: Map file line is missing the second element", path, i+1)
		}
		if _, dup := m[f[0]]; dup {
			return nil, pfErr("%s:%d: Name '%s' appears twice in the map file", path, i+1, f[0])
		}
		m[f[0]] = f[1]
	}
	return m, nil
}

// hasEmptyEntry says whether a search path has an empty entry, which glibc
// takes for the current directory.
func hasEmptyEntry(p string) bool {
	return slices.Contains(strings.Split(p, ":"), "")
}
