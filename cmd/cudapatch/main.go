// Command cudapatch rewrites the RUNPATH and interpreter of prebuilt ELF
// files the way Nix needs them, with the NVIDIA driver, cuda_compat and the
// toolkit's stubs handled by one policy. It is wiring only: every verb is a
// call into the rpath packages.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/urfave/cli/v3"
)

// version is set at build time (nix/package.nix: -X main.version=…).
var version = "dev"

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
// RSS near what is live (measured: 182 MiB → 78 MiB when two libraries with
// 17 MiB string tables are patched at once).
const memoryLimit = 64 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	os.Exit(run(context.Background(), os.Args, os.Stdout, os.Stderr, os.Environ()))
}

// run is main without the process: tests call it with their own streams.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env []string) int {
	// Installed as "patchelf", the binary is a drop-in patchelf.
	if len(args) > 0 && filepath.Base(args[0]) == "patchelf" {
		return patchelfMain(args[1:], stdout, stderr)
	}
	app := newApp(stdout, stderr, env)
	err := app.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && !errors.Is(ee.err, errReported) {
			fmt.Fprintf(stderr, "cudapatch: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "cudapatch: %v\n", err)
	return exitUsage
}

// errReported marks an error whose details were already printed.
var errReported = errors.New("reported")

func newApp(stdout, stderr io.Writer, env []string) *cli.Command {
	logLevel := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	g := &globals{stdout: stdout, stderr: stderr, env: env, log: logger, level: logLevel}
	patch := patchCommand(g)
	return &cli.Command{
		Name:                      "cudapatch",
		Version:                   version,
		Usage:                     "patch the RUNPATH and interpreter of prebuilt ELF files for Nix, CUDA-aware",
		UsageText:                 "cudapatch [flags] PATH...\ncudapatch COMMAND [flags] ARGS...",
		Writer:                    stdout,
		ErrWriter:                 stderr,
		DisableSliceFlagSeparator: true,
		Flags:                     patch.Flags,
		Action:                    patch.Action,
		ExitErrHandler:            func(context.Context, *cli.Command, error) {},
		Commands: []*cli.Command{
			patch,
			autoPatchelfCommand(g),
			printCommand(g),
			verifyCommand(g),
			patchelfCommand(g),
			lintCommand(g),
			explainCommand(g),
			doctorCommand(g),
		},
	}
}

// globals are what every command gets from main: streams, environment and
// logger. Nothing is read from package state.
type globals struct {
	stdout, stderr io.Writer
	env            []string
	log            *slog.Logger
	level          *slog.LevelVar
}

// writeJSON prints v on stdout as indented JSON, the --json form of every
// command.
func (g *globals) writeJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
