package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/urfave/cli/v3"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// patchFlags are the flags of the main job (the root command and
// `cudapatch patch`). One line per flag: help, the man page, the shell
// completions and the README table test all read this list. A value
// flag's usage names its value in backquotes (`DIR`, `N`, `a|b|c`).
func patchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "search", Usage: "library search `DIR` (repeatable; searched in order, not recursively)"},
		&cli.StringSliceFlag{Name: "search-recursive", Usage: "add every directory below `DIR` that holds a *.so* file (repeatable)"},
		&cli.BoolFlag{Name: "no-recurse", Usage: "patch only the files named, not the trees below directories"},
		&cli.StringFlag{Name: "interpreter", Usage: "set the interpreter of dynamic executables to `FILE` (default: $NIX_BINTOOLS/nix-support/dynamic-linker; outside Nix, this machine's)"},
		&cli.StringFlag{Name: "libc", Usage: "`DIR` of the libc the interpreter belongs to (default: $NIX_BINTOOLS/nix-support/orig-libc + /lib; outside Nix, this machine's)"},
		&cli.BoolFlag{Name: "keep-libc", Usage: "give libc libraries a RUNPATH entry like any other"},
		&cli.StringFlag{Name: "cuda-compat", Usage: "cuda_compat `DIR`: a selector built by cudapatch selector (or a directory without libcuda) is put first; cuda_compat's own needs --cuda-compat-selector"},
		&cli.StringFlag{Name: "cuda-compat-selector", Usage: "build into `DIR` the libcuda.so.1 that takes --cuda-compat's libcuda or the driver's when each process starts, and put DIR first (C compiler: $CC, else cc)"},
		&cli.StringFlag{Name: "driver-link", Value: policy.DefaultDriverLink, Usage: "driver link `DIR` (i686 files get the -32 variant)"},
		&cli.StringFlag{Name: "driver-link-32", Usage: "driver link `DIR` of 32-bit x86 files (default: the driver link with opengl-driver-32)"},
		&cli.StringFlag{Name: "driver-link-for", Value: string(policy.DriverLinkAll), Usage: "which files get the driver link: `all|needed|none`", Validator: oneOf("all", "needed", "none")},
		&cli.StringSliceFlag{Name: "runtime-dependency", Usage: "`DIR` put first in the RUNPATH of executables (repeatable; used as given)"},
		&cli.StringSliceFlag{Name: "append-rpath", Usage: "`ENTRY` appended to every RUNPATH (repeatable)"},
		&cli.BoolFlag{Name: "preserve-origin", Usage: "keep the $ORIGIN entries of the old RUNPATH (a dependency found where one leads keeps it)"},
		&cli.BoolFlag{Name: "relative-rpaths", Usage: "make entries under the store relative to each file ($ORIGIN/../../…), so a copied closure can move"},
		&cli.StringFlag{Name: "store-dir", Usage: "the store `DIR` of --relative-rpaths (default: $NIX_STORE, else /nix/store)"},
		&cli.BoolFlag{Name: "relativize-rpath", Usage: "make entries under the PATH a file was found under relative to the file"},
		&cli.BoolFlag{Name: "ignore-existing", Usage: "do not index the libraries of the PATHs being patched, only the search directories"},
		&cli.StringSliceFlag{Name: "ignore-missing", Usage: "ignore missing libraries whose name matches `PATTERN` (Python fnmatch; repeatable)"},
		&cli.StringFlag{Name: "dlopen", Value: string(policy.DlopenResolve), Usage: "library names in the read-only data of files that call dlopen: `off|report|resolve` (resolve: their directories join the RUNPATH after the DT_NEEDED ones; names found nowhere are reported, no error)", Validator: oneOf("off", "report", "resolve")},
		&cli.BoolFlag{Name: "dlopen-needed", Usage: "make each library name a file hands to a loader outside the outputs (GModule's g_module_open, libltdl's lt_dlopen; reported outside-caller) a DT_NEEDED of that file, its directory in the RUNPATH"},
		&cli.StringFlag{Name: "symbols", Value: string(patch.SymbolsError), Usage: "bind every file's undefined symbols and version needs over its closure as the loader will: `off|warn|error` (error: one that fails at load, a missing version or data symbol, stops the job as a missing library does; functions bound lazily are warnings)", Validator: oneOf("off", "warn", "error")},
		&cli.StringSliceFlag{Name: "ignore-symbol", Usage: "ignore symbol findings matching `PATTERN` (Python fnmatch over name, name@version, @version, or the file's base name; repeatable)"},
		&cli.BoolFlag{Name: "no-resolution-cache", Usage: "write no resolution note (.note.nixos.ldcache); stale ones are still removed"},
		&cli.BoolFlag{Name: "shrink-kept", Usage: "shrink the RUNPATH of files cudapatch gives none, as patchelf --shrink-rpath (the hook's take-over of fixupPhase's shrink pass)"},
		&cli.BoolFlag{Name: "force-rpath", Usage: "write each RUNPATH as DT_RPATH, as patchelf --force-rpath does (such files get no resolution note)"},
		&cli.StringSliceFlag{Name: "patchelf-flag", Usage: "one `WORD` of a package's patchelf options (patchelfFlags, auto-patchelf's --extra-args): --force-rpath, --no-clobber-old-sections and --page-size N are honoured, any other is refused (repeatable)"},
		&cli.BoolFlag{Name: "strict", Usage: "make the command line's warnings errors (exit 2, nothing read): a --search or --search-recursive DIR that does not exist or is not a directory"},
		&cli.BoolFlag{Name: "dry-run", Usage: "decide and verify, write nothing"},
		&cli.BoolFlag{Name: "json", Usage: "print the report of every decision as JSON"},
		&cli.BoolFlag{Name: "structured-logs", Usage: "print auto-patchelf's JSON-lines events instead of one line per changed file"},
		&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Usage: "process `N` files at once", DefaultText: "the number of CPUs", Validator: atLeast(1)},
		&cli.BoolFlag{Name: "sync", Usage: "flush each file to disk around its commit (survives power loss)"},
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log on stderr each file's dependencies and where each resolved (or why not), and why a file was skipped"},
	}
}

// patchCommand is `cudapatch patch`; the root command is a copy with its
// own flag values.
func patchCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "patch",
		Usage:     "patch every ELF file below PATHs in one pass (the default command)",
		ArgsUsage: "PATH...",
		Flags:     patchFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			paths := cmd.Args().Slice()
			if len(paths) == 0 {
				return withCode(exitUsage, errors.New("no paths to patch (see 'cudapatch --help')"))
			}
			for i, p := range paths {
				if _, err := os.Lstat(p); err != nil {
					msg := fmt.Sprintf("%s: %v", p, unwrapPathError(err))
					if i == 0 && cmd.Name != "patch" && !strings.ContainsAny(p, "/.") {
						msg += " (nor a command; see 'cudapatch --help')"
					}
					return withCode(exitUsage, errors.New(msg))
				}
			}
			cfg, err := g.patchConfig(cmd)
			if err != nil {
				return withCode(exitUsage, err)
			}
			out := outText
			switch {
			case cmd.Bool("json") && cmd.Bool("structured-logs"):
				return withCode(exitUsage, errors.New("--json and --structured-logs exclude each other"))
			case cmd.Bool("json"):
				out = outJSON
			case cmd.Bool("structured-logs"):
				out = outEvents
			}
			return g.runPatch(ctx, paths, cfg, out, cmd.Bool("dry-run"))
		},
	}
}

// unwrapPathError drops the operation and path of an *fs.PathError, which
// the message names already.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// patchConfig turns flags (and the Nix build environment) into the main
// job's configuration; patch.Run validates it.
func (g *globals) patchConfig(cmd *cli.Command) (*patch.Config, error) {
	if cmd.Bool("verbose") {
		g.level.Set(-4) // slog.LevelDebug
	}
	interp, libc := g.loader(cmd.String("interpreter"), cmd.String("libc"))
	jobs := int(cmd.Int("jobs"))
	if !cmd.IsSet("jobs") {
		jobs = runtime.NumCPU()
	}
	g.setMemoryLimit(memoryLimitFor(jobs, 0))
	buildDirs := []string{"/build"}
	if top := g.getenv("NIX_BUILD_TOP"); top != "" {
		buildDirs = append(buildDirs, top)
		if tmp := g.getenv("TMPDIR"); tmp != "" {
			buildDirs = append(buildDirs, tmp)
		}
	}
	pf, err := parsePatchelfFlags(cmd.StringSlice("patchelf-flag"))
	if err != nil {
		return nil, err
	}
	if err := g.checkSearchDirs(cmd); err != nil {
		return nil, err
	}
	var store string
	if cmd.Bool("relative-rpaths") {
		store = g.storeDir(cmd.String("store-dir"))
	}
	cfg := &patch.Config{
		Search:          cmd.StringSlice("search"),
		SearchRecursive: cmd.StringSlice("search-recursive"),
		NoRecurse:       cmd.Bool("no-recurse"),
		IgnoreExisting:  cmd.Bool("ignore-existing"),
		Libc:            libc,
		KeepLibc:        cmd.Bool("keep-libc"),
		Selector: patch.CompatSelector{
			Dir: cmd.String("cuda-compat-selector"),
			CC:  strings.Fields(g.getenv("CC")),
		},
		NoResolutionCache: cmd.Bool("no-resolution-cache"),
		DlopenNeeded:      cmd.Bool("dlopen-needed"),
		Symbols:           patch.SymbolsMode(cmd.String("symbols")),
		IgnoreSymbols:     cmd.StringSlice("ignore-symbol"),
		Write: patch.WriteOptions{
			DryRun:          cmd.Bool("dry-run"),
			Sync:            cmd.Bool("sync"),
			ShrinkKept:      cmd.Bool("shrink-kept"),
			KeepOldSections: pf.keepOld,
			PageSize:        pf.pageSize,
		},
		Jobs:    jobs,
		Logger:  g.log,
		Decided: func(n int) { g.setMemoryLimit(memoryLimitFor(jobs, n)) },
	}
	if err := sharedPolicy(cmd, &cfg.Policy); err != nil {
		return nil, err
	}
	cfg.Policy.Interpreter = interp
	cfg.Policy.CudaCompat = cmd.String("cuda-compat")
	cfg.Policy.DriverLink32 = cmd.String("driver-link-32")
	cfg.Policy.DriverLinkFor = policy.DriverLinkPolicy(cmd.String("driver-link-for"))
	cfg.Policy.RelativeStore = store
	cfg.Policy.RelativizeRoot = cmd.Bool("relativize-rpath")
	cfg.Policy.BuildDirs = buildDirs
	cfg.Policy.Dlopen = policy.DlopenMode(cmd.String("dlopen"))
	cfg.Policy.ForceRPath = cmd.Bool("force-rpath") || pf.forceRPath
	return cfg, nil
}

// sharedPolicy fills the part of the policy that the main job and lint
// take from flags of the same names and meanings: the driver link, and
// what the main job keeps (--preserve-origin, --append-rpath,
// --runtime-dependency, --ignore-missing), which lint is given so that
// it does not report it.
func sharedPolicy(cmd *cli.Command, p *policy.Config) error {
	p.DriverLink = cmd.String("driver-link")
	if p.DriverLink == "" {
		// In the Config "" is the default; given as a flag it is refused
		// as any relative directory is.
		return fmt.Errorf("driver link %q is not absolute", p.DriverLink)
	}
	p.PreserveOrigin = cmd.Bool("preserve-origin")
	p.AppendRunpaths = cmd.StringSlice("append-rpath")
	p.RuntimeDeps = cmd.StringSlice("runtime-dependency")
	p.IgnoreMissing = cmd.StringSlice("ignore-missing")
	return nil
}

// checkSearchDirs says in one line each --search or --search-recursive
// directory that does not exist or is not a directory (a typo, a file):
// a warning, as nothing is found there, or with --strict the error.
func (g *globals) checkSearchDirs(cmd *cli.Command) error {
	for _, flag := range []string{"search", "search-recursive"} {
		for _, d := range cmd.StringSlice(flag) {
			st, err := os.Stat(d)
			var why string
			switch {
			case err != nil:
				why = unwrapPathError(err).Error()
			case !st.IsDir():
				why = "not a directory"
			default:
				continue
			}
			if cmd.Bool("strict") {
				return fmt.Errorf("--%s %s: %s (--strict)", flag, d, why)
			}
			printable.Fprintf(g.stderr, "cudapatch: warning: --%s %s: %s; nothing is searched there\n", flag, d, why)
		}
	}
	return nil
}

// storeDir is the Nix store of the main job and lint: the one given, else
// $NIX_STORE, else /nix/store.
func (g *globals) storeDir(given string) string {
	switch {
	case given != "":
		return given
	case g.getenv("NIX_STORE") != "":
		return g.getenv("NIX_STORE")
	}
	return "/nix/store"
}

// loader returns the interpreter and libc directory of the main job: those
// given, else those $NIX_BINTOOLS names (inside a Nix build). Outside one,
// with neither given, it takes this machine's (ldso.FindHost: /bin/sh's
// interpreter and libc) and says so in one line: a packager outside Nix
// patches for the system at hand, and libraries in its libc directory get
// no RUNPATH entry (the loader finds them), so no host directory is
// written into a file. runPatch says so where that decided something.
// Where there is none, g.noLibc says why, for the hint after the missing
// dependencies.
func (g *globals) loader(interp, libc string) (string, string) {
	bt := g.getenv("NIX_BINTOOLS")
	if bt != "" {
		if interp == "" {
			b, err := os.ReadFile(filepath.Join(bt, "nix-support", "dynamic-linker"))
			if err == nil {
				interp = strings.TrimSpace(string(b))
			}
		}
		if libc == "" {
			b, err := os.ReadFile(filepath.Join(bt, "nix-support", "orig-libc"))
			if err == nil {
				libc = filepath.Join(strings.TrimSpace(string(b)), "lib")
			}
		}
	}
	if bt == "" && interp == "" && libc == "" {
		h, err := g.findHost("")
		if err != nil {
			g.noLibc = "this machine's could not be found: " + err.Error()
			return "", ""
		}
		g.host = &h
		return h.Interpreter, h.LibcDir
	}
	if libc == "" {
		g.noLibc = "none was given"
	}
	return interp, libc
}

// patchelfFlagSet is what the patchelf options of a package ask of the
// main job. nixpkgs' auto-patchelf passes its --extra-args (the hook's
// patchelfFlags) to every patchelf call it makes; cudapatch makes no such
// call, so each option is honoured by the policy or refused with its
// reason, never dropped.
type patchelfFlagSet struct {
	forceRPath, keepOld bool
	pageSize            uint64
}

// parsePatchelfFlags reads patchelf options, one word each as patchelf
// takes them (--page-size and its value are two words).
func parsePatchelfFlags(words []string) (patchelfFlagSet, error) {
	var s patchelfFlagSet
	for i := 0; i < len(words); i++ {
		switch w := words[i]; w {
		case "--force-rpath":
			s.forceRPath = true
		case "--no-clobber-old-sections":
			s.keepOld = true
		case "--page-size":
			if i+1 == len(words) {
				return s, errors.New("patchelf option --page-size (patchelfFlags, --extra-args) has no value")
			}
			i++
			n, err := strconv.ParseUint(words[i], 10, 64)
			if err != nil || n == 0 || n&(n-1) != 0 {
				return s, fmt.Errorf("patchelf option --page-size %q (patchelfFlags, --extra-args): want a power of two", words[i])
			}
			s.pageSize = n
		default:
			return s, fmt.Errorf("patchelf option %q (patchelfFlags, --extra-args) is not supported: cudapatch makes every edit itself and honours only --force-rpath, --no-clobber-old-sections and --page-size N", w)
		}
	}
	return s, nil
}

// output is what runPatch prints on stdout.
type output int

const (
	outText   output = iota // one line per changed file
	outJSON                 // the whole report
	outEvents               // auto-patchelf's --structured-logs events, one JSON object a line
)

// runPatch runs the main job and prints what Nix build logs want: one line
// per changed file (or the report, or the events), each file's errors, the
// missing libraries, and last a summary line that counts every file once
// (docs/usage.md: "What the main job prints").
func (g *globals) runPatch(ctx context.Context, paths []string, cfg *patch.Config, out output, dryRun bool) error {
	ctx, stop := onInterrupt(ctx)
	defer stop()
	if f, ok := g.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) && out == outText {
		p := mpb.NewWithContext(ctx, mpb.WithOutput(f))
		var bar *mpb.Bar
		withBar := *cfg
		withBar.Progress = func(done, total int) {
			if bar == nil {
				bar = p.AddBar(int64(total), mpb.PrependDecorators(decor.Name("cudapatch ")), mpb.AppendDecorators(decor.CountersNoUnit("%d/%d")))
			}
			bar.SetCurrent(int64(done))
		}
		cfg = &withBar
		defer func() {
			if bar != nil {
				bar.Abort(false)
			}
			p.Wait()
		}()
	}
	rep, err := patch.Run(ctx, cfg, paths)
	if rep == nil {
		if e := interruptedExit(ctx, err, "no file was written"); e != nil {
			return e
		}
		return withCode(exitUsage, err)
	}
	if g.host != nil && usedHost(rep) {
		printable.Fprintf(g.stderr, "cudapatch: no $NIX_BINTOOLS, --interpreter or --libc: used this machine's interpreter %s and libc directory %s (libraries found there get no RUNPATH entry)\n", g.host.Interpreter, g.host.LibcDir)
	}
	switch out {
	case outJSON:
		if e := g.writeJSON(rep); e != nil {
			return withCode(exitUsage, e)
		}
	case outEvents:
		// Written in 64 KiB writes, not one per file: the list is
		// written on one core after the work is done.
		w := bufio.NewWriterSize(g.stdout, outBuffer)
		for _, ev := range patch.AutoPatchelfEvents(rep, patch.EventOptions{Display: patch.DisplayPaths(paths)}) {
			w.WriteString(ev.PythonJSON())
			w.WriteByte('\n')
		}
		w.Flush() // as before: a failing stdout does not change the exit code
	default:
		w := bufio.NewWriterSize(g.stdout, outBuffer)
		planned := dryRun || !rep.WritePhase
		for _, f := range rep.Files {
			if f.Changed && len(f.Errors) == 0 {
				writePatched(w, f, planned)
			}
		}
		w.Flush() // as before: a failing stdout does not change the exit code
	}
	for _, f := range rep.Files {
		for _, e := range f.Errors {
			printable.Fprintf(g.stderr, "error: %s: %s\n", f.Path, e)
		}
	}
	// A name no RUNPATH of this run can make load: never an error, but
	// said, with its fix, whatever the output.
	for _, f := range rep.Files {
		for _, d := range f.Deps {
			if d.How == policy.HowOutsideCaller {
				printable.Fprintf(g.stderr, "warning: %s: %s will not load: %s\n", f.Path, d.Name, d.Hint)
			}
		}
	}
	for _, m := range rep.Missing {
		printable.Fprintf(g.stderr, "error: auto-patchelf could not satisfy dependency %s wanted by %s\n", m.Name, m.File)
		if m.Hint != "" {
			printable.Fprintf(g.stderr, "  hint: %s\n", m.Hint)
		}
	}
	g.writeSymbols(ctx, rep, out)
	if len(rep.Missing) > 0 && g.noLibc != "" {
		printable.Fprintf(g.stderr, "hint: no libc directory (%s): give --libc DIR and --interpreter FILE of the system the files are for ($NIX_BINTOOLS names them in a Nix build)\n", g.noLibc)
	}
	fmt.Fprintf(g.stderr, "cudapatch: %s\n", summary(rep, dryRun))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		if e := interruptedExit(ctx, err, "every file being written was written to the end, the others are left as they are"); e != nil {
			return e
		}
		return withCode(exitUsage, err)
	case onlyFindings(rep):
		return withCode(exitFindings, errReported)
	default:
		return withCode(exitUsage, errReported)
	}
}

// usedHost says whether this machine's loader (globals.loader) decided
// something: an interpreter it changed, a library found in its libc
// directory, a file skipped for not being of its architecture.
func usedHost(rep *patch.Report) bool {
	for _, f := range rep.Files {
		if f.Interpreter != "" && f.Interpreter != f.OldInterpreter || f.SkippedForTarget() {
			return true
		}
		for _, d := range f.Deps {
			if d.How == policy.HowLibc {
				return true
			}
		}
	}
	return false
}

// summary is the last line of the main job: every file counted once as
// patched, unchanged, skipped or failed (a file's other names, hard
// links written with it, said after the patched), then the missing
// dependencies.
// "nothing written" says an error stopped the job before the write phase.
func summary(rep *patch.Report, dryRun bool) string {
	verb := "patched"
	switch {
	case dryRun:
		verb = "would patch"
	case !rep.WritePhase:
		verb = "nothing written: would patch"
	}
	linked := ""
	if rep.Linked > 0 {
		// Names of a file counted under another of its names.
		noun := "names"
		if rep.Linked == 1 {
			noun = "name"
		}
		linked = fmt.Sprintf(" (%d more %s: hard links)", rep.Linked, noun)
	}
	return fmt.Sprintf("%s %s%s, %d unchanged, %d skipped, %d failed, %s",
		verb, plural(rep.Changed, "file"), linked, rep.Unchanged, rep.Skipped, rep.Failed, plural(len(rep.Missing), "missing dependency"))
}

// onlyFindings says the job failed for what it found, not for a file it
// could not handle: missing dependencies and RUNPATH audit failures
// (exit 1); anything else is exit 2.
func onlyFindings(rep *patch.Report) bool {
	for _, f := range rep.Files {
		for _, e := range f.Errors {
			if e.Kind != patch.ErrorAudit {
				return false
			}
		}
	}
	return true
}

// outBuffer is the size of the writes of the main job's list of files.
const outBuffer = 64 << 10

// writePatched writes the line that says what was done to f, as
// "PATH: RUNPATH OLD -> NEW[; interpreter OLD -> NEW][; resolution note
// ...]", and, when planned (a dry run, or a job that stopped before
// writing), " (not written)" after it: the line then says what was
// planned, not done. The list is written after the work, on one core, in
// pieces rather than formatted with fmt, which costs more than the
// writing.
func writePatched(w *bufio.Writer, f *patch.File, planned bool) {
	// Paths and names are the tree's and the files': escaped, so that
	// the list stays one line a file (printable.String costs a scan).
	str := func(s string) { w.WriteString(printable.String(s)) }
	str(f.Path)
	w.WriteString(": RUNPATH ")
	switch {
	case f.OldRunPath != nil:
		str(*f.OldRunPath)
	case f.OldRPath != nil:
		str(*f.OldRPath)
		w.WriteString(" (RPATH)")
	default:
		w.WriteString("(none)")
	}
	if f.RunPath == "" {
		w.WriteString(" kept")
	} else {
		w.WriteString(" -> ")
		str(f.RunPath)
		if f.AsRPath {
			w.WriteString(" (RPATH)")
		}
	}
	if f.Interpreter != "" && f.Interpreter != f.OldInterpreter {
		w.WriteString("; interpreter ")
		str(f.OldInterpreter)
		w.WriteString(" -> ")
		str(f.Interpreter)
	}
	switch f.Note {
	case patch.NoteWritten:
		w.WriteString("; resolution note for ")
		w.Write(appendPlural(w.AvailableBuffer(), len(f.ResolutionCache), "name"))
	case patch.NoteRemoved:
		w.WriteString("; resolution note removed")
	}
	if f.SameFileAs != "" {
		w.WriteString("; a hard link of ")
		str(f.SameFileAs)
		w.WriteString(", written with it")
	}
	if planned {
		w.WriteString(" (not written)")
	}
	w.WriteByte('\n')
}

// plural writes "1 file", "2 files", "1 missing dependency", "0 missing
// dependencies".
func plural(n int, noun string) string { return string(appendPlural(nil, n, noun)) }

func appendPlural(b []byte, n int, noun string) []byte {
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, ' ')
	switch {
	case n == 1:
		return append(b, noun...)
	case strings.HasSuffix(noun, "y"):
		b = append(b, noun[:len(noun)-1]...)
		return append(b, "ies"...)
	}
	b = append(b, noun...)
	return append(b, 's')
}

// interrupted is the cause of a main job stopped by SIGINT or SIGTERM.
type interrupted struct{ sig syscall.Signal }

func (e interrupted) Error() string {
	name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[e.sig]
	return "interrupted by " + name
}

// interruptedExit is the exit of a job that err says was cancelled by
// a signal onInterrupt caught, saying what it left; nil for any other
// end, which the caller reports as it would.
func interruptedExit(ctx context.Context, err error, left string) error {
	var sig interrupted
	if !errors.Is(err, context.Canceled) || !errors.As(context.Cause(ctx), &sig) {
		return nil
	}
	return withCode(128+int(sig.sig), fmt.Errorf("%w: %s", sig, left))
}

// onInterrupt returns ctx, ended with an interrupted cause on the first
// SIGINT or SIGTERM: the main job stops taking files, and writes the ones
// it is writing to the end (each write is an elfedit plan, which a
// signal must not cut between two writes). A second signal is the
// default's again: it kills, and the file being written then ends in a
// journal that the next run finishes or undoes.
func onInterrupt(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(interrupted{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
