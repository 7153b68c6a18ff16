package ldcache

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// The note's identity, as nixpkgs' glibc patch and patchelf know it.
const (
	// Section is the name of the SHT_NOTE section that holds the note.
	Section = ".note.nixos.ldcache"
	// Owner is the note's n_name.
	Owner = "NixOS"
	// Type is the note's n_type.
	Type uint32 = 0x63a86cb6
)

// NoteID names the note for rpath/elfedit, which reads and writes notes
// without knowing what they mean.
var NoteID = elfedit.NoteID{Owner: Owner, Type: Type}

// Element is one element of a path list.
type Element struct {
	// Exact is set for "=FILE" (opened as is); clear for "?DIR" (searched
	// by the loader).
	Exact bool
	// Path is the file or directory, verbatim.
	Path string
}

func (e Element) String() string {
	if e.Exact {
		return "=" + e.Path
	}
	return "?" + e.Path
}

// MarshalText writes the element as it appears in the note.
func (e Element) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText reads an element as it appears in the note.
func (e *Element) UnmarshalText(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '=':
		*e = Element{Exact: true, Path: string(b[1:])}
	case len(b) > 0 && b[0] == '?':
		*e = Element{Path: string(b[1:])}
	default:
		return fmt.Errorf("%w: element %q is neither \"=FILE\" nor \"?DIR\"", ErrMalformed, b)
	}
	return nil
}

// Entry is the path list of one needed name.
type Entry struct {
	Name     string    `json:"name"`
	Elements []Element `json:"elements"`
}

// PathList is the entry's path list as written in the note.
func (e Entry) PathList() string {
	s := make([]string, len(e.Elements))
	for i, el := range e.Elements {
		s[i] = el.String()
	}
	return strings.Join(s, ":")
}

// Cache is a whole descriptor: entries sorted by name.
type Cache []Entry

// Lookup returns the entry of a needed name.
func (c Cache) Lookup(name string) (Entry, bool) {
	i := sort.Search(len(c), func(i int) bool { return c[i].Name >= name })
	if i < len(c) && c[i].Name == name {
		return c[i], true
	}
	return Entry{}, false
}

// Encode returns the descriptor bytes. Entries are written in the order
// given; Build returns them sorted, as the format requires.
func (c Cache) Encode() []byte {
	var b bytes.Buffer
	for _, e := range c {
		b.WriteString(e.Name)
		b.WriteByte(0)
		b.WriteString(e.PathList())
		b.WriteByte(0)
	}
	b.WriteByte(0)
	return b.Bytes()
}

// String renders the cache one entry a line, "NAME PATHLIST".
func (c Cache) String() string {
	var b strings.Builder
	for _, e := range c {
		fmt.Fprintf(&b, "%s %s\n", e.Name, e.PathList())
	}
	return b.String()
}

// Errors of Decode.
var (
	// ErrMalformed is wrapped by every Decode error.
	ErrMalformed = errors.New("malformed resolution cache")
)

// Decode parses a descriptor. It is strict about structure (every string
// terminated, every element "=" or "?", names sorted and unique, nothing
// but NUL padding after the terminating empty name) because a note that a
// loader reads differently from the way a linter reads it is worse than an
// error. A list with no elements is accepted (the loader falls back for
// that name).
func Decode(desc []byte) (Cache, error) {
	var c Cache
	off := 0
	next := func(what string) (string, error) {
		end := bytes.IndexByte(desc[off:], 0)
		if end < 0 {
			return "", fmt.Errorf("%w: %s at byte %d is not NUL-terminated", ErrMalformed, what, off)
		}
		s := string(desc[off : off+end])
		off += end + 1
		return s, nil
	}
	for {
		at := off
		name, err := next("name")
		if err != nil {
			return nil, err
		}
		if name == "" {
			break
		}
		if n := len(c); n > 0 && c[n-1].Name >= name {
			return nil, fmt.Errorf("%w: name %q at byte %d is not after %q (names must be sorted and unique)", ErrMalformed, name, at, c[n-1].Name)
		}
		list, err := next("path list of " + name)
		if err != nil {
			return nil, err
		}
		e := Entry{Name: name}
		if list != "" {
			for _, s := range strings.Split(list, ":") {
				switch {
				case strings.HasPrefix(s, "="):
					e.Elements = append(e.Elements, Element{Exact: true, Path: s[1:]})
				case strings.HasPrefix(s, "?"):
					e.Elements = append(e.Elements, Element{Path: s[1:]})
				default:
					return nil, fmt.Errorf("%w: element %q of %s is neither \"=FILE\" nor \"?DIR\"", ErrMalformed, s, name)
				}
			}
		}
		c = append(c, e)
	}
	if i := bytes.IndexFunc(desc[off:], func(r rune) bool { return r != 0 }); i >= 0 {
		return nil, fmt.Errorf("%w: %d bytes after the terminating empty name are not NUL padding", ErrMalformed, len(desc)-off)
	}
	return c, nil
}
