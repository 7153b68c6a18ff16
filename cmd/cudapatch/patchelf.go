package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"
)

func patchelfCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:            "patchelf",
		Usage:           "a drop-in patchelf (same options, messages and exit codes)",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if code := patchelfMain(cmd.Args().Slice(), g.stdout, g.stderr); code != 0 {
				return withCode(code, errReported)
			}
			return nil
		},
	}
}

// patchelfMain is being written.
func patchelfMain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "patchelf: not yet implemented")
	return 1
}
