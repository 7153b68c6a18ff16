// Package patchelf is a drop-in patchelf on elfedit: patchelf's command
// line, what it prints and in which order, its error messages and exit
// codes, with every change to a file made as one elfedit.Edit (crash-safe,
// verified, only the bytes that must change). cmd/cudapatch wires it to
// `cudapatch patchelf` and to the binary installed as "patchelf"; the
// deliberate differences from patchelf are listed in
// docs/patchelf-suite.md.
package patchelf

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// Version is the patchelf release whose command line this one
// implements (its options are those of patchelf master after it).
// Scripts compare it (auditwheel wants >= 0.14).
const Version = "0.18.0"

const patchelfUsage = `syntax: patchelf
  [--set-interpreter FILENAME]
  [--page-size SIZE]		Checked (> 0) and ignored: cudapatch aligns added segments to the largest page size of the file's machine
  [--print-interpreter]
  [--print-os-abi]		Prints 'EI_OSABI' field of ELF header
  [--set-os-abi ABI]		Sets 'EI_OSABI' field of ELF header to ABI.
  [--print-soname]		Prints 'DT_SONAME' entry of .dynamic section (nothing if there is none)
  [--set-soname SONAME]		Sets 'DT_SONAME' entry to SONAME.
  [--set-rpath RPATH]		Writes DT_RUNPATH (DT_RPATH with --force-rpath); an empty RPATH removes it
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
  [--no-default-lib]
  [--no-sort]		Accepted: cudapatch never reorders program or section headers
  [--clear-symbol-version SYMBOL]
  [--add-debug-tag]
  [--build-resolution-cache]		Records resolved DT_NEEDED paths in a .note.nixos.ldcache note (cudapatch's rules: the driver link is a run-time hint, never a stub)
  [--print-execstack]		Prints whether the object requests an executable stack
  [--clear-execstack]
  [--set-execstack]
  [--rename-dynamic-symbols NAME_MAP_FILE]		Renames dynamic symbols. The map file should contain two symbols (old_name new_name) per line
  [--no-clobber-old-sections]		Leave moved sections' old bytes as they were instead of zeroing them
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
	printOSABI, printExecstack                        bool

	setInterp string // "" leaves the interpreter alone, as in patchelf
	setSoname *string
	setRPath  *string
	addRPath  *string
	setOSABI  *string // checked per file: "unrecognized OS ABI"

	removeRPath, shrinkRPath, forceRPath bool
	allowedPrefixes                      []string

	addNeeded     []string // sorted and unique, the order patchelf adds them in
	removeNeeded  []string
	replaceNeeded []elfedit.Replace // one per old name, the last given wins

	addDebugTag, noDefaultLib    bool
	clearExecstack, setExecstack bool
	clearSymbolVersion           []string
	renameSymbols                string // the map file of --rename-dynamic-symbols
	noClobberOld                 bool
	buildCache                   bool

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

// fromFile resolves patchelf's "@FILE" arguments: the option's value is
// the whole content of FILE (a trailing newline included), for values too
// long for a command line. patchelf does this for the options that take a
// name or a search path.
func fromFile(v string) (string, error) {
	name, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	fd, _, err := openForPatchelf(name)
	if err != nil {
		return "", err
	}
	defer fd.Close()
	b, err := io.ReadAll(fd)
	if err != nil {
		return "", pfErr("reading '%s': %s", name, strerror(err))
	}
	return string(b), nil
}

// argParse is the state of parsing one command line: the options so far,
// and what is put in order once every argument is read.
type argParse struct {
	o            *patchelfOpts
	args         []string
	i            int // the argument being read
	replace      map[string]string
	replaceOrder []string
	add          map[string]bool
}

// next is the value of the option at p.i.
func (p *argParse) next() (string, error) {
	if p.i+1 >= len(p.args) {
		return "", pfErr("missing argument")
	}
	p.i++
	return p.args[p.i], nil
}

// patchelfFlag is one option: a switch (set), or one that takes a value
// (value), read from a file when the value is "@FILE" and file says so
// (fromFile). A value option's handler may refuse the value.
type patchelfFlag struct {
	set   func(o *patchelfOpts)
	value func(p *argParse, v string) error
	file  bool
}

// patchelfFlags are the options of patchelf's command line but --help,
// --version and --replace-needed (two values).
var patchelfFlags = map[string]patchelfFlag{
	"--print-os-abi":            {set: func(o *patchelfOpts) { o.printOSABI = true }},
	"--print-execstack":         {set: func(o *patchelfOpts) { o.printExecstack = true }},
	"--clear-execstack":         {set: func(o *patchelfOpts) { o.clearExecstack = true }},
	"--set-execstack":           {set: func(o *patchelfOpts) { o.setExecstack = true }},
	"--add-debug-tag":           {set: func(o *patchelfOpts) { o.addDebugTag = true }},
	"--no-default-lib":          {set: func(o *patchelfOpts) { o.noDefaultLib = true }},
	"--no-sort":                 {set: func(*patchelfOpts) {}}, // cudapatch never sorts program or section headers
	"--no-clobber-old-sections": {set: func(o *patchelfOpts) { o.noClobberOld = true }},
	"--build-resolution-cache":  {set: func(o *patchelfOpts) { o.buildCache = true }},
	"--print-interpreter":       {set: func(o *patchelfOpts) { o.printInterp = true }},
	"--print-soname":            {set: func(o *patchelfOpts) { o.printSoname = true }},
	"--remove-rpath":            {set: func(o *patchelfOpts) { o.removeRPath = true }},
	"--shrink-rpath":            {set: func(o *patchelfOpts) { o.shrinkRPath = true }},
	"--print-rpath":             {set: func(o *patchelfOpts) { o.printRPath = true }},
	"--force-rpath":             {set: func(o *patchelfOpts) { o.forceRPath = true }},
	"--print-needed":            {set: func(o *patchelfOpts) { o.printNeeded = true }},
	"--debug":                   {set: func(o *patchelfOpts) { o.debug = true }},

	"--set-interpreter": {file: true, value: func(p *argParse, v string) error { p.o.setInterp = v; return nil }},
	"--interpreter":     {file: true, value: func(p *argParse, v string) error { p.o.setInterp = v; return nil }},
	"--set-soname":      {file: true, value: func(p *argParse, v string) error { p.o.setSoname = &v; return nil }},
	"--set-rpath":       {file: true, value: func(p *argParse, v string) error { p.o.setRPath = &v; return nil }},
	"--add-rpath":       {file: true, value: func(p *argParse, v string) error { p.o.addRPath = &v; return nil }},
	"--output":          {file: true, value: func(p *argParse, v string) error { p.o.output = v; return nil }},
	"--add-needed":      {file: true, value: func(p *argParse, v string) error { p.add[v] = true; return nil }},
	"--remove-needed": {file: true, value: func(p *argParse, v string) error {
		if !slices.Contains(p.o.removeNeeded, v) {
			p.o.removeNeeded = append(p.o.removeNeeded, v)
		}
		return nil
	}},
	"--set-os-abi": {value: func(p *argParse, v string) error { p.o.setOSABI = &v; return nil }},
	"--clear-symbol-version": {value: func(p *argParse, v string) error {
		if !slices.Contains(p.o.clearSymbolVersion, v) {
			p.o.clearSymbolVersion = append(p.o.clearSymbolVersion, v)
		}
		return nil
	}},
	"--rename-dynamic-symbols": {value: func(p *argParse, v string) error { p.o.renameSymbols = v; return nil }},
	"--page-size": {value: func(p *argParse, v string) error {
		if p.o.pageSize = cAtoi(v); p.o.pageSize <= 0 {
			return pfErr("invalid argument to --page-size")
		}
		return nil
	}},
	"--allowed-rpath-prefixes": {value: func(p *argParse, v string) error { p.o.allowedPrefixes = strings.Split(v, ":"); return nil }},
}

func parsePatchelfArgs(args []string) (*patchelfOpts, error) {
	p := &argParse{o: &patchelfOpts{}, args: args, replace: map[string]string{}, add: map[string]bool{}}
	for ; p.i < len(args); p.i++ {
		if err := p.arg(); err != nil {
			return nil, err
		}
	}
	o := p.o
	for _, old := range p.replaceOrder {
		o.replaceNeeded = append(o.replaceNeeded, elfedit.Replace{Old: old, New: p.replace[old]})
	}
	for n := range p.add {
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

// arg reads the argument at p.i and the values it takes.
func (p *argParse) arg() error {
	a := p.args[p.i]
	switch a {
	case "--help", "-h":
		return errHelp
	case "--version":
		return errVersion
	case "--replace-needed":
		if p.i+2 >= len(p.args) {
			return pfErr("missing argument(s)")
		}
		old := p.args[p.i+1]
		if _, ok := p.replace[old]; !ok {
			p.replaceOrder = append(p.replaceOrder, old)
		}
		p.replace[old] = p.args[p.i+2]
		p.i += 2
		return nil
	}
	f, ok := patchelfFlags[a]
	switch {
	case !ok:
		p.o.files = append(p.o.files, a)
		return nil
	case f.set != nil:
		f.set(p.o)
		return nil
	}
	v, err := p.next()
	if err == nil && f.file {
		v, err = fromFile(v)
	}
	if err != nil {
		return err
	}
	return f.value(p, v)
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
