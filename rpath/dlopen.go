package rpath

import (
	"fmt"
	"slices"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// DlopenMode says what Patch does with the library names a file that
// calls dlopen holds in its read-only data (see DiscoverDlopen).
type DlopenMode string

const (
	// DlopenOff looks for none.
	DlopenOff DlopenMode = "off"
	// DlopenReport finds them and reports where each would resolve, but
	// changes no RUNPATH and no note for them.
	DlopenReport DlopenMode = "report"
	// DlopenResolve adds the directory of each one found, like a
	// DT_NEEDED's, after the DT_NEEDED and .note.dlopen directories, and
	// gives it an entry in the resolution note. One found nowhere is
	// reported, never an error. The main job's default: a dlopen by name
	// that no RUNPATH reaches fails at run time, after a green build
	// (libnvrtc's builtins, cuFFT's nvJitLink, cuDNN's sub-libraries),
	// while a name that resolves only adds a library the build inputs
	// already hold to the closure.
	DlopenResolve DlopenMode = "resolve"
)

// DlopenModes lists the modes, for flag help and validation.
var DlopenModes = []DlopenMode{DlopenOff, DlopenReport, DlopenResolve}

// dlopenSymbols are the functions that open a library by name at run time.
var dlopenSymbols = []string{"dlopen", "dlmopen"}

// maxDiscovered bounds the names taken from one file: beyond it the rest
// are dropped (a file naming hundreds of libraries is a plugin table, not
// a list of what it needs).
const maxDiscovered = 64

// DiscoverDlopen returns the library names a file may dlopen, as its
// read-only data spells them: nil unless the file imports dlopen or
// dlmopen, and nil for a file with a .note.dlopen, which says what it
// dlopens with authority (its authors' list; guessing past it would add
// to the closure what they left out). A name is a string constant that
// is exactly a soname (IsSonameShaped), so a soname inside a message, a
// path (the loader opens a path as is, whatever the RUNPATH), or a format
// such as "libfoo.so.%d" is not; the file's own SONAME and DT_NEEDED
// names are not new. Names come in file order, each once, at most
// maxDiscovered.
func DiscoverDlopen(f *elfedit.File) ([]string, error) {
	if notes, _ := f.DlopenNotes(); len(notes) > 0 {
		return nil, nil
	}
	ok, err := f.ImportsSymbol(dlopenSymbols...)
	if err != nil || !ok {
		return nil, err
	}
	known := map[string]bool{f.Soname(): true}
	for _, n := range f.Needed() {
		known[n] = true
	}
	var out []string
	err = f.ReadOnlyStrings([]byte(".so"), func(s []byte) bool {
		if !IsSonameShaped(s) || known[string(s)] {
			return true
		}
		name := string(s)
		known[name] = true
		out = append(out, name)
		return len(out) < maxDiscovered
	})
	if err != nil {
		return out, fmt.Errorf("reading library names: %w", err)
	}
	return out, nil
}

// IsSonameShaped reports whether s is a library file name as dlopen
// callers spell one: "lib", at least one character of [A-Za-z0-9_+-.],
// ".so", and any number of ".N" suffixes of decimal digits
// ("libnvrtc-builtins.so.11.8", "libstdc++.so.6", "libcudnn_graph.so.9").
// Anything with a '/', a space, a '%' or other punctuation is not: it is
// a path, a sentence or a format.
func IsSonameShaped(s []byte) bool {
	if len(s) < len("libx.so") || len(s) > 255 || string(s[:3]) != "lib" {
		return false
	}
	// The last ".so" followed only by version suffixes.
	i := len(s)
	for {
		j := lastIndex(s[:i], '.')
		if j < 0 {
			return false
		}
		if string(s[j:i]) == ".so" {
			i = j
			break
		}
		if j+1 == i || !allDigits(s[j+1:i]) {
			return false
		}
		i = j
	}
	name := s[3:i]
	return len(name) > 0 && !slices.ContainsFunc(name, func(c byte) bool { return !nameByte(c) })
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '+' || c == '.'
}

func allDigits(b []byte) bool {
	return !slices.ContainsFunc(b, func(c byte) bool { return c < '0' || c > '9' })
}

func lastIndex(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}
