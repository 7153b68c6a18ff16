package patch

import (
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// A file with several hard links is one file under several names. Debian's
// Mesa ships its DRI drivers as hard links to one library, all in one
// output and all needing the same RUNPATH: written once, in place, every
// name has it. When a name may lie outside the outputs (the file has more
// links than names found), or when two names would get different edits,
// writing it would change what it must not, and every name is refused.

// linkClaims are the files with several hard links that one of their
// names has claimed (job.claim): a second claim of the same file, by
// another name, would find it locked by the first.
type linkClaims struct {
	mu   sync.Mutex
	held map[[2]uint64]bool
}

// first reports whether the file has no claim yet, and if so counts the
// caller's.
func (l *linkClaims) first(id elfedit.Identity) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]uint64{id.Dev, id.Ino}
	if l.held[k] {
		return false
	}
	if l.held == nil {
		l.held = map[[2]uint64]bool{}
	}
	l.held[k] = true
	return true
}

// drop lets f's pending edit go unwritten: it gives back what its kept
// plan took and closes its claim, if any, so that f may be decided again
// (and another name of it claim it).
func (c *job) drop(f *fileWork) {
	claimed := f.pending.Claimed()
	c.kept.give(f.pending)
	f.pending.Close()
	f.pending = nil
	if claimed && f.ident.Links > 1 {
		c.links.mu.Lock()
		delete(c.links.held, [2]uint64{f.ident.Dev, f.ident.Ino})
		c.links.mu.Unlock()
	}
}

// hardLinks settles the decided files with several hard links. A file
// whose names in the report are as many as its links, and which all get
// the same edit, is written once under its first name, which takes the
// claim; the other names are SameFileAs it. Otherwise each name that
// would be written (every name, when their edits differ) fails with
// ErrorHardLinks, before anything is written.
func (c *job) hardLinks(files []*fileWork) {
	type key struct{ dev, ino uint64 }
	groups := map[key][]*fileWork{}
	var keys []key
	for _, f := range files {
		if f == nil || f.ident.Links < 2 {
			continue
		}
		k := key{f.ident.Dev, f.ident.Ino}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], f)
	}
	for _, k := range keys {
		names := groups[k]
		if !slices.ContainsFunc(names, func(f *fileWork) bool { return f.Changed }) {
			continue // nothing to write
		}
		all, err := linksProblem(names)
		if err != nil {
			for _, f := range names {
				if f.Changed || all {
					f.addError(ErrorHardLinks, err)
				}
				c.drop(f)
			}
			continue
		}
		first := names[0]
		for _, f := range names[1:] {
			if f.pending.Claimed() {
				if err := first.pending.ClaimFrom(f.pending); err != nil {
					first.addError(ErrorClaim, err)
				}
				first.claimedAs = f.Path
			}
			c.drop(f)
			f.SameFileAs = first.Path
			first.aliases = append(first.aliases, f)
		}
	}
}

// linksProblem says why the names of one file, found in the outputs,
// cannot be written as one; all says the error is every name's.
func linksProblem(names []*fileWork) (all bool, err error) {
	links := names[0].ident.Links
	for _, f := range names[1:] {
		if f.ident.Links != links {
			return true, fmt.Errorf("%w: its link count went from %d to %d while the outputs were read", elfedit.ErrHardLinks, links, f.ident.Links)
		}
	}
	if found := uint64(len(names)); found < links {
		if found == 1 {
			return false, &elfedit.HardLinkError{Links: links}
		}
		return false, fmt.Errorf("%w (%d links, %d of them in the outputs): refusing to change the others too", elfedit.ErrHardLinks, links, found)
	}
	for _, f := range names[1:] {
		if !reflect.DeepEqual(f.edit, names[0].edit) {
			return true, fmt.Errorf("%w (%d links, all in the outputs) whose names would get different edits (%s): one file cannot hold both", elfedit.ErrHardLinks, links, editDiff(names[0], f))
		}
	}
	return false, nil
}

// editDiff says how the edits of two names of one file differ.
func editDiff(a, b *fileWork) string {
	switch {
	case a.RunPath != b.RunPath:
		return fmt.Sprintf("RUNPATH %q for %s, %q for %s", a.RunPath, a.Path, b.RunPath, b.Path)
	case a.Interpreter != b.Interpreter:
		return fmt.Sprintf("interpreter %q for %s, %q for %s", a.Interpreter, a.Path, b.Interpreter, b.Path)
	case a.Note != b.Note || !reflect.DeepEqual(a.ResolutionCache, b.ResolutionCache):
		return fmt.Sprintf("resolution notes for %s and %s", a.Path, b.Path)
	}
	return fmt.Sprintf("the edits of %s and %s", a.Path, b.Path)
}

// otherLinks are the names of f's file that EditFile checks besides the
// one its claim was taken under.
func (c *job) otherLinks(f *fileWork) []elfedit.Link {
	if len(f.aliases) == 0 {
		return nil
	}
	claimed := f.Path
	if f.claimedAs != "" {
		claimed = f.claimedAs
	}
	var out []elfedit.Link
	for _, n := range append([]*fileWork{f}, f.aliases...) {
		if n.Path != claimed {
			out = append(out, elfedit.Link{Dir: c.dirOf(n.Path), Path: n.Path})
		}
	}
	return out
}
