package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/doctor"
)

func doctorCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "diagnose the NVIDIA driver setup for Nix-built CUDA programs, and which libcuda FILE would load (exit 1 on problems)",
		Description: "Checks /run/opengl-driver/lib and its libcuda.so.1 against the loaded kernel module, finds the host's " +
			"driver in ld.so.cache, looks for LD_LIBRARY_PATH shadowing, and prints one fix for each problem. With FILE, " +
			"lists every libcuda.so.1 the file could load, in the loader's order, with the version each carries, and says " +
			"ahead of time when the one it takes is a stub, a cuda_compat older than the kernel module (CUDA error 803), or " +
			"another driver than the kernel module's.\n\n" +
			"--fix makes the driver link: a symbolic link in /run/opengl-driver/lib for each driver library of this machine, " +
			"and " + doctor.TmpfilesConf + " so that systemd-tmpfiles makes them again at every boot. It runs as root, " +
			"does nothing when all is in place, and never overwrites a file it did not write (its own start with a marker " +
			"line). --fix --dry-run prints the exact commands instead, as any user.",
		ArgsUsage: "[FILE]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "read (and with --fix, write) the system under `DIR` (driver link, ld.so.cache, tmpfiles.d, libraries)"},
			&cli.StringFlag{Name: "proc", Value: "/proc", Usage: "procfs mount `DIR`"},
			&cli.StringFlag{Name: "sys", Value: "/sys", Usage: "sysfs mount `DIR`"},
			&cli.StringFlag{Name: "driver-link", Value: "/run/opengl-driver/lib", Usage: "the driver link `DIR`"},
			&cli.BoolFlag{Name: "fix", Usage: "make the driver link and its tmpfiles.d file (as root)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "with --fix: print the commands it would run, change nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 1 {
				return withCode(exitUsage, fmt.Errorf("doctor: at most one FILE"))
			}
			fix, dry := cmd.Bool("fix"), cmd.Bool("dry-run")
			if dry && !fix {
				return withCode(exitUsage, fmt.Errorf("doctor: --dry-run goes with --fix"))
			}
			sys := doctor.System{
				Root: cmd.String("root"), Proc: cmd.String("proc"), Sys: cmd.String("sys"),
				DriverLink: cmd.String("driver-link"), LDLibraryPath: g.getenv("LD_LIBRARY_PATH"),
			}
			file := cmd.Args().First()
			if file != "" && sys.Root != "" {
				file = insideRoot(sys.Root, file)
			}
			if file != "" {
				host := file
				if sys.Root != "" {
					host = filepath.Join(sys.Root, file)
				}
				if p := fileProblem(file, host); p != "" {
					return withCode(exitUsage, fmt.Errorf("doctor: %s: %s", file, p))
				}
			}
			rep, err := doctor.Diagnose(ctx, sys, file)
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("doctor: %w", err))
			}
			if !fix {
				if cmd.Bool("json") {
					err = g.writeJSON(rep)
				} else {
					err = writeDoctor(g.stdout, rep)
				}
				if err != nil {
					return withCode(exitUsage, err)
				}
				return problemsCode(rep)
			}
			return g.doctorFix(ctx, sys, file, rep, dry, cmd.Bool("json"))
		},
	}
}

func problemsCode(rep *doctor.Report) error {
	if rep.Problems() > 0 {
		return withCode(exitFindings, errReported)
	}
	return nil
}

// doctorFix is doctor --fix: the diagnosis, then the driver-link fix
// printed (--dry-run) or applied, then, when applied, the diagnosis again.
func (g *globals) doctorFix(ctx context.Context, sys doctor.System, file string, rep *doctor.Report, dry, asJSON bool) error {
	plan := rep.Fix
	var refusal error
	switch {
	case plan == nil:
		refusal = errors.New("no NVIDIA kernel module is loaded, so there is no driver to link")
	case plan.Source == "":
		refusal = errors.New("found no NVIDIA driver libraries of this machine to link (in ld.so.cache or LD_LIBRARY_PATH): install the driver of the kernel module " + rep.KernelModule + " first")
	case len(plan.Conflicts) > 0:
		refusal = fmt.Errorf("refusing to overwrite what cudapatch did not write: %s", strings.Join(plan.Conflicts, "; "))
	case len(plan.Steps) > 0 && !dry && g.euid != 0:
		return withCode(exitUsage, fmt.Errorf("doctor: --fix writes %s and %s: run it as root (sudo cudapatch doctor --fix), or see what it would do with --fix --dry-run", sys.DriverLink, doctor.TmpfilesConf))
	}
	type result struct {
		Report  *doctor.Report `json:"report"`
		DryRun  bool           `json:"dry_run"`
		Applied bool           `json:"applied"`
		Refusal string         `json:"refusal,omitempty"`
		After   *doctor.Report `json:"after,omitempty"`
	}
	res := result{Report: rep, DryRun: dry}
	if refusal != nil {
		res.Refusal = refusal.Error()
	}
	out := g.stdout
	if asJSON {
		out = io.Discard
	}
	if err := writeDoctor(out, rep); err != nil {
		return withCode(exitUsage, err)
	}
	code := problemsCode(rep)
	switch {
	case refusal != nil:
		fmt.Fprintf(out, "\ndoctor --fix: %v\n", refusal)
		code = withCode(exitFindings, errReported)
	case len(plan.Steps) == 0:
		fmt.Fprintf(out, "\ndoctor --fix: nothing to do: %s links %s, and %s makes them at boot.\n",
			sys.DriverLink, plan.Source, doctor.TmpfilesConf)
	case dry:
		fmt.Fprintf(out, "\ndoctor --fix --dry-run: would run, as root:\n")
		writeSteps(out, plan.Steps)
	default:
		if err := doctor.Apply(sys, plan); err != nil {
			return withCode(exitUsage, fmt.Errorf("doctor --fix: %w", err))
		}
		res.Applied = true
		fmt.Fprintf(out, "\ndoctor --fix: ran:\n")
		writeSteps(out, plan.Steps)
		after, err := doctor.Diagnose(ctx, sys, file)
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("doctor: %w", err))
		}
		res.After = after
		fmt.Fprintf(out, "\nAfter the fix:\n")
		if err := writeDoctor(out, after); err != nil {
			return withCode(exitUsage, err)
		}
		code = problemsCode(after)
	}
	if asJSON {
		if err := g.writeJSON(res); err != nil {
			return withCode(exitUsage, err)
		}
	}
	return code
}

func writeSteps(w io.Writer, steps []doctor.Step) {
	for _, s := range steps {
		for _, l := range s.Shell() {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

func writeDoctor(w io.Writer, rep *doctor.Report) error {
	for _, c := range rep.Checks {
		if _, err := fmt.Fprintf(w, "%-7s %s\n", c.Status, c.Message); err != nil {
			return err
		}
		for _, l := range c.Details {
			fmt.Fprintf(w, "          %s\n", l)
		}
		for i, f := range c.Fix {
			lead := "          "
			if i == 0 {
				lead = "  fix:   "
			}
			fmt.Fprintf(w, "%s %s\n", lead, f)
		}
	}
	var err error
	switch n := rep.Problems(); {
	case n > 0:
		_, err = fmt.Fprintf(w, "\n%s found.\n", plural(n, "problem"))
	case rep.KernelModule == "" && !slices.ContainsFunc(rep.Checks, func(c doctor.Check) bool { return len(c.Fix) > 0 }):
		_, err = fmt.Fprintf(w, "\nNo NVIDIA GPU driver is loaded on this machine, so there is nothing to fix here.\n")
	case rep.KernelModule == "":
		_, err = fmt.Fprintf(w, "\nNo NVIDIA GPU driver is loaded on this machine, so nothing above is a problem here; a fix above is for a machine with the driver.\n")
	default:
		_, err = fmt.Fprintf(w, "\nNo problems found.\n")
	}
	return err
}
