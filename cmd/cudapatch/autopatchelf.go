package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/urfave/cli/v3"
)

// autoPatchelfCommand accepts nixpkgs' auto-patchelf.py command line as it
// is, so that the upstream hook can call cudapatch unchanged. That script
// parses with argparse: list options take every following word up to the
// next option (nargs="*"), and --extra-args takes the rest of the line.
func autoPatchelfCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:            "auto-patchelf",
		Usage:           "nixpkgs' auto-patchelf command line (--paths … --libs … --runtime-dependencies … --append-rpaths … --ignore-missing …)",
		ArgsUsage:       "--paths PATH... [OPTIONS]",
		UsageText:       autoPatchelfUsage,
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			a, err := parseAutoPatchelf(cmd.Args().Slice())
			if err != nil {
				return withCode(exitUsage, err)
			}
			if a.help {
				fmt.Fprintln(g.stdout, autoPatchelfUsage)
				return nil
			}
			cfg, err := g.patchConfigFrom(a)
			if err != nil {
				return withCode(exitUsage, err)
			}
			out := outText
			if a.structured {
				out = outEvents
			}
			return g.runPatch(ctx, a.paths, cfg, out, false)
		},
	}
}

const autoPatchelfUsage = `usage: cudapatch auto-patchelf [--ignore-missing [PATTERN ...]] [--no-recurse] [--ignore-existing]
       [--paths [PATH ...]] [--libs [DIR ...]] [--runtime-dependencies [DIR ...]]
       [--append-rpaths [ENTRY ...]] [--keep-libc] [--preserve-origin]
       [--relativize-rpath] [--relative-rpaths] [--structured-logs]
       [--driver-link-for all|needed|none] [--extra-args ...]

Accepts nixpkgs' auto-patchelf.py command line; interpreter and libc come from
$NIX_BINTOOLS, the store of --relative-rpaths from $NIX_STORE (else /nix/store).
--driver-link-for is cudapatch's own (default all: the driver link is added as
nixpkgs' driver hook would add it afterwards; none writes what auto-patchelf
alone writes). Of the patchelf options after --extra-args, --force-rpath,
--no-clobber-old-sections and --page-size N are honoured; any other is
refused (exit 2).`

type autoPatchelfArgs struct {
	paths, libs, runtimeDeps, appendRpaths, ignoreMissing, extra []string
	noRecurse, keepLibc, preserveOrigin, ignoreExisting          bool
	relativize, relative, structured, help                       bool
	driverLinkFor                                                string
}

func parseAutoPatchelf(args []string) (*autoPatchelfArgs, error) {
	a := &autoPatchelfArgs{}
	lists := map[string]*[]string{
		"--paths": &a.paths, "--libs": &a.libs, "--runtime-dependencies": &a.runtimeDeps,
		"--append-rpaths": &a.appendRpaths, "--ignore-missing": &a.ignoreMissing,
	}
	flags := map[string]*bool{
		"--no-recurse": &a.noRecurse, "--keep-libc": &a.keepLibc, "--preserve-origin": &a.preserveOrigin,
		"--ignore-existing": &a.ignoreExisting, "--structured-logs": &a.structured, "--help": &a.help, "-h": &a.help,
		"--relativize-rpath": &a.relativize, "--relative-rpaths": &a.relative,
	}
	var cur *[]string
	for i := 0; i < len(args); i++ {
		w := args[i]
		name, val, hasVal := strings.Cut(w, "=")
		switch {
		case w == "--extra-args":
			a.extra = append(a.extra, args[i+1:]...)
			return a, nil
		case name == "--driver-link-for":
			cur = nil
			if !hasVal {
				if i+1 >= len(args) {
					return nil, errors.New("auto-patchelf: argument --driver-link-for: expected one argument")
				}
				i++
				val = args[i]
			}
			a.driverLinkFor = val
		case lists[name] != nil && strings.HasPrefix(w, "--"):
			cur = lists[name]
			*cur = nil // argparse's "store": the last occurrence wins
			if hasVal {
				*cur = append(*cur, val)
			}
		case flags[w] != nil:
			*flags[w] = true
			cur = nil
		case strings.HasPrefix(w, "-") && w != "-":
			return nil, fmt.Errorf("auto-patchelf: unrecognized arguments: %s", w)
		case cur == nil:
			return nil, fmt.Errorf("auto-patchelf: unrecognized arguments: %s", w)
		default:
			*cur = append(*cur, w)
		}
	}
	if len(a.paths) == 0 && !a.help {
		return nil, errors.New("auto-patchelf: the following arguments are required: --paths")
	}
	return a, nil
}

// patchConfigFrom maps auto-patchelf's arguments to the main job's
// configuration; the driver link stays at its default, as the nixpkgs
// hooks it replaces would add it afterwards.
func (g *globals) patchConfigFrom(a *autoPatchelfArgs) (*patch.Config, error) {
	cmd := &cli.Command{Flags: patchFlags()}
	args := []string{"auto-patchelf"}
	for _, l := range a.libs {
		args = append(args, "--search", l)
	}
	// argparse converts these to pathlib.Path ("$ORIGIN/" becomes
	// "$ORIGIN"), and auto-patchelf writes them so.
	for _, d := range a.runtimeDeps {
		args = append(args, "--runtime-dependency", patch.PyPath(d))
	}
	for _, e := range a.appendRpaths {
		args = append(args, "--append-rpath", patch.PyPath(e))
	}
	for _, p := range a.ignoreMissing {
		args = append(args, "--ignore-missing", p)
	}
	for flag, on := range map[string]bool{"--no-recurse": a.noRecurse, "--keep-libc": a.keepLibc, "--preserve-origin": a.preserveOrigin,
		"--ignore-existing": a.ignoreExisting, "--relativize-rpath": a.relativize, "--relative-rpaths": a.relative} {
		if on {
			args = append(args, flag)
		}
	}
	if a.driverLinkFor != "" {
		args = append(args, "--driver-link-for", a.driverLinkFor)
	}
	// The same words as the hook's patchelfFlags, read by the same code.
	for _, w := range a.extra {
		args = append(args, "--patchelf-flag="+w)
	}
	// auto-patchelf reads no strings: its drop-in resolves what it
	// resolves (its events are checked against the script's).
	args = append(args, "--dlopen", string(policy.DlopenOff))
	var cfg *patch.Config
	var perr error
	cmd.Action = func(ctx context.Context, c *cli.Command) error {
		cfg, perr = g.patchConfig(c)
		return nil
	}
	cmd.Writer, cmd.ErrWriter = g.stdout, g.stderr
	cmd.DisableSliceFlagSeparator = true
	if err := cmd.Run(context.Background(), args); err != nil {
		return nil, err
	}
	return cfg, perr
}
