package patch

import (
	"bytes"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// What happened to a file's resolution note (File.Note).
const (
	NoteWritten = "written" // a new or changed note is written with the RUNPATH
	NoteKept    = "kept"    // the file already has the right note
	NoteRemoved = "removed" // an old note no longer agrees with the file and is removed
)

// resolutionRules are the rules of this run's notes: its driver links.
func (c *job) resolutionRules() ldcache.Rules {
	return c.driverLibs.Rules([]string{c.DriverLink, c.DriverLink32})
}

// resolutionNote decides the resolution note of a file whose search path
// will be final and whose DT_NEEDED names are needed, and adds it to the
// edit, so that it is written in the same plan, and so the same commit, as
// the RUNPATH it describes. Whatever else happens, the edit lists the note
// as derived: a plan that changes the RUNPATH, DT_NEEDED or the
// interpreter without writing a fresh note drops the old one, never leaves
// it disagreeing with the file.
//
// A search path that fails the audit (an entry under the build directory,
// a relative entry: only possible in a path cudapatch keeps, never in one
// it writes) gets no note: its elements would inherit the fault.
func (c *job) resolutionNote(f *elfedit.File, needed []string, final string, e *elfedit.Edit) (ldcache.Cache, string, error) {
	e.Derived = append(e.Derived, ldcache.NoteID)
	old, hasOld, err := f.Note(ldcache.NoteID)
	if err != nil {
		return nil, "", err
	}
	cache, _ := ldcache.Build(needed, final, ldcache.OS{}, c.resolutionRules())
	if e.SetPath != nil && e.Tag == elfedit.TagRPath {
		// The loader reads the note after the DT_RPATH walk, which has
		// already searched every directory the note would name.
		cache = nil
	}
	for _, d := range ldcache.SplitPath(final) {
		if c.Audit(d) != "" {
			cache = nil
			break
		}
	}
	var desc []byte
	if cache != nil {
		desc = cache.Encode()
	}
	same := hasOld && old.Loaded && cache != nil && bytes.Equal(old.Desc, desc)
	switch {
	case cache != nil && (c.noteCache || same):
		e.SetNote = &elfedit.Note{NoteID: ldcache.NoteID, Section: ldcache.Section, Desc: desc}
		if same {
			return cache, NoteKept, nil
		}
		return cache, NoteWritten, nil
	case hasOld:
		e.RemoveNotes = append(e.RemoveNotes, ldcache.NoteID)
		return nil, NoteRemoved, nil
	}
	return nil, "", nil
}

// finalPath is the search path a file has after the edit: the one it sets,
// else the DT_RUNPATH, else the DT_RPATH it keeps.
func finalPath(info elfedit.Info, e *elfedit.Edit) string {
	switch {
	case e.SetPath != nil:
		return *e.SetPath
	case e.RemovePath:
		return ""
	case info.RunPath != nil:
		return *info.RunPath
	case info.RPath != nil:
		return *info.RPath
	}
	return ""
}
