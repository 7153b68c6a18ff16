package elfedit

import (
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PathTag says which dynamic tag carries a search path that is set.
type PathTag int

const (
	// TagRunPath writes DT_RUNPATH; an existing DT_RPATH is retagged (a
	// one-word change) or dropped, so the result has DT_RUNPATH only. This is
	// what patchelf --set-rpath does, and what Nix wants: DT_RUNPATH applies
	// to the file's own dependencies only and comes after LD_LIBRARY_PATH.
	TagRunPath PathTag = iota
	// TagKeep sets the value in the tag the file already has (DT_RPATH stays
	// DT_RPATH); DT_RUNPATH when it has neither.
	TagKeep
	// TagRPath writes DT_RPATH only (patchelf --force-rpath). DT_RPATH is
	// inherited by everything the file loads and outranks LD_LIBRARY_PATH.
	TagRPath
)

func (t PathTag) String() string {
	switch t {
	case TagRunPath:
		return "runpath"
	case TagKeep:
		return "keep"
	case TagRPath:
		return "rpath"
	}
	return fmt.Sprintf("PathTag(%d)", int(t))
}

// Replace renames one DT_NEEDED entry.
type Replace struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Edit lists the changes to make to one file. The zero Edit changes nothing.
// All changes of one Edit are laid out together, so a file is rewritten
// once however many of them there are.
type Edit struct {
	// SetPath sets the library search path (DT_RUNPATH or DT_RPATH, see Tag).
	SetPath *string `json:"set_path,omitempty"`
	// EmptyEntries lets SetPath hold empty entries (a leading, trailing
	// or doubled ':'), which glibc reads as the current directory. They
	// are refused unless the caller says it asked for them: the drop-in
	// patchelf does, because patchelf writes the path it is given.
	EmptyEntries bool `json:"empty_entries,omitempty"`
	// RemovePath removes DT_RUNPATH and DT_RPATH.
	RemovePath bool `json:"remove_path,omitempty"`
	// Tag chooses the tag of a path that is set.
	Tag PathTag `json:"tag"`

	Interpreter *string `json:"interpreter,omitempty"`
	Soname      *string `json:"soname,omitempty"`

	// AddNeeded adds DT_NEEDED entries in front of the existing ones (as
	// patchelf --add-needed does); names already needed are not added twice.
	AddNeeded     []string  `json:"add_needed,omitempty"`
	RemoveNeeded  []string  `json:"remove_needed,omitempty"`
	ReplaceNeeded []Replace `json:"replace_needed,omitempty"`

	// SetNote writes this note, loaded (in a PT_NOTE inside a PT_LOAD)
	// and, when the file has section headers, described by a SHT_NOTE,
	// SHF_ALLOC section named SetNote.Section. It replaces every note with
	// the same NoteID, loaded or not, or adds one; it is a no-op when an
	// identical loaded note is already the only one with that id.
	SetNote *Note `json:"set_note,omitempty"`
	// RemoveNotes removes every note with one of these ids, loaded or not,
	// and zeroes its bytes.
	RemoveNotes []NoteID `json:"remove_notes,omitempty"`
	// Derived names notes whose content is derived from DT_NEEDED,
	// DT_RUNPATH/DT_RPATH and the interpreter (a loader's resolution
	// cache): they are removed, and their bytes zeroed, whenever the edit
	// changes any of those, unless SetNote writes a fresh one in the same
	// edit. An edit that changes none of them leaves them alone.
	Derived []NoteID `json:"derived,omitempty"`

	// AddDebug adds a DT_DEBUG entry when there is none (patchelf
	// --add-debug-tag): debuggers find the loader's link map through it,
	// and linkers give it to executables only.
	AddDebug bool `json:"add_debug,omitempty"`
	// NoDefaultLib sets DF_1_NODEFLIB in DT_FLAGS_1, adding the entry when
	// there is none (patchelf --no-default-lib): the loader then skips the
	// default directories for this object's dependencies.
	NoDefaultLib bool `json:"no_default_lib,omitempty"`
	// RenameSymbols renames dynamic symbols, old name to new (patchelf
	// --rename-dynamic-symbols): .dynstr gets the new names, .dynsym and
	// the hash tables are rewritten into the region (rename.go).
	RenameSymbols map[string]string `json:"rename_symbols,omitempty"`

	// The edits below change fixed-size fields in place, each with one
	// write (header.go); an Edit holding one of them holds nothing else.

	// OSABI sets EI_OSABI of the ELF header (patchelf --set-os-abi).
	OSABI *elf.OSABI `json:"osabi,omitempty"`
	// ExecStack sets (true) or clears (false) PF_X of PT_GNU_STACK
	// (patchelf --set-execstack, --clear-execstack).
	ExecStack *bool `json:"exec_stack,omitempty"`
	// ClearSymbolVersion sets the .gnu.version entry of every dynamic
	// symbol with one of these names to 1, unversioned global (patchelf
	// --clear-symbol-version).
	ClearSymbolVersion []string `json:"clear_symbol_version,omitempty"`
}

// fieldEdit reports whether the edit asks for one of the in-place field
// changes of header.go.
func (e *Edit) fieldEdit() bool {
	return e.OSABI != nil || e.ExecStack != nil || len(e.ClearSymbolVersion) > 0
}

// IsZero reports whether the edit asks for nothing.
func (e *Edit) IsZero() bool {
	return e.SetPath == nil && !e.RemovePath && e.Interpreter == nil &&
		e.Soname == nil && len(e.AddNeeded) == 0 && len(e.RemoveNeeded) == 0 && len(e.ReplaceNeeded) == 0 &&
		e.SetNote == nil && len(e.RemoveNotes) == 0 && !e.AddDebug && !e.NoDefaultLib && len(e.RenameSymbols) == 0 && !e.fieldEdit()
}

// Validate rejects edits no loader could use: strings with NUL bytes, empty
// names, and search paths with an empty entry, which glibc takes for the
// current directory (unless EmptyEntries says they were asked for).
func (e *Edit) Validate() error {
	var errs []error
	str := func(what, s string, allowEmpty bool) {
		if strings.IndexByte(s, 0) >= 0 {
			errs = append(errs, fmt.Errorf("%s %q contains a NUL byte", what, s))
		}
		if s == "" && !allowEmpty {
			errs = append(errs, fmt.Errorf("%s is empty", what))
		}
	}
	if e.SetPath != nil {
		p := *e.SetPath
		str("search path", p, true)
		if p != "" && !e.EmptyEntries {
			for _, d := range strings.Split(p, ":") {
				if d == "" {
					errs = append(errs, fmt.Errorf("search path %q has an empty entry (the loader would search the current directory)", p))
					break
				}
			}
		}
		if e.RemovePath {
			errs = append(errs, errors.New("search path both set and removed"))
		}
	}
	if e.Interpreter != nil {
		str("interpreter", *e.Interpreter, false)
	}
	if e.Soname != nil {
		str("soname", *e.Soname, false)
	}
	for _, n := range e.AddNeeded {
		str("needed name", n, false)
	}
	for _, r := range e.ReplaceNeeded {
		str("needed name", r.New, false)
	}
	for from, to := range e.RenameSymbols {
		str("symbol name", from, false)
		str("symbol name", to, false)
	}
	if n := e.SetNote; n != nil {
		str("note owner", n.Owner, true)
		str("note section name", n.Section, true)
		if uint64(len(n.Desc)) > maxNoteSegment {
			errs = append(errs, fmt.Errorf("note descriptor of %d bytes is too large", len(n.Desc)))
		}
		if slices.Contains(e.RemoveNotes, n.NoteID) {
			errs = append(errs, fmt.Errorf("note %q type 0x%x both set and removed", n.Owner, n.Type))
		}
	}
	for _, id := range e.RemoveNotes {
		str("note owner", id.Owner, true)
	}
	if e.fieldEdit() {
		n := 0
		for _, on := range []bool{e.OSABI != nil, e.ExecStack != nil, len(e.ClearSymbolVersion) > 0} {
			if on {
				n++
			}
		}
		rest := *e
		rest.OSABI, rest.ExecStack, rest.ClearSymbolVersion = nil, nil, nil
		if n > 1 || !rest.IsZero() {
			errs = append(errs, errors.New("OSABI, ExecStack and ClearSymbolVersion each go in an edit of their own"))
		}
	}
	if e.Tag < TagRunPath || e.Tag > TagRPath {
		errs = append(errs, fmt.Errorf("unknown path tag %d", e.Tag))
	}
	return errors.Join(errs...)
}

// NeededAfter returns the DT_NEEDED list the edit makes of needed, as the
// planner makes it: RemoveNeeded first, then each ReplaceNeeded in order,
// then AddNeeded's names not already there, in front, in the order given.
// The final check compares the result with it, and a caller can tell
// from it whether the edit changes the list at all.
func (e *Edit) NeededAfter(needed []string) []string {
	out := slices.DeleteFunc(slices.Clone(needed), func(n string) bool { return slices.Contains(e.RemoveNeeded, n) })
	for _, r := range e.ReplaceNeeded {
		for i := range out {
			if out[i] == r.Old {
				out[i] = r.New
			}
		}
	}
	var add []string
	for _, n := range e.AddNeeded {
		if !slices.Contains(out, n) && !slices.Contains(add, n) {
			add = append(add, n)
		}
	}
	return append(add, out...)
}
