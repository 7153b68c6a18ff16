package patchelf

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// resolutionCache does what patchelf does to the resolution note
// (.note.nixos.ldcache) of a file whose other changes are in e: an edit of
// the search path or of DT_NEEDED drops a note that no longer holds
// (--remove-rpath, and --shrink-rpath of a file without one, always do),
// and --build-resolution-cache writes one for the file as it will be, with
// patchelf's messages and its rule that a note already there is either up
// to date or an error. The note is computed by rpath/ldcache with
// cudapatch's rules for the driver link and stub directories.
func resolutionCache(f *elfedit.File, o *patchelfOpts, e *elfedit.Edit, stderr io.Writer, debugf func(string, ...any)) error {
	e.Derived = append(e.Derived, ldcache.NoteID)
	_, hasOld := f.RunPath()
	if !hasOld {
		_, hasOld = f.RPath()
	}
	if o.removeRPath || o.shrinkRPath && !hasOld {
		e.RemoveNotes = append(e.RemoveNotes, ldcache.NoteID)
	}
	if !o.buildCache {
		return nil
	}
	warn := func(why string) {
		fmt.Fprintf(stderr, "warning: --build-resolution-cache: %s; no cache written\n", why)
	}
	errPresent := pfErr("--build-resolution-cache: a resolution cache note is already present; rebuild from an unpatched binary")
	old, present := existingCache(f)
	// The note goes when this invocation changes what it describes; then a
	// fresh one is built as if there had been none.
	if present && (len(e.RemoveNotes) > 0 || derivedChanges(f, e)) {
		present = false
	}
	if !f.IsDynamic() {
		if present {
			return errPresent
		}
		warn("no dynamic section (statically linked?)")
		return nil
	}
	cache, outcome := ldcache.Build(e.NeededAfter(f.Needed()), searchPathAfter(f, e), ldcache.OS{},
		policy.ResolutionRules(policy.DefaultDriverLink, policy.DefaultDriverLink32))
	switch outcome {
	case ldcache.NothingToResolve:
		if present {
			return errPresent
		}
		warn("no DT_NEEDED entries or run path to resolve")
		return nil
	case ldcache.NothingResolved:
		if present {
			return errPresent
		}
		warn("no libraries resolved against the run path")
		return nil
	}
	for _, en := range cache {
		debugf("resolved %s to %s", en.Name, en.PathList())
	}
	desc := cache.Encode()
	if present {
		if !bytes.Equal(old, desc) {
			return errPresent
		}
		debugf("resolution cache already up to date")
		return nil
	}
	e.SetNote = &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: desc}
	return nil
}

// existingCache finds a resolution note the way patchelf does, by its
// section's name (a section objcopy added counts, whatever it holds), or
// by a note with the note's owner and type. desc is nil when the section
// holds no well-formed note.
func existingCache(f *elfedit.File) (desc []byte, present bool) {
	notes, _ := f.Notes()
	for _, n := range notes {
		if n.NoteID == ldcache.NoteID {
			return n.Desc, true
		}
	}
	for _, s := range f.Sections {
		if s.Name == ldcache.Section {
			return nil, true
		}
	}
	return nil, false
}

// derivedChanges reports whether the edit changes the search path or
// DT_NEEDED, after which patchelf drops the note.
func derivedChanges(f *elfedit.File, e *elfedit.Edit) bool {
	if e.RemovePath {
		_, run := f.RunPath()
		_, rp := f.RPath()
		return run || rp
	}
	if e.SetPath != nil {
		old, ok := f.RunPath()
		if !ok {
			old, ok = f.RPath()
		}
		if !ok || old != *e.SetPath {
			return true
		}
	}
	return !slices.Equal(f.Needed(), e.NeededAfter(f.Needed()))
}

// searchPathAfter is the search path the loader reads after the edit:
// DT_RUNPATH, else DT_RPATH.
func searchPathAfter(f *elfedit.File, e *elfedit.Edit) string {
	switch {
	case e.RemovePath:
		return ""
	case e.SetPath != nil:
		return *e.SetPath
	}
	if p, ok := f.RunPath(); ok {
		return p
	}
	p, _ := f.RPath()
	return p
}
