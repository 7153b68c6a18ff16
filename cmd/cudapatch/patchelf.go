package main

import (
	"context"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/patchelf"
)

// patchelfCommand is the drop-in patchelf: `cudapatch patchelf ARGS…`, or
// the binary installed under the name "patchelf" (rpath/patchelf does
// the work), with patchelf master's command line, prints, messages and
// exit codes, so that build scripts written against patchelf run
// unchanged. Where it deliberately differs, and patchelf's own test suite
// run against it: docs/patchelf-suite.md.
func patchelfCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:            "patchelf",
		Usage:           "a drop-in patchelf (same options, messages and exit codes)",
		ArgsUsage:       "[OPTIONS] FILENAME...",
		UsageText:       patchelfHelp(),
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if code := patchelfMain(cmd.Args().Slice(), g.stdout, g.stderr); code != 0 {
				return withCode(code, errReported)
			}
			return nil
		},
	}
}

// patchelfHelp is what the drop-in patchelf prints for --help, for
// cudapatch's help, man page and completions.
func patchelfHelp() string {
	var out strings.Builder
	patchelf.Main([]string{"--help"}, io.Discard, &out)
	return out.String()
}

// patchelfMain runs the drop-in patchelf (rpath/patchelf) with the
// arguments after the program name and returns its exit code.
func patchelfMain(args []string, stdout, stderr io.Writer) int {
	return patchelf.Main(args, stdout, stderr)
}
