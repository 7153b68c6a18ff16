package main

import (
	"context"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/internal/patchelf"
)

// This file is the drop-in patchelf: `cudapatch patchelf ARGS…`, or the
// binary installed under the name "patchelf" (internal/patchelf does the
// work). It takes patchelf master's command line and copies its observable
// behaviour: what is printed, in which order, the error messages and the
// exit codes, so that build scripts written against patchelf (nixpkgs'
// fixup phase, auditwheel, conda-build) run unchanged; patchelf's own test
// suite checks it (scripts/patchelf-suite.sh, docs/patchelf-suite.md).
// Everything that touches bytes is an elfedit.Edit: crash-safe, verified,
// only the bytes that must change.
//
// Where it deliberately differs from patchelf:
//
//   - A search path that ends up empty (--set-rpath "") removes
//     DT_RUNPATH/DT_RPATH instead of writing an empty one: patchelf writes
//     RUNPATH "", which glibc reads as the current directory.
//     --print-rpath prints an empty line either way. A path with an empty
//     entry (a leading, trailing or doubled ':') is written as given, as
//     patchelf writes it, with a warning on stderr that patchelf does not
//     print: glibc reads the entry as the current directory too. (The main
//     job never writes one; `cudapatch lint` reports one as CP006.)
//   - --add-needed does not add a name the file already needs (patchelf
//     adds a duplicate DT_NEEDED). Empty names given to --set-soname,
//     --add-needed or --replace-needed are refused by elfedit (patchelf
//     writes them); an empty --set-interpreter is ignored, as in patchelf.
//   - A new DT_SONAME goes after the DT_NEEDED entries, not first; the
//     order of .dynamic means nothing to the loaders.
//   - --shrink-rpath treats a file named like a DT_NEEDED that is not an
//     ELF file, or not readable, as absent, as the loader does; patchelf
//     stops with "not an ELF executable" or a read error.
//   - A file with several hard links is written as a copy renamed over the
//     path, so the other links keep their content; patchelf rewrites the
//     shared inode.
//   - Files without section headers are edited (the loaders do not need
//     them); patchelf refuses them. Files patchelf refuses for their ELF
//     header or section headers get patchelf's message; corruption past
//     that gets cudapatch's message, which names the offset.
//   - --page-size is validated as patchelf does (C's atoi, > 0) and then
//     ignored: elfedit aligns a segment it adds to the largest page size
//     the file's machine may run with (64 KiB on aarch64 and ppc64), which
//     is safe on every kernel; elfedit offers no way to choose another.
//   - --no-sort is accepted and changes nothing: cudapatch never reorders
//     program or section headers. --no-clobber-old-sections leaves every
//     byte that moved data used to hold as it was (no hygiene steps).
//   - --set-execstack/--clear-execstack on a file without PT_GNU_STACK are
//     refused (patchelf adds the header; elfedit does not grow the program
//     header table for it), and --print-execstack prints nothing for it.
//   - A string that a replaced search path shared with a symbol name is
//     left in the old string table only where the name uses it; the old
//     table is zeroed when it moves (patchelf clobbers a moved section).
//   - The OS ABI, the stack flag and symbol versions are written after the
//     other changes of the same run, each as its own commit.
//   - A file without PT_DYNAMIC is refused for a dynamic-section option
//     even when its section headers name a .dynamic: patchelf edits that
//     section, which no loader reads (its output still has no dynamic
//     section for readelf -d), so the change would do nothing.
//   - --rename-dynamic-symbols keeps the order of .dynsym and rebuilds
//     .gnu.hash with one bucket (patchelf reorders the symbols and
//     rewrites every relocation): fewer bytes written, lookups of the
//     renamed object's symbols walk one chain.

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

// patchelfMain runs the drop-in patchelf (internal/patchelf) with the
// arguments after the program name and returns its exit code.
func patchelfMain(args []string, stdout, stderr io.Writer) int {
	return patchelf.Main(args, stdout, stderr)
}
