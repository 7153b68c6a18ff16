package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

func selectorCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "selector",
		Usage: "build the libcuda.so.1 that takes cuda_compat's libcuda or the driver's when each process starts",
		Description: "Builds, into --out, a small libcuda.so.1 that forwards every function cuda_compat's libcuda\n" +
			"exports. When a process loads it, it reads the kernel module's version\n" +
			"(/proc/driver/nvidia/version, else /sys/module/nvidia/version) and loads cuda_compat's libcuda\n" +
			"when the module is older than it and of a branch its .note.cuda.fwd_compatibility lists, else the\n" +
			"driver's (DIR/libcuda.so.1 of --driver-link). Give the main job --cuda-compat OUT afterwards, or let\n" +
			"it build the selector itself with --cuda-compat DIR --cuda-compat-selector OUT. Needs a C compiler:\n" +
			"$CC, else cc.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cuda-compat", Required: true, Usage: "the cuda_compat `DIR` holding its libcuda.so.1"},
			&cli.StringFlag{Name: "driver-link", Value: policy.DefaultDriverLink, Usage: "driver link `DIR` whose libcuda.so.1 the selector loads when it takes the driver"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "`DIR` to write libcuda.so.1 into (created)"},
			&cli.BoolFlag{Name: "json", Usage: "print what the selector was built from, and what it takes on this machine, as JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return withCode(exitUsage, fmt.Errorf("selector: unexpected argument %q", cmd.Args().First()))
			}
			compat, out, link := cmd.String("cuda-compat"), cmd.String("out"), cmd.String("driver-link")
			for _, d := range []string{compat, out, link} {
				if !filepath.IsAbs(d) {
					return withCode(exitUsage, fmt.Errorf("selector: %q is not absolute", d))
				}
			}
			spec, err := selector.ForCompat(compat, []string{filepath.Join(link, selector.Name)})
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("selector: %w", err))
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return withCode(exitUsage, fmt.Errorf("selector: %w", err))
			}
			cc := strings.Fields(g.getenv("CC"))
			if len(cc) == 0 {
				cc = []string{"cc"}
			}
			if err := selector.Build(ctx, spec, cc, out); err != nil {
				return withCode(exitUsage, err)
			}
			info, err := selector.Read(filepath.Join(out, selector.Name))
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("selector: %w", err))
			}
			choice := info.Choose(nvdriver.ReadMachine("/proc", "/sys"))
			if cmd.Bool("json") {
				return g.writeJSON(struct {
					Selector *selector.Info  `json:"selector"`
					Here     nvdriver.Choice `json:"here"`
				}{info, choice})
			}
			fmt.Fprintf(g.stdout, "%s: the selector of cuda_compat %s (%d functions)\n", filepath.Join(out, selector.Name), info.CompatVersion, info.Functions)
			fmt.Fprintf(g.stdout, "on this machine it takes the %s: %s\n", choice.Use, choice.Reason)
			return nil
		},
	}
}
