package ldso

import (
	"bytes"
	"path"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// Loader names the loader being simulated: which search steps exist.
type Loader string

// The loaders.
const (
	// LoaderNixOS is nixpkgs' glibc, patched (ldcache.patch) to read the
	// requesting object's resolution-cache note after LD_LIBRARY_PATH and
	// before DT_RUNPATH. It is the default: the loader of every program
	// built by nixpkgs.
	LoaderNixOS Loader = "nixos"
	// LoaderStock is glibc as released: the note is an inert ELF note.
	LoaderStock Loader = "stock"
)

// ParseLoader reads a loader name ("" is the default, LoaderNixOS).
func ParseLoader(s string) (Loader, error) {
	switch Loader(s) {
	case "", LoaderNixOS:
		return LoaderNixOS, nil
	case LoaderStock:
		return LoaderStock, nil
	}
	return "", &loaderError{s}
}

type loaderError struct{ name string }

func (e *loaderError) Error() string {
	return "unknown loader " + `"` + e.name + `"` + " (want nixos or stock)"
}

// Note is an object's resolution-cache note (.note.nixos.ldcache), as the
// Reader found it.
type Note struct {
	// Loaded is set when a PT_NOTE segment covers the note. The loader
	// finds notes through the program headers only: a note section that
	// no PT_NOTE maps (objcopy --add-section makes those) is never read,
	// although Nix's reference scan still sees the store paths in it.
	Loaded bool
	// Desc is the raw descriptor (n_descsz bytes). The simulation walks it
	// as the patched loader does, which is more lenient than
	// ldcache.Decode: names need not be sorted, and a bad pair is only
	// noticed when a lookup reaches it.
	Desc []byte
	// Cache is Desc decoded by ldcache.Decode, nil when Err is set.
	Cache ldcache.Cache
	// Err is ldcache.Decode's error: the note is malformed.
	Err error
}

// NewNote decodes desc into a Note.
func NewNote(desc []byte, loaded bool) *Note {
	c, err := ldcache.Decode(desc)
	return &Note{Loaded: loaded, Desc: desc, Cache: c, Err: err}
}

// Ignored says why the patched loader never reads the note at all ("" when
// it does): NoteUnloaded or NoteRejected.
func (n *Note) Ignored() string {
	d := n.Desc
	switch {
	case !n.Loaded:
		return NoteUnloaded
	case len(d) <= 2 || d[len(d)-2] != 0 || d[len(d)-1] != 0:
		return NoteRejected
	}
	return ""
}

// Why a requester's note did not decide where a library came from
// (Need.Note). Empty when the object has no note, when the note found the
// library, when an earlier step (DT_RPATH, LD_LIBRARY_PATH) found it
// first, and under LoaderStock.
const (
	// NoteUnloaded: the note is not in a PT_NOTE; the loader never sees
	// it.
	NoteUnloaded = "note not loaded: no PT_NOTE covers it"
	// NoteRejected: the loader refuses the whole note: its descriptor is
	// at most two bytes or does not end with two NULs.
	NoteRejected = "note rejected: descriptor does not end with an empty name"
	// NoteDisabled: a lookup met a name with an empty path list; the
	// loader stops trusting the note for this and every later lookup.
	NoteDisabled = "note disabled: a name with an empty path list"
	// NoteNoEntry: the note has no entry for the name.
	NoteNoEntry = "no entry in the note"
	// NoteFailed: the note has an entry, but no element of it gave a
	// loadable file.
	NoteFailed = "every note element failed"
)

// noteList is _dl_lookup_nixos_cache: the raw path list of name in l's
// note, or why there is none. The walk follows the patched loader: it
// takes the first pair whose name matches, and a pair with an empty path
// list met on the way disables l's note for good.
func (r *resolver) noteList(l *loaded, name string) (string, string) {
	nt := l.obj.Note
	if nt == nil {
		return "", ""
	}
	if why := nt.Ignored(); why != "" {
		return "", why
	}
	d := nt.Desc
	if l.noteDead {
		return "", NoteDisabled
	}
	// The two final NULs keep every string below inside d; the checks
	// only guard the simulation against a Desc that breaks that.
	cstr := func(off int) (string, int) {
		i := bytes.IndexByte(d[off:], 0)
		if i < 0 {
			return "", -1
		}
		return string(d[off : off+i]), off + i + 1
	}
	for off := 0; off < len(d) && d[off] != 0; {
		ename, next := cstr(off)
		if next < 0 || next >= len(d) || d[next] == 0 {
			l.noteDead = true
			return "", NoteDisabled
		}
		list, after := cstr(next)
		if after < 0 {
			l.noteDead = true
			return "", NoteDisabled
		}
		if ename == name {
			return list, ""
		}
		off = after
	}
	return "", NoteNoEntry
}

// searchNote tries loader's note for n, as the patched _dl_map_object does
// after LD_LIBRARY_PATH: each ':'-separated element in order, "=FILE"
// opened as is (a missing file or one of the wrong class or machine moves
// on to the next element), "?DIR" searched like one DT_RUNPATH entry
// ($ORIGIN, $LIB and $PLATFORM expanded, glibc-hwcaps subdirectories
// first). Other elements are skipped. When nothing is found the search
// goes on with DT_RUNPATH.
func (r *resolver) searchNote(loader *loaded, n *Need) *candidate {
	if r.cfg.Loader == LoaderStock {
		return nil
	}
	list, why := r.noteList(loader, n.Name)
	if why != "" {
		n.Note = why
		return nil
	}
	if loader.obj.Note == nil {
		return nil
	}
	for _, el := range strings.Split(list, ":") {
		var c *candidate
		switch {
		case strings.HasPrefix(el, "?"):
			dirs := r.expandPath(loader, el[1:], ":")
			c = r.openPathAs(n, StepNote, loader.path, el, dirs)
		case strings.HasPrefix(el, "="):
			c = r.try(n, Attempt{Step: StepNote, Owner: loader.path, Element: el, Dir: path.Dir(el[1:]), Path: el[1:]})
		}
		if c != nil || n.Error != "" {
			return c
		}
	}
	n.Note = NoteFailed
	return nil
}
