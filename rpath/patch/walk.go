package patch

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/cudapatch/cudapatch/internal/confine"
)

// A run starts by listing its trees: every file below the PATHs to patch,
// and every directory below them for the index. walkTree lists a tree
// once, for both, directories on up to jobs goroutines at a time (the
// walk comes before any job has work, so a serial one leaves every other
// core idle), and gives both lists in the order filepath.WalkDir visits
// them.

// walkTree returns the regular and special files (special) below root and the directories
// (root first), each in filepath.WalkDir's lexical pre-order, without
// following symbolic links; with recurse false only root's own entries are
// listed. Each directory is opened from root's descriptor (confine.Dir),
// so one swapped for a link while the tree is listed fails to open
// instead of listing where it points. The first error in that order (a
// directory that cannot be read) is returned, as WalkDir would stop at it.
func walkTree(ctx context.Context, root *confine.Dir, jobs int, recurse bool) (files, dirs []string, err error) {
	t := &treeWalk{ctx: ctx, root: root, recurse: recurse, slots: make(chan struct{}, max(jobs, 1))}
	top := &dirNode{path: root.Path()}
	t.wg.Add(1)
	t.list(top, true)
	t.wg.Wait()
	err = top.emit(&files, &dirs)
	return files, dirs, err
}

// special reports whether a directory entry of type t is a FIFO, socket
// or device: listed with the files, so that the main job counts it as
// skipped, and never opened.
func special(t fs.FileMode) bool {
	return t&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice) != 0
}

type treeWalk struct {
	ctx     context.Context
	root    *confine.Dir
	recurse bool
	slots   chan struct{} // bounds the directories read at once
	wg      sync.WaitGroup
}

// dirNode is a listed directory: its entries, sorted by name, and the
// nodes of the subdirectories among them (by entry index).
type dirNode struct {
	path string
	ents []fs.DirEntry
	kids map[int]*dirNode
	err  error
}

// list reads n and starts listing its subdirectories. A goroutine waiting
// for a slot holds none, so the recursion cannot deadlock.
func (t *treeWalk) list(n *dirNode, top bool) {
	defer t.wg.Done()
	if n.err = t.ctx.Err(); n.err != nil {
		return
	}
	t.slots <- struct{}{}
	n.ents, n.err = t.root.ReadDir(n.path)
	<-t.slots
	if n.err != nil || !t.recurse && !top {
		return
	}
	for i, e := range n.ents {
		if !e.IsDir() || !t.recurse {
			continue
		}
		if n.kids == nil {
			n.kids = map[int]*dirNode{}
		}
		k := &dirNode{path: filepath.Join(n.path, e.Name())}
		n.kids[i] = k
		t.wg.Add(1)
		go t.list(k, false)
	}
}

// emit appends n's directories and regular files, depth first.
func (n *dirNode) emit(files, dirs *[]string) error {
	*dirs = append(*dirs, n.path)
	if n.err != nil {
		return n.err
	}
	for i, e := range n.ents {
		if k := n.kids[i]; k != nil {
			if err := k.emit(files, dirs); err != nil {
				return err
			}
			continue
		}
		if e.Type().IsRegular() || special(e.Type()) {
			*files = append(*files, filepath.Join(n.path, e.Name()))
		}
	}
	return nil
}
