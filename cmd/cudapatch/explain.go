package main

import (
	"context"
	"fmt"
	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

func explainCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "explain",
		Usage: "show where the loader would find each library of FILE, and by which search step (runs nothing; exit 1 if one is missing)",
		Description: "An ldd that executes nothing: glibc's search (DT_RPATH chain, LD_LIBRARY_PATH, DT_RUNPATH,\n" +
			"ld.so.cache, default directories, glibc-hwcaps, $ORIGIN/$LIB/$PLATFORM) simulated over the files.\n" +
			"By default the loader is nixpkgs' glibc, which reads each object's resolution-cache note\n" +
			"(.note.nixos.ldcache) after LD_LIBRARY_PATH and before DT_RUNPATH: a library it finds is\n" +
			"shown as (ldcache of OBJECT). --loader=stock simulates glibc as released, which ignores the note.\n" +
			"The library names an object's read-only data gives dlopen (as the main job's --dlopen finds\n" +
			"them) follow as 'dlopen NAME', searched as dlopen from that object searches; one found nowhere\n" +
			"is no failure.",
		ArgsUsage: "FILE",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "resolve inside `DIR` as if chrooted there; FILE is a path inside it (or a path under DIR)"},
			&cli.StringFlag{Name: "ld-library-path", Usage: "LD_LIBRARY_PATH `VALUE` (default: the environment's, without --root)"},
			&cli.BoolFlag{Name: "secure", Usage: "simulate a setuid program (AT_SECURE): LD_LIBRARY_PATH ignored, $ORIGIN restricted"},
			&cli.StringFlag{Name: "workdir", Usage: "current `DIR` (inside the root) for relative search directories"},
			&cli.StringFlag{Name: "loader", Value: string(ldso.LoaderNixOS), Usage: "the loader to simulate: `nixos|stock` (nixos: nixpkgs' glibc, which reads the resolution-cache note; stock: glibc as released)", Validator: oneOf(string(ldso.LoaderNixOS), string(ldso.LoaderStock))},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: the loader configuration and every need with the candidates tried"},
			&cli.BoolFlag{Name: "evidence", Usage: "also say, for each RUNPATH entry, which of FILE's own names it serves and by which string: DT_NEEDED, .note.dlopen, a whole dlopen name or a soname prefix (what brought it there, as the main job's --json evidence)"},
			&cli.BoolFlag{Name: "symbols", Usage: "also bind every undefined symbol as the loader would (an ldd -r that runs nothing): which library provides each symbol and version; exit 1 if one fails"},
			&cli.BoolFlag{Name: "bind-now", Usage: "with --symbols: bind functions at load, as LD_BIND_NOW and ldd -r do (a missing function then fails at load)"},
			&cli.StringFlag{Name: "stubs", Usage: "with --symbols: check the driver's libraries (libcuda.so.1…) against the toolkit's link-time stubs in `DIR` (default: not checked)"},
			&cli.StringFlag{Name: "proc", Value: "/proc", Usage: "procfs mount `DIR` of the machine a libcuda selector decides on"},
			&cli.StringFlag{Name: "sys", Value: "/sys", Usage: "sysfs mount `DIR` of the machine a libcuda selector decides on"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return withCode(exitUsage, fmt.Errorf("explain: want exactly one FILE"))
			}
			loader, err := ldso.ParseLoader(cmd.String("loader"))
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("explain: --loader: %w", err))
			}
			file, root := cmd.Args().First(), cmd.String("root")
			host, logical := file, file
			if root != "" {
				logical = insideRoot(root, file)
				host = filepath.Join(root, filepath.FromSlash(logical))
			}
			f, err := elfedit.Open(host)
			if err != nil {
				if p := openProblem(file, host, err); p != "" {
					return withCode(exitUsage, fmt.Errorf("explain: %s: %s", file, p))
				}
				return withCode(exitUsage, fmt.Errorf("explain: %s: %w", file, err))
			}
			g.noteInterrupted(file, f)
			in := f.Info()
			var evidence []entryEvidence
			if cmd.Bool("evidence") {
				evidence = runpathEvidence(f, root, logical)
			}
			f.Close()
			cfg, err := ldso.DefaultConfig(root, in.ELFClass(), in.ELFMachine())
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("explain: %w", err))
			}
			switch {
			case cmd.IsSet("ld-library-path"):
				cfg.LDLibraryPath = cmd.String("ld-library-path")
			case root == "":
				cfg.LDLibraryPath = g.getenv("LD_LIBRARY_PATH")
			}
			cfg.Secure = cmd.Bool("secure")
			cfg.WorkDir = cmd.String("workdir")
			cfg.Loader = loader
			tr, err := ldso.Resolve(cfg, ldso.ElfReaderDlopen(policy.DiscoverDlopen), logical)
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("explain: %w", err))
			}
			var sym *symcheck.Result
			if cmd.Bool("symbols") {
				if sym, err = symcheck.New(symbolOptions(cmd)).Check(cfg, tr); err != nil {
					return withCode(exitUsage, fmt.Errorf("explain: %w", err))
				}
			}
			takes := selectorChoices(tr, root, nvdriver.ReadMachine(cmd.String("proc"), cmd.String("sys")))
			if cmd.Bool("json") {
				err = g.writeJSON(struct {
					Config    ldso.Config      `json:"config"`
					Tree      *ldso.Tree       `json:"tree"`
					Symbols   *symcheck.Result `json:"symbols,omitempty"`
					Selectors []selectorChoice `json:"selectors,omitempty"`
					Evidence  []entryEvidence  `json:"runpath_evidence,omitempty"`
				}{cfg, tr, sym, takes, evidence})
			} else {
				err = tr.Format(g.stdout)
				if err == nil {
					writeRunpathEvidence(g.stdout, evidence)
				}
				for _, t := range takes {
					if err == nil {
						_, err = fmt.Fprintf(g.stdout, "%s is the libcuda selector of cuda_compat %s: on this machine it takes the %s: %s\n",
							printable.String(t.Path), t.Selector.CompatVersion, t.Takes.Use, t.Takes.Reason)
					}
				}
				if err == nil && sym != nil {
					err = sym.Format(g.stdout)
				}
			}
			if err != nil {
				return withCode(exitUsage, err)
			}
			if sym != nil {
				if vs, bs := sym.Failures(); len(vs)+len(bs) > 0 {
					return withCode(exitFindings, errReported)
				}
			}
			for _, n := range tr.Needs {
				if !n.Dlopen && (!n.Found() || n.Error != "") {
					return withCode(exitFindings, errReported)
				}
			}
			return nil
		},
	}
}

// insideRoot returns the logical path of file: its part below root when it
// lies there, else file itself taken as a path inside the root.
func insideRoot(root, file string) string {
	ar, err1 := filepath.Abs(root)
	af, err2 := filepath.Abs(file)
	if err1 == nil && err2 == nil {
		if rel, err := filepath.Rel(ar, af); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return "/" + filepath.ToSlash(rel)
		}
	}
	return "/" + strings.TrimPrefix(filepath.ToSlash(file), "/")
}

// symbolOptions: the driver's libraries are not read (they come with the
// machine), or read from the --stubs directory (libcuda.so.1, else
// libcuda.so).
func symbolOptions(cmd *cli.Command) symcheck.Options {
	stubs := cmd.String("stubs")
	return symcheck.Options{
		BindNow: cmd.Bool("bind-now"),
		Opaque:  policy.IsDriverLibrary,
		StandIn: func(name string) string {
			if stubs == "" {
				return ""
			}
			base := filepath.Base(name)
			if i := strings.Index(base, ".so"); i >= 0 {
				for _, c := range []string{base, base[:i+3]} {
					if p := filepath.Join(stubs, c); isFile(p) {
						return p
					}
				}
			}
			return ""
		},
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// selectorChoice is a libcuda selector a file's closure loads, and what it
// takes on the machine.
type selectorChoice struct {
	Path     string          `json:"path"`
	Selector *selector.Info  `json:"selector"`
	Takes    nvdriver.Choice `json:"takes"`
}

// selectorChoices lists the libcuda selectors among the libraries tr
// found, once each, with the choice each makes on machine m.
func selectorChoices(tr *ldso.Tree, root string, m nvdriver.Machine) []selectorChoice {
	var out []selectorChoice
	seen := map[string]bool{}
	for _, n := range tr.Needs {
		if n.Name != selector.Name || !n.Found() || seen[n.Path] {
			continue
		}
		seen[n.Path] = true
		info, err := selector.Read(filepath.Join(root, filepath.FromSlash(n.Path)))
		if err != nil {
			continue
		}
		out = append(out, selectorChoice{Path: n.Path, Selector: info, Takes: info.Choose(m)})
	}
	return out
}
