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
		Usage:     "check the loader invariants of ELF files (exit 1 on a file the main job refuses to edit)",
		ArgsUsage: "FILE...",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			files := cmd.Args().Slice()
			if len(files) == 0 {
				return withCode(exitUsage, fmt.Errorf("verify: no files given"))
			}
			// A problem the engine refuses to edit over is a rejection
			// (exit 1), the same the main job refuses; the others are
			// broken by files that load (a page-aligned armhf segment,
			// a W+X segment, a stray note section), listed as tolerated.
			type entry struct {
				Path      string            `json:"path"`
				Problems  []elfedit.Problem `json:"problems"`
				Tolerated []elfedit.Problem `json:"tolerated,omitempty"`
				Error     string            `json:"error,omitempty"`
			}
			var out []entry
			bad := false
			for _, path := range files {
				all, err := g.verifyFile(path)
				e := entry{Path: path}
				for _, p := range all {
					if p.Refused() {
						e.Problems = append(e.Problems, p)
					} else {
						e.Tolerated = append(e.Tolerated, p)
					}
				}
				ps := e.Problems
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
						// As print's: on stderr, with the program's name.
						printable.Fprintf(g.stderr, "cudapatch: %s\n", e.Error)
					case len(e.Problems) == 0 && len(e.Tolerated) == 0:
						printable.Fprintf(g.stdout, "%s: ok\n", e.Path)
					default:
						for _, p := range e.Problems {
							printable.Fprintf(g.stdout, "%s: %s\n", e.Path, p)
						}
						for _, p := range e.Tolerated {
							printable.Fprintf(g.stdout, "%s: %s (tolerated: the file loads, and an edit keeps it)\n", e.Path, p)
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

// verifyFile is elfedit.VerifyFile, noting a journal the file ends in.
func (g *globals) verifyFile(path string) ([]elfedit.Problem, error) {
	f, err := elfedit.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	g.noteInterrupted(path, f)
	return f.Verify(), nil
}

// noteInterrupted notes on stderr that the file ends in the journal of
// an interrupted edit: what a read-only command shows of it is what the
// loader maps, not what the next edit leaves.
func (g *globals) noteInterrupted(path string, f *elfedit.File) {
	if note := f.InterruptedNote(); note != "" {
		printable.Fprintf(g.stderr, "cudapatch: note: %s: %s\n", path, note)
	}
}
