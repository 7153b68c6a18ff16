// Command cudapatch rewrites the RUNPATH and interpreter of prebuilt ELF
// files the way Nix needs them, with the NVIDIA driver, cuda_compat and the
// toolkit's stubs handled by one policy. It is wiring only: every verb is a
// call into the rpath packages.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// Exit codes shared by every verb.
const (
	exitOK       = 0
	exitFindings = 1 // the job found problems (missing libraries, lint findings, invalid files)
	exitUsage    = 2 // bad command line or an I/O error
)

// exitError carries an exit code out of an action.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code, err}
}

// memoryLimit is the Go heap's soft limit unless GOMEMLIMIT says otherwise.
// The work is headers and string tables, a few MiB per file; with the limit
// the collector returns garbage before the heap doubles, which keeps peak
// RSS near what is live, and under 64 MiB at the default jobs of a small
// machine whatever the file sizes. The main job raises it with its --jobs
// and the ELF files it decided (memoryLimitFor).
const memoryLimit = 56 << 20

// memoryPerJob is the main job's heap limit per job, above memoryLimit.
// Every job allocates at the same rate, so a fixed limit shared by more
// jobs is reached ever sooner and the collector runs ever more often, each
// time using CPU the jobs wanted: under a fixed limit, more jobs on more
// cores run no faster than one. Peak RSS then follows the jobs asked for:
// memoryLimit up to 3 jobs, memoryPerJob a job beyond.
const memoryPerJob = 16 << 20

// memoryPerFile is the main job's heap limit per ELF file decided, on top.
// What stays live until the end grows with the files: each one's decision
// and kept plan, and the symbol check's tables and closures, about 16 KiB
// a file on a tree of small libraries. Under a fixed limit a tree of
// thousands of files fills the heap with what is live, and the collector
// runs back to back for nothing (bench/HISTORY.md, "The heap limit grows
// with the files").
const memoryPerFile = 16 << 10

// memoryLimitFor is the heap limit of a main job with the given jobs and
// ELF files decided.
func memoryLimitFor(jobs, elfFiles int) int64 {
	return max(memoryLimit, int64(jobs)*memoryPerJob) + int64(elfFiles)*memoryPerFile
}

// gcPercent is GOGC unless the environment sets it. What is live is small
// (the files being worked on), so at the default 100 the collector would
// run every few MiB allocated, each time stopping every job, which keeps
// --jobs from scaling. At 400 it runs a quarter as often, and the memory
// limit still bounds the heap.
const gcPercent = 400

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	g := newGlobals(os.Stdout, os.Stderr, os.Environ())
	if os.Getenv("GOMEMLIMIT") == "" {
		g.setMemoryLimit = func(n int64) { debug.SetMemoryLimit(n) }
	}
	os.Exit(g.main(context.Background(), os.Args))
}

// run is main without the process: tests call it with their own streams.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env []string) int {
	return newGlobals(stdout, stderr, env).main(ctx, args)
}

// newGlobals is what the process gives every command: its streams, its
// environment, the binary's version and the effective user.
func newGlobals(stdout, stderr io.Writer, env []string) *globals {
	logLevel := new(slog.LevelVar)
	return &globals{
		setMemoryLimit: func(int64) {},
		stdout:         stdout, stderr: stderr, env: env,
		log:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel, ReplaceAttr: dropTime})),
		level:    logLevel,
		version:  hostVersion(),
		euid:     os.Geteuid(),
		findHost: ldso.FindHost,
	}
}

// dropTime removes the time from -v's log lines: they are read beside
// the job's other lines (a Nix build log has its own times), where a
// full timestamp on each is noise.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// main runs the command line args (args[0] is the program) and returns
// the exit code.
func (g *globals) main(ctx context.Context, args []string) int {
	// Installed as "patchelf", the binary is a drop-in patchelf.
	if len(args) > 0 && filepath.Base(args[0]) == "patchelf" {
		return patchelfMain(args[1:], g.stdout, g.stderr)
	}
	err := newApp(g).Run(ctx, args)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && !errors.Is(ee.err, errReported) {
			printable.Fprintf(g.stderr, "cudapatch: %v\n", ee.err)
		}
		return ee.code
	}
	printable.Fprintf(g.stderr, "cudapatch: %v\n", err)
	return exitUsage
}

// errReported marks an error whose details were already printed.
var errReported = errors.New("reported")

// newApp is the command tree. The patch flags belong to the root (the
// default command, `cudapatch [OPTIONS] PATH...`) and to `patch` only:
// every other command has its own flags, its --help shows only those, and
// a patch flag given to it is an error (finish).
func newApp(g *globals) *cli.Command {
	root := patchCommand(g)
	root.Name = "cudapatch"
	root.Usage = "patch the RUNPATH and interpreter of prebuilt ELF files for Nix, CUDA-aware"
	root.UsageText = "cudapatch [OPTIONS] PATH...\ncudapatch COMMAND [OPTIONS] ARGS..."
	root.Description = "Without a COMMAND, patches every ELF file below each PATH in one pass (as 'cudapatch patch'): " +
		"each DT_NEEDED is resolved against the PATHs and the --search directories, the driver link and " +
		"cuda_compat are placed, and every file is written once, after all were decided. Inside a Nix " +
		"build the interpreter and libc come from $NIX_BINTOOLS.\n\n" +
		"A PATH that is a symbolic link is followed when it leads into its own directory or below a " +
		"directory PATH (its target is patched, and counted once); one that leads elsewhere is refused, " +
		"naming where it leads. Links below a directory are never followed."
	root.Flags = append(root.Flags,
		&cli.BoolFlag{Name: "version", Usage: "print the version, the commit and the Go version, and exit", Local: true})
	patchAction := root.Action
	root.Action = func(ctx context.Context, cmd *cli.Command) error {
		if cmd.Bool("version") {
			return g.version.write(g.stdout)
		}
		return patchAction(ctx, cmd)
	}
	root.Writer, root.ErrWriter = g.stdout, g.stderr
	root.DisableSliceFlagSeparator = true
	root.ExitErrHandler = func(context.Context, *cli.Command, error) {}
	root.Commands = []*cli.Command{
		patchCommand(g),
		autoPatchelfCommand(g),
		printCommand(g),
		verifyCommand(g),
		patchelfCommand(g),
		lintCommand(g),
		explainCommand(g),
		doctorCommand(g),
		selectorCommand(g),
		completionCommand(g),
		manCommand(g),
		helpCommand(g),
	}
	finish(g, root)
	return root
}

// globals are what every command gets from main: streams, environment and
// logger. Nothing is read from package state.
type globals struct {
	stdout, stderr io.Writer
	env            []string
	log            *slog.Logger
	level          *slog.LevelVar
	version        versionInfo
	euid           int // doctor --fix refuses to write unless it is 0
	// noLibc says why the main job has no libc directory ("" when it
	// has one), for the hint after the missing dependencies.
	noLibc string
	// host is this machine's loader when the main job took it (no
	// $NIX_BINTOOLS, --interpreter or --libc).
	host *ldso.Host
	// findHost is ldso.FindHost; tests replace it.
	findHost func(root string) (ldso.Host, error)
	// setMemoryLimit sets the Go heap's soft limit: debug.SetMemoryLimit
	// in the process (unless GOMEMLIMIT is set), nothing in tests, which
	// call run in-process.
	setMemoryLimit func(int64)
}

// writeJSON prints v on stdout as indented JSON, the --json form of every
// command. Strings that are not UTF-8 (file names, DT_NEEDED, RUNPATH)
// keep their bytes (printable.EncodeJSON).
func (g *globals) writeJSON(v any) error {
	return printable.EncodeJSON(g.stdout, v, "  ")
}

func (g *globals) getenv(key string) string {
	for i := len(g.env) - 1; i >= 0; i-- {
		if k, v, ok := cutEnv(g.env[i]); ok && k == key {
			return v
		}
	}
	return ""
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}
