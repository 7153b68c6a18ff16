package policy

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// DlopenMode says what the main job does with the library names a file that
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
// a list of what it needs). maxPrefixes bounds its prefixes likewise.
const (
	maxDiscovered = 64
	maxPrefixes   = 16
)

// LoaderFunctions are the functions of libraries other than libc that
// open a library by name for their caller, by the library that defines
// them (its soname up to ".so"): the dlopen call is made there, and
// glibc searches that library's RUNPATH, not the RUNPATH of the file
// that holds the name.
var LoaderFunctions = map[string]string{
	"g_module_open":      "libgmodule-2.0",
	"g_module_open_full": "libgmodule-2.0",
	"lt_dlopen":          "libltdl",
	"lt_dlopenext":       "libltdl",
	"lt_dlopenadvise":    "libltdl",
}

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
	d, err := Discover(f, false)
	return d.Names, err
}

// Discovered is what Discover found in one file.
type Discovered struct {
	Names []string
	// Prefixes are the string constants that are a soname prefix
	// (IsSonamePrefix), for names the file builds at run time
	// ("libnvrtc.so." + a major version), in file order, each once, at
	// most maxPrefixes.
	Prefixes []string
	Imports  bool // the file imports dlopen or dlmopen: it may be a caller
	Noted    bool // the file has a .note.dlopen: no discovery, and no caller
	// Loader is a function of LoaderFunctions the file imports, when it
	// does not import dlopen (the first in sorted order): the call is
	// made by the library defining it.
	Loader string
}

// Discover is DiscoverDlopen, with the prefixes and what the file
// imports; with anyFile it reads the names of a file that does not
// import dlopen too (a file that hands them to a dlopen caller among its
// dependencies, see dlopenCallers).
func Discover(f *elfedit.File, anyFile bool) (Discovered, error) {
	if notes, _ := f.DlopenNotes(); len(notes) > 0 {
		return Discovered{Noted: true}, nil
	}
	// One scan of the string table for dlopen's names and the loaders'.
	fns := slices.Sorted(maps.Keys(LoaderFunctions))
	imported, err := f.ImportedSymbols(slices.Concat(dlopenSymbols, fns)...)
	if err != nil {
		return Discovered{}, err
	}
	d := Discovered{Imports: slices.Contains(imported[:len(dlopenSymbols)], true)}
	if !d.Imports {
		// The first loader function, in sorted order, that f imports.
		if i := slices.Index(imported[len(dlopenSymbols):], true); i >= 0 {
			d.Loader = fns[i]
		}
		if !anyFile {
			return d, nil
		}
	}
	known := map[string]bool{f.Soname(): true}
	for _, n := range f.Needed() {
		known[n] = true
	}
	err = f.ReadOnlyStrings([]byte("lib"), func(s []byte) bool {
		if known[string(s)] {
			return true
		}
		switch {
		case IsSonameShaped(s) && len(d.Names) < maxDiscovered:
			d.Names = append(d.Names, string(s))
		case IsSonamePrefix(s) && len(d.Prefixes) < maxPrefixes:
			d.Prefixes = append(d.Prefixes, string(s))
		default:
			return true
		}
		known[string(s)] = true
		return len(d.Names) < maxDiscovered || len(d.Prefixes) < maxPrefixes
	})
	if err != nil {
		return d, fmt.Errorf("reading library names: %w", err)
	}
	return d, nil
}

// IsSonamePrefix reports whether s is the start of the sonames a caller
// builds at run time, as it holds it: "lib", a stem of [A-Za-z0-9_+-.],
// then ".so." (the caller appends a version: "libnvrtc.so." + "13"), or
// a stem of at least three characters, one a letter, without a '.', then
// '_' or '-' (the caller appends a part and a version: "libcudnn_" +
// "graph.so.9", "libnvrtc-" + "builtins.so.13"). A bare "lib", "libc_"
// or "libfoo." is not one: it would match libraries the caller never
// asks for.
func IsSonamePrefix(s []byte) bool {
	if len(s) < len("libx_") || len(s) > 255 || string(s[:3]) != "lib" ||
		slices.ContainsFunc(s, func(c byte) bool { return !nameByte(c) }) {
		return false
	}
	if stem, ok := bytes.CutSuffix(s[3:], []byte(".so.")); ok {
		return len(stem) > 0 && stem[len(stem)-1] != '.'
	}
	last := s[len(s)-1]
	if last != '_' && last != '-' {
		return false
	}
	stem := s[3 : len(s)-1]
	letter := slices.ContainsFunc(stem, func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' })
	end := stem[len(stem)-1]
	return len(stem) >= 3 && letter && !slices.Contains(stem, '.') && end != '_' && end != '-'
}

// MatchesPrefix reports whether the library file name file is one a
// caller holding prefix (IsSonamePrefix) builds: for "libX.so.", the
// name and a version (IsVersionOf); for "libX_" or "libX-", a longer
// soname-shaped name that starts with it.
func MatchesPrefix(file, prefix string) bool {
	if strings.HasSuffix(prefix, ".so.") {
		return IsVersionOf(file, prefix)
	}
	return len(file) > len(prefix) && strings.HasPrefix(file, prefix) && IsSonameShaped([]byte(file))
}

// Unversioned returns "libX.so." for a name "libX.so" with no version
// suffix, the prefix of the versioned files a caller that appends its
// major version at run time opens ("libcudnn_graph.so" +".9"); "" for
// any other name.
func Unversioned(name string) string {
	if strings.HasSuffix(name, ".so") && IsSonameShaped([]byte(name)) {
		return name + "."
	}
	return ""
}

// IsVersionOf reports whether file is prefix (see Unversioned) followed
// by one or more dot-separated decimal numbers ("libX.so." + "9.1.0").
func IsVersionOf(file, prefix string) bool {
	rest, ok := strings.CutPrefix(file, prefix)
	if !ok || rest == "" {
		return false
	}
	for _, p := range strings.Split(rest, ".") {
		if p == "" || !allDigits([]byte(p)) {
			return false
		}
	}
	return true
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

// Served is one library of a directory that a file's own strings name.
type Served struct {
	Evidence
	Library string `json:"library"` // the file name in the directory
}

// KindNeeded is the Served kind of a DT_NEEDED name.
const KindNeeded = "needed"

// Serves says which of a directory's library file names (libs) the file
// at path names itself, and how: a DT_NEEDED (KindNeeded), a .note.dlopen
// alternative, a whole dlopen name (or that name with a version, for one
// without), a library a prefix matches. It is what explain shows for
// each RUNPATH entry; an entry nothing of the file serves holds a name
// another file hands it, or nothing it uses. It reads no file.
func Serves(path string, needed []string, notes [][]string, d Discovered, libs []string) []Served {
	var out []Served
	add := func(kind, s, lib string) {
		out = append(out, Served{Evidence{File: path, String: s, Kind: kind}, lib})
	}
	for _, lib := range libs {
		switch {
		case slices.Contains(needed, lib):
			add(KindNeeded, lib, lib)
		case slices.ContainsFunc(notes, func(alts []string) bool { return slices.Contains(alts, lib) }):
			add(EvidenceNote, lib, lib)
		case slices.Contains(d.Names, lib):
			add(EvidenceWhole, lib, lib)
		default:
			if i := slices.IndexFunc(d.Names, func(n string) bool { p := Unversioned(n); return p != "" && IsVersionOf(lib, p) }); i >= 0 {
				add(EvidenceWhole, d.Names[i], lib)
			} else if i := slices.IndexFunc(d.Prefixes, func(p string) bool { return MatchesPrefix(lib, p) }); i >= 0 {
				add(EvidencePrefix, d.Prefixes[i], lib)
			}
		}
	}
	return out
}
