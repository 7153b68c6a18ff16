package main

import (
	"context"
	"fmt"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/urfave/cli/v3"
)

func verifyCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check the loader invariants of ELF files (exit 1 if one is broken)",
		ArgsUsage: "FILE...",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			files := cmd.Args().Slice()
			if len(files) == 0 {
				return withCode(exitUsage, fmt.Errorf("verify: no files given"))
			}
			type entry struct {
				Path     string            `json:"path"`
				Problems []elfedit.Problem `json:"problems"`
				Error    string            `json:"error,omitempty"`
			}
			var out []entry
			bad := false
			for _, path := range files {
				ps, err := elfedit.VerifyFile(path)
				e := entry{Path: path, Problems: ps}
				if err != nil {
					e.Error = err.Error()
					if p := openProblem(path, path, err); p != "" {
						e.Error = path + ": " + p
					}
				}
				bad = bad || err != nil || len(ps) > 0
				out = append(out, e)
			}
			if cmd.Bool("json") {
				if err := g.writeJSON(out); err != nil {
					return withCode(exitUsage, err)
				}
			} else {
				for _, e := range out {
					switch {
					case e.Error != "":
						printable.Fprintf(g.stdout, "%s\n", e.Error)
					case len(e.Problems) == 0:
						printable.Fprintf(g.stdout, "%s: ok\n", e.Path)
					default:
						for _, p := range e.Problems {
							printable.Fprintf(g.stdout, "%s: %s\n", e.Path, p)
						}
					}
				}
			}
			if bad {
				return withCode(exitFindings, errReported)
			}
			return nil
		},
	}
}
