package main

import (
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// entryEvidence is what of a file's own names one entry of its RUNPATH
// serves (policy.Serves).
type entryEvidence struct {
	Entry  string          `json:"entry"`
	Serves []policy.Served `json:"serves"`
}

// runpathEvidence lists, for each entry of f's RUNPATH (else RPATH), the
// libraries there that f names itself and by which string: logical is
// f's path inside root ("" for none), $ORIGIN taken as its directory.
func runpathEvidence(f *elfedit.File, root, logical string) []entryEvidence {
	in := f.Info()
	rp := in.RunPath
	if rp == nil {
		rp = in.RPath
	}
	if rp == nil {
		return nil
	}
	d, _ := policy.Discover(f, true)
	var notes [][]string
	for _, n := range in.Dlopen {
		notes = append(notes, n.Soname)
	}
	var out []entryEvidence
	for _, e := range strings.Split(*rp, ":") {
		if e == "" {
			continue
		}
		dir := strings.NewReplacer("${ORIGIN}", path.Dir(logical), "$ORIGIN", path.Dir(logical)).Replace(e)
		var libs []string
		if ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir))); err == nil {
			for _, x := range ents {
				libs = append(libs, x.Name())
			}
		}
		out = append(out, entryEvidence{Entry: e, Serves: policy.Serves(logical, in.Needed, notes, d, libs)})
	}
	return out
}

// writeRunpathEvidence writes runpathEvidence as explain shows it.
func writeRunpathEvidence(w io.Writer, ev []entryEvidence) {
	if len(ev) == 0 {
		return
	}
	printable.Fprintf(w, "RUNPATH entries, and what of this file's own names each serves:\n")
	for _, e := range ev {
		var s []string
		for _, x := range e.Serves {
			if x.Kind == policy.KindNeeded {
				s = append(s, x.Library+" (needed)")
			} else {
				s = append(s, x.Library+" (dlopen "+x.Kind+" \""+x.String+"\")")
			}
		}
		if len(s) == 0 {
			s = []string{"nothing this file names (a name another file hands it, the driver, or unused)"}
		}
		printable.Fprintf(w, "  %s: %s\n", e.Entry, strings.Join(s, ", "))
	}
}
