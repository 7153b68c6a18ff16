// Package patchelf is a drop-in patchelf on elfedit: patchelf's command
// line, what it prints and in which order, its error messages and exit
// codes, with every change to a file made as one elfedit.Edit (crash-safe,
// verified, only the bytes that must change). cmd/cudapatch wires it to
// `cudapatch patchelf` and to the binary installed as "patchelf"; the
// deliberate differences from patchelf are listed there and in
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
		// nextFile is next with "@FILE" resolved.
		nextFile := func(i *int) (string, error) {
			v, err := next(i)
			if err != nil {
				return "", err
			}
			return fromFile(v)
		}
		switch a := args[i]; a {
		case "--set-interpreter", "--interpreter":
			if v, err = nextFile(&i); err == nil {
				o.setInterp = v
			}
		case "--print-os-abi":
			o.printOSABI = true
		case "--set-os-abi":
			if v, err = next(&i); err == nil {
				o.setOSABI = &v
			}
		case "--print-execstack":
			o.printExecstack = true
		case "--clear-execstack":
			o.clearExecstack = true
		case "--set-execstack":
			o.setExecstack = true
		case "--add-debug-tag":
			o.addDebugTag = true
		case "--no-default-lib":
			o.noDefaultLib = true
		case "--clear-symbol-version":
			if v, err = next(&i); err == nil && !slices.Contains(o.clearSymbolVersion, v) {
				o.clearSymbolVersion = append(o.clearSymbolVersion, v)
			}
		case "--rename-dynamic-symbols":
			if v, err = next(&i); err == nil {
				o.renameSymbols = v
			}
		case "--no-sort":
			// cudapatch never sorts program or section headers.
		case "--no-clobber-old-sections":
			o.noClobberOld = true
		case "--build-resolution-cache":
			o.buildCache = true
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
			if v, err = nextFile(&i); err == nil {
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
			if v, err = nextFile(&i); err == nil {
				o.setRPath = &v
			}
		case "--add-rpath":
			if v, err = nextFile(&i); err == nil {
				o.addRPath = &v
			}
		case "--print-rpath":
			o.printRPath = true
		case "--force-rpath":
			o.forceRPath = true
		case "--print-needed":
			o.printNeeded = true
		case "--add-needed":
			if v, err = nextFile(&i); err == nil {
				add[v] = true
			}
		case "--remove-needed":
			if v, err = nextFile(&i); err == nil && !slices.Contains(o.removeNeeded, v) {
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
			if v, err = nextFile(&i); err == nil {
				o.output = v
			}
		case "--debug":
			o.debug = true
		case "--help", "-h":
			return nil, errHelp
		case "--version":
			return nil, errVersion
		default:
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
