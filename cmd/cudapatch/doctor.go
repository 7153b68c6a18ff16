package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/doctor"
)

func doctorCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "diagnose the NVIDIA driver setup for Nix-built CUDA programs, and which libcuda FILE would load (exit 1 on problems)",
		Description: "Checks /run/opengl-driver/lib and its libcuda.so.1 against the loaded kernel module, finds the host's\n" +
			"driver in ld.so.cache, looks for LD_LIBRARY_PATH shadowing, and prints the exact fix for each problem.",
		ArgsUsage: "[FILE]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "read the system under `DIR` (driver link, ld.so.cache, libraries)"},
			&cli.StringFlag{Name: "proc", Value: "/proc", Usage: "procfs mount `DIR`"},
			&cli.StringFlag{Name: "sys", Value: "/sys", Usage: "sysfs mount `DIR`"},
			&cli.StringFlag{Name: "driver-link", Value: "/run/opengl-driver/lib", Usage: "the driver link `DIR`"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 1 {
				return withCode(exitUsage, fmt.Errorf("doctor: at most one FILE"))
			}
			sys := doctor.System{
				Root: cmd.String("root"), Proc: cmd.String("proc"), Sys: cmd.String("sys"),
				DriverLink: cmd.String("driver-link"), LDLibraryPath: g.getenv("LD_LIBRARY_PATH"),
			}
			file := cmd.Args().First()
			if file != "" && sys.Root != "" {
				file = insideRoot(sys.Root, file)
			}
			rep, err := doctor.Diagnose(ctx, sys, file)
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("doctor: %w", err))
			}
			if cmd.Bool("json") {
				err = g.writeJSON(rep)
			} else {
				err = writeDoctor(g, rep)
			}
			if err != nil {
				return withCode(exitUsage, err)
			}
			if rep.Problems() > 0 {
				return withCode(exitFindings, errReported)
			}
			return nil
		},
	}
}

func writeDoctor(g *globals, rep *doctor.Report) error {
	w := g.stdout
	for _, c := range rep.Checks {
		if _, err := fmt.Fprintf(w, "%-7s %s\n", c.Status, c.Message); err != nil {
			return err
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
		_, err = fmt.Fprintf(w, "\n%d problem(s) found.\n", n)
	case rep.KernelModule == "":
		_, err = fmt.Fprintf(w, "\nNo NVIDIA GPU driver is loaded on this machine, so there is nothing to fix here.\n")
	default:
		_, err = fmt.Fprintf(w, "\nNo problems found.\n")
	}
	return err
}
