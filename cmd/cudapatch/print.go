package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/policy"
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
				Path string        `json:"path"`
				Info *elfedit.Info `json:"info,omitempty"`
				// DlopenStrings are the library names the main job's
				// --dlopen finds in the file's read-only data.
				DlopenStrings []string `json:"dlopen_strings,omitempty"`
				// DlopenPrefixes are the soname prefixes it finds there,
				// for names built at run time (policy.IsSonamePrefix).
				DlopenPrefixes []string     `json:"dlopen_prefixes,omitempty"`
				LDCache        *ldcacheView `json:"ldcache,omitempty"`
				Error          string       `json:"error,omitempty"`
			}
			var out []entry
			failed := false
			var bufs elfedit.Buffers
			for _, path := range files {
				f, err := bufs.Open(path)
				if err != nil {
					failed = true
					msg := err.Error()
					if p := openProblem(path, path, err); p != "" {
						msg = p
					}
					out = append(out, entry{Path: path, Error: msg})
					continue
				}
				g.noteInterrupted(path, f)
				in := f.Info()
				lc := readLDCache(f)
				d, err := policy.Discover(f, false)
				f.Close()
				if err != nil {
					failed = true
					out = append(out, entry{Path: path, Error: err.Error()})
					continue
				}
				out = append(out, entry{Path: path, Info: &in, DlopenStrings: d.Names, DlopenPrefixes: d.Prefixes, LDCache: lc})
			}
			if cmd.Bool("json") {
				if err := g.writeJSON(out); err != nil {
					return withCode(exitUsage, err)
				}
			} else {
				for _, e := range out {
					if e.Error != "" {
						printable.Fprintf(g.stderr, "cudapatch: %s: %s\n", e.Path, e.Error)
						continue
					}
					writeInfo(g.stdout, e.Path, e.Info)
					for _, n := range e.DlopenStrings {
						printable.Fprintf(g.stdout, "  dlopen-str:  %s\n", n)
					}
					for _, n := range e.DlopenPrefixes {
						printable.Fprintf(g.stdout, "  dlopen-pfx:  %s\n", n)
					}
					writeLDCache(g.stdout, e.LDCache)
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
	printable.Fprintf(w, "%s:\n", path)
	printable.Fprintf(w, "  kind:        %s (%s %s %s, %s, %s)\n", in.Kind, in.Class, in.Data, in.Machine, in.OSABI, in.Type)
	if in.Interpreter != "" {
		printable.Fprintf(w, "  interpreter: %s\n", in.Interpreter)
	}
	if in.Soname != "" {
		printable.Fprintf(w, "  soname:      %s\n", in.Soname)
	}
	for _, n := range in.Needed {
		printable.Fprintf(w, "  needed:      %s\n", n)
	}
	if in.RunPath != nil {
		printable.Fprintf(w, "  runpath:     %s\n", *in.RunPath)
	}
	if in.RPath != nil {
		printable.Fprintf(w, "  rpath:       %s\n", *in.RPath)
	}
	if in.Flags1 != 0 {
		printable.Fprintf(w, "  flags_1:     0x%x\n", in.Flags1)
	}
	for _, d := range in.Dlopen {
		printable.Fprintf(w, "  dlopen:      %s", strings.Join(d.Soname, " | "))
		if d.Feature != "" {
			printable.Fprintf(w, " (feature %s, %s)", d.Feature, d.Priority)
		}
		fmt.Fprintln(w)
	}
}

// ldcacheView is the resolution-cache note (.note.nixos.ldcache) as print
// shows it: where it is, whether the patched loader reads it, and its
// decoded entries.
type ldcacheView struct {
	Section string `json:"section,omitempty"`
	// Loaded: a PT_NOTE covers it; the loader reads nothing else.
	Loaded bool  `json:"loaded"`
	Offset int64 `json:"offset"`
	// DescSize is n_descsz.
	DescSize int `json:"desc_size"`
	// Entries are the decoded entries; absent when Error is set.
	Entries ldcache.Cache `json:"entries,omitempty"`
	// Error is why the descriptor does not decode.
	Error string `json:"error,omitempty"`
	// Ignored is why nixpkgs' loader never reads the note ("" if it does).
	Ignored string `json:"ignored,omitempty"`
	// Raw is the descriptor, when it does not decode.
	Raw string `json:"raw,omitempty"`
	// ReadError is set when the notes cannot be read at all.
	ReadError string `json:"read_error,omitempty"`
}

// readLDCache reads f's resolution-cache note; nil when it has none.
func readLDCache(f *elfedit.File) *ldcacheView {
	n, ok, err := f.Note(elfedit.NoteID{Owner: ldcache.Owner, Type: ldcache.Type})
	if !ok {
		if err != nil {
			return &ldcacheView{ReadError: err.Error()}
		}
		return nil
	}
	nt := ldso.NewNote(n.Desc, n.Loaded)
	v := &ldcacheView{Section: n.Section, Loaded: n.Loaded, Offset: n.Off, DescSize: len(n.Desc), Entries: nt.Cache, Ignored: nt.Ignored()}
	if nt.Err != nil {
		v.Error = nt.Err.Error()
		v.Raw = string(n.Desc)
	}
	return v
}

func writeLDCache(w io.Writer, v *ldcacheView) {
	switch {
	case v == nil:
		return
	case v.ReadError != "":
		printable.Fprintf(w, "  ldcache:     unreadable notes: %s\n", v.ReadError)
		return
	}
	where := v.Section
	if where == "" {
		where = "note"
	}
	printable.Fprintf(w, "  ldcache:     %s at 0x%x, %d bytes", where, v.Offset, v.DescSize)
	if v.Ignored != "" {
		printable.Fprintf(w, ", IGNORED by the loader: %s", v.Ignored)
	}
	if v.Error != "" {
		printable.Fprintf(w, ", MALFORMED: %s\n", v.Error)
		fmt.Fprintf(w, "    raw %q\n", v.Raw) // %q escapes
		return
	}
	fmt.Fprintln(w)
	width := 0
	for _, e := range v.Entries {
		width = max(width, len(e.Name))
	}
	for _, e := range v.Entries {
		list := e.PathList()
		if len(e.Elements) == 0 {
			list = "(empty: the loader stops trusting the note here)"
		}
		printable.Fprintf(w, "    %-*s %s\n", width, e.Name, list)
	}
}
