package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/urfave/cli/v3"
)

func printCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "print",
		Usage:     "show the dynamic-linking information of ELF files",
		ArgsUsage: "FILE...",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			files := cmd.Args().Slice()
			if len(files) == 0 {
				return withCode(exitUsage, fmt.Errorf("print: no files given"))
			}
			type entry struct {
				Path  string        `json:"path"`
				Info  *elfedit.Info `json:"info,omitempty"`
				Error string        `json:"error,omitempty"`
			}
			var out []entry
			failed := false
			for _, path := range files {
				f, err := elfedit.Open(path)
				if err != nil {
					failed = true
					out = append(out, entry{Path: path, Error: err.Error()})
					continue
				}
				in := f.Info()
				f.Close()
				out = append(out, entry{Path: path, Info: &in})
			}
			if cmd.Bool("json") {
				if err := g.writeJSON(out); err != nil {
					return withCode(exitUsage, err)
				}
			} else {
				for _, e := range out {
					if e.Error != "" {
						fmt.Fprintf(g.stderr, "cudapatch: %s: %s\n", e.Path, e.Error)
						continue
					}
					writeInfo(g.stdout, e.Path, e.Info)
				}
			}
			if failed {
				return withCode(exitFindings, errReported)
			}
			return nil
		},
	}
}

func writeInfo(w io.Writer, path string, in *elfedit.Info) {
	fmt.Fprintf(w, "%s:\n", path)
	fmt.Fprintf(w, "  kind:        %s (%s %s %s, %s, %s)\n", in.Kind, in.Class, in.Data, in.Machine, in.OSABI, in.Type)
	if in.Interpreter != "" {
		fmt.Fprintf(w, "  interpreter: %s\n", in.Interpreter)
	}
	if in.Soname != "" {
		fmt.Fprintf(w, "  soname:      %s\n", in.Soname)
	}
	for _, n := range in.Needed {
		fmt.Fprintf(w, "  needed:      %s\n", n)
	}
	if in.RunPath != nil {
		fmt.Fprintf(w, "  runpath:     %s\n", *in.RunPath)
	}
	if in.RPath != nil {
		fmt.Fprintf(w, "  rpath:       %s\n", *in.RPath)
	}
	if in.Flags1 != 0 {
		fmt.Fprintf(w, "  flags_1:     0x%x\n", in.Flags1)
	}
	for _, d := range in.Dlopen {
		fmt.Fprintf(w, "  dlopen:      %s", strings.Join(d.Soname, " | "))
		if d.Feature != "" {
			fmt.Fprintf(w, " (feature %s, %s)", d.Feature, d.Priority)
		}
		fmt.Fprintln(w)
	}
}
