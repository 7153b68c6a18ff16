package main

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

func lintCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "lint",
		Usage: "check the RUNPATHs, interpreters and dependencies of the ELF files in trees (exit 1 on findings)",
		Description: "Each PATH is an ELF file or a directory, whose ELF files are checked (a named\n" +
			"file that is not ELF is an error, exit 2). Rules are documented in docs/lint.md.\n" +
			"A .cudapatch-lint.json at the root of each directory given (or --config) selects\n" +
			"rules, changes severities and ignores paths. Files the main job skips (another\n" +
			"architecture than its interpreter's, static…) are skipped with its reason, and\n" +
			"what its --preserve-origin, --append-rpath, --runtime-dependency and\n" +
			"--ignore-missing kept is no finding: give lint the flags the main job had.",
		ArgsUsage: "PATH...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "resolve absolute paths inside `DIR` (the PATHs must lie under it)"},
			&cli.StringFlag{Name: "config", Usage: "configuration `FILE` for every PATH, instead of each tree's " + lint.ConfigFile},
			&cli.StringSliceFlag{Name: "enable", Usage: "turn on rule `ID` (or name, or all; repeatable, comma-separated)"},
			&cli.StringSliceFlag{Name: "disable", Usage: "turn off rule `ID` (or name, or all; repeatable, comma-separated)"},
			&cli.StringFlag{Name: "fail-on", Value: "warning", Usage: "exit 1 on findings at or above `info|warning|error`", Validator: severity},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "output format: `text|json|sarif|junit`", Validator: oneOf("text", "json", "sarif", "junit")},
			&cli.StringFlag{Name: "driver-link", Value: "/run/opengl-driver/lib", Usage: "the driver link `DIR`"},
			&cli.StringFlag{Name: "store-dir", Usage: "the Nix store `DIR`: entries and note elements in it are no build-directory leaks, wherever it lies (default: $NIX_STORE, else /nix/store, as the main job)"},
			&cli.StringFlag{Name: "driver-version", Usage: "the NVIDIA driver `VERSION` the files are to run with (580.159.04); turns on CP021 compat-older-than-driver"},
			&cli.StringFlag{Name: "interpreter", Usage: "the main job's interpreter `FILE`: files of another architecture are skipped, as it skips them (default: $NIX_BINTOOLS's, else this machine's)"},
			&cli.BoolFlag{Name: "preserve-origin", Usage: "the main job kept the old $ORIGIN entries: they are no CP011 missing-dir findings"},
			&cli.StringSliceFlag{Name: "append-rpath", Usage: "`ENTRY` the main job appended: no CP011 missing-dir finding (repeatable)"},
			&cli.StringSliceFlag{Name: "runtime-dependency", Usage: "`DIR` the main job put first in executables' RUNPATH: no CP011 missing-dir finding (repeatable)"},
			&cli.StringSliceFlag{Name: "ignore-missing", Usage: "libraries whose name matches `PATTERN` are no CP009 unresolvable-needed findings (Python fnmatch, as the main job; repeatable)"},
			&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Usage: "check `N` files at once", DefaultText: "the number of CPUs", Validator: atLeast(1)},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log each file checked or skipped, and why"},
			&cli.BoolFlag{Name: "list-rules", Usage: "print the rules and exit"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			format := cmd.String("format")
			failOn, err := lint.ParseSeverity(cmd.String("fail-on"))
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("lint: --fail-on: %w", err))
			}
			if cmd.Bool("list-rules") {
				for _, r := range lint.Rules() {
					def := ""
					if !r.Default {
						def = " (off by default)"
					}
					fmt.Fprintf(g.stdout, "%s %-22s %-7s %s%s\n", r.ID, r.Name, r.Severity, r.Summary, def)
				}
				return nil
			}
			paths := cmd.Args().Slice()
			if len(paths) == 0 {
				return withCode(exitUsage, fmt.Errorf("lint: no paths given"))
			}
			if err := checkLintPaths(paths); err != nil {
				return withCode(exitUsage, fmt.Errorf("lint: %w", err))
			}
			if cmd.Bool("verbose") {
				g.level.Set(slog.LevelDebug)
			}
			opts := &lint.Options{
				Root:          cmd.String("root"),
				StoreDir:      g.storeDir(cmd.String("store-dir")),
				Enable:        splitList(cmd.StringSlice("enable")),
				Disable:       splitList(cmd.StringSlice("disable")),
				DriverVersion: cmd.String("driver-version"),
				Jobs:          int(cmd.Int("jobs")),
				Logger:        g.log,
			}
			g.lintTarget(opts, cmd.String("interpreter"), cmd.String("root"))
			if err := sharedPolicy(cmd, &opts.Policy); err != nil {
				return withCode(exitUsage, fmt.Errorf("lint: %w", err))
			}
			if top := g.getenv("NIX_BUILD_TOP"); top != "" {
				opts.Policy.BuildDirs = []string{top}
			}
			if f := cmd.String("config"); f != "" {
				cfg, err := lint.LoadConfig(f)
				if err != nil {
					return withCode(exitUsage, fmt.Errorf("lint: %w", err))
				}
				opts.Rules = cfg
			}
			rep, err := lint.Lint(ctx, opts, paths)
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("lint: %w", err))
			}
			switch format {
			case "json":
				err = lint.WriteJSON(g.stdout, rep)
			case "sarif":
				err = lint.WriteSARIF(g.stdout, rep, "")
			case "junit":
				err = lint.WriteJUnit(g.stdout, rep, failOn)
			default:
				err = lint.WriteText(g.stdout, rep, g.colorOK())
			}
			if err != nil {
				return withCode(exitUsage, err)
			}
			if rep.Count(failOn) > 0 {
				return withCode(exitFindings, errReported)
			}
			return nil
		},
	}
}

// lintTarget is the architecture lint checks, the main job's: that of
// --interpreter, else of $NIX_BINTOOLS's interpreter, else of this
// machine's (inside --root: the root's), as the main job finds it
// (globals.loader), set in opts. None found, no file is skipped for its
// architecture.
func (g *globals) lintTarget(opts *lint.Options, interp, root string) {
	if interp != "" {
		opts.Policy.Interpreter = interp
		return
	}
	if bt := g.getenv("NIX_BINTOOLS"); bt != "" {
		b, err := os.ReadFile(filepath.Join(bt, "nix-support", "dynamic-linker"))
		if err == nil {
			interp = strings.TrimSpace(string(b))
			if t, err := policy.InterpreterTarget(interp); err == nil {
				g.log.Debug("target", "interpreter", interp, "from", "NIX_BINTOOLS")
				opts.Target = &t
				return
			}
		}
		g.log.Debug("target", "interpreter", interp, "why", "not readable: no file is skipped for its architecture")
		return
	}
	h, err := g.findHost(root)
	if err != nil {
		g.log.Debug("target", "why", err.Error()+": no file is skipped for its architecture")
		return
	}
	g.log.Debug("target", "interpreter", h.Interpreter, "from", "this machine")
	opts.Target = &policy.Target{Class: h.Class, Machine: h.Machine, OSABI: h.OSABI}
}

// checkLintPaths refuses, in one line each, the PATHs lint cannot check:
// one that does not exist, and a file named on the command line that is
// not ELF (below a directory such files are passed over; named, one is a
// mistake that would otherwise pass as "0 ELF files checked"). Symbolic
// links are lint's to judge: it does not follow them.
func checkLintPaths(paths []string) error {
	for _, p := range paths {
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s: %s", p, pathProblem(p, p, err))
		}
		if st.IsDir() || st.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: %s", p, notRegular)
		}
		ok, err := hasELFMagic(p)
		if err != nil {
			return fmt.Errorf("%s: %s", p, pathProblem(p, p, err))
		}
		if !ok {
			return fmt.Errorf("%s: not an ELF file (lint checks ELF files, and the ELF files below directories)", p)
		}
	}
	return nil
}

// severity validates --fail-on: a level's name, or an alias
// lint.ParseSeverity takes ("warn", any case).
func severity(s string) error {
	if _, err := lint.ParseSeverity(s); err != nil {
		return fmt.Errorf("want info, warning or error")
	}
	return nil
}

// splitList splits repeated, comma-separated flag values.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// colorOK says whether stdout is a terminal that wants colour (NO_COLOR
// unset, TERM not dumb).
func (g *globals) colorOK() bool {
	f, ok := g.stdout.(*os.File)
	if !ok || g.getenv("NO_COLOR") != "" || g.getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}
