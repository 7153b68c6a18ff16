package doctor

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/internal/confine"
)

// The driver-link fix: a directory of symbolic links, one per driver
// library of this machine (never a link to the whole system library
// directory, whose libc would then shadow the program's own), and a
// systemd-tmpfiles configuration that makes the same links at every boot,
// as /run is a tmpfs. PlanFix says what to do; Apply does it. Both are
// idempotent: once applied, the plan is empty. Nothing that cudapatch did
// not write is overwritten: the configuration file starts with a marker
// line, and the links cudapatch manages are the ones that file lists.

// TmpfilesConf is the systemd-tmpfiles configuration the fix writes.
const TmpfilesConf = "/etc/tmpfiles.d/cudapatch-driver-link.conf"

// Marker is the first line of TmpfilesConf as cudapatch writes it. A file
// at that path without it is someone else's and is left alone.
const Marker = "# Written by cudapatch doctor --fix: the NVIDIA driver link for Nix-built programs."

// Step operations.
const (
	OpMkdir   = "mkdir"   // make the driver link directory
	OpSymlink = "symlink" // make a symbolic link where nothing is
	OpReplace = "replace" // repoint a symbolic link the fix made before
	OpRemove  = "remove"  // remove a symbolic link the fix made that is no longer wanted
	OpWrite   = "write"   // write TmpfilesConf
)

// Step is one change the fix makes.
type Step struct {
	Op      string `json:"op"`
	Path    string `json:"path"`
	Target  string `json:"target,omitempty"`
	Content string `json:"content,omitempty"`
}

// Shell is the step as shell commands that do exactly the same.
func (s Step) Shell() []string {
	switch s.Op {
	case OpMkdir:
		return []string{"mkdir -p " + s.Path}
	case OpSymlink:
		return []string{"ln -s " + s.Target + " " + s.Path}
	case OpReplace:
		return []string{"ln -sfn " + s.Target + " " + s.Path}
	case OpRemove:
		return []string{"rm " + s.Path}
	case OpWrite:
		out := []string{"mkdir -p " + path.Dir(s.Path), "cat > " + s.Path + " <<'EOF'"}
		out = append(out, strings.Split(strings.TrimSuffix(s.Content, "\n"), "\n")...)
		return append(out, "EOF")
	}
	return nil
}

// Plan is the driver-link fix for one machine.
type Plan struct {
	// Source is the directory of the driver libraries linked; "" when
	// the machine has none to link.
	Source string `json:"source,omitempty"`
	// Libraries are the names linked.
	Libraries []string `json:"libraries,omitempty"`
	// Steps are the changes, in order; none when all is as the fix makes
	// it.
	Steps []Step `json:"steps"`
	// Conflicts are what stops the fix: files it did not write where it
	// would write.
	Conflicts []string `json:"conflicts,omitempty"`
}

// planFix computes the plan from the diagnosis so far.
func (d *doctor) planFix() *Plan {
	p := &Plan{Source: d.rep.DriverSource, Steps: []Step{}}
	if p.Source == "" {
		return p
	}
	link := d.sys.DriverLink
	// NixOS's /run/opengl-driver is a symbolic link into the store, made by
	// the system; nothing on the way to the link may be one.
	for q := link; q != "/" && q != "."; q = path.Dir(q) {
		if st, err := os.Lstat(d.host(q)); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			p.Conflicts = append(p.Conflicts, q+" is a symbolic link (on NixOS the system makes it)")
			return p
		}
	}
	for _, n := range d.driverLibsIn(p.Source) {
		if d.native(path.Join(p.Source, n)) {
			p.Libraries = append(p.Libraries, n)
		}
	}
	managed, err := d.managedLinks()
	if err != nil {
		p.Conflicts = append(p.Conflicts, err.Error())
	}
	switch st, err := os.Lstat(d.host(link)); {
	case errors.Is(err, fs.ErrNotExist):
		p.Steps = append(p.Steps, Step{Op: OpMkdir, Path: link})
	case err != nil:
		p.Conflicts = append(p.Conflicts, err.Error())
	case !st.IsDir():
		p.Conflicts = append(p.Conflicts, link+" exists and is not a directory")
	}
	wanted := map[string]bool{}
	for _, n := range p.Libraries {
		lp, target := path.Join(link, n), path.Join(p.Source, n)
		wanted[lp] = true
		st, err := os.Lstat(d.host(lp))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			p.Steps = append(p.Steps, Step{Op: OpSymlink, Path: lp, Target: target})
		case err != nil:
			p.Conflicts = append(p.Conflicts, err.Error())
		case st.Mode()&fs.ModeSymlink == 0:
			p.Conflicts = append(p.Conflicts, lp+" is a file cudapatch did not make")
		default:
			t, _ := os.Readlink(d.host(lp))
			switch {
			case t == target:
			case managed[lp] != "":
				p.Steps = append(p.Steps, Step{Op: OpReplace, Path: lp, Target: target})
			default:
				p.Conflicts = append(p.Conflicts, fmt.Sprintf("%s is a symbolic link to %s that cudapatch did not make", lp, t))
			}
		}
	}
	var stale []string
	for lp := range managed {
		if st, err := os.Lstat(d.host(lp)); !wanted[lp] && err == nil && st.Mode()&fs.ModeSymlink != 0 {
			stale = append(stale, lp)
		}
	}
	sort.Strings(stale)
	for _, lp := range stale {
		p.Steps = append(p.Steps, Step{Op: OpRemove, Path: lp})
	}
	conf := tmpfilesContent(link, p.Source, p.Libraries)
	if old, err := os.ReadFile(d.host(TmpfilesConf)); err != nil || !bytes.Equal(old, []byte(conf)) {
		p.Steps = append(p.Steps, Step{Op: OpWrite, Path: TmpfilesConf, Content: conf})
	}
	return p
}

// tmpfilesContent is TmpfilesConf for the links from link into source.
func tmpfilesContent(link, source string, libs []string) string {
	var b strings.Builder
	b.WriteString(Marker + "\n")
	b.WriteString("# /run is a tmpfs: systemd-tmpfiles makes the links again at every boot.\n")
	b.WriteString("# cudapatch doctor --fix rewrites this file; delete it (and " + link + ") to undo.\n")
	fmt.Fprintf(&b, "d %s 0755 root root -\n", link)
	for _, n := range libs {
		fmt.Fprintf(&b, "L+ %s - - - - %s\n", path.Join(link, n), path.Join(source, n))
	}
	return b.String()
}

// managedLinks reads the links the fix made before from TmpfilesConf:
// link path to target. A file there without the marker is an error.
func (d *doctor) managedLinks() (map[string]string, error) {
	out := map[string]string{}
	b, err := os.ReadFile(d.host(TmpfilesConf))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return out, nil
	case err != nil:
		return out, err
	case !bytes.HasPrefix(b, []byte(Marker+"\n")):
		return out, fmt.Errorf("%s exists and cudapatch did not write it (no %q first line)", TmpfilesConf, Marker)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 7 && f[0] == "L+" {
			out[f[1]] = f[6]
		}
	}
	return out, nil
}

// Apply makes the changes of a plan on the system (under sys.Root). A plan
// with conflicts is refused. Links are made before the configuration that
// lists them is written, so a failure halfway leaves nothing the next plan
// would not own or repair. Under a root, every path is opened from the
// root's descriptor without following a symbolic link (confine.Dir): an
// etc/tmpfiles.d or a run/ that is a link out of the root fails, and
// nothing is written outside it.
func Apply(sys System, p *Plan) error {
	if len(p.Conflicts) > 0 {
		return fmt.Errorf("refusing to overwrite what cudapatch did not write: %s", strings.Join(p.Conflicts, "; "))
	}
	fsys := hostFS()
	if sys.Root != "" {
		d, err := confine.Open(sys.Root)
		if err != nil {
			return err
		}
		defer d.Close()
		fsys = rootFS(d)
	}
	host := func(q string) string {
		if sys.Root == "" {
			return q
		}
		return filepath.Join(sys.Root, filepath.FromSlash(q))
	}
	for _, s := range p.Steps {
		h := host(s.Path)
		var err error
		switch s.Op {
		case OpMkdir:
			err = fsys.mkdirAll(h)
		case OpSymlink:
			err = fsys.symlink(s.Target, h)
		case OpReplace:
			// A new link renamed over the old one: the path never lacks a
			// link.
			tmp := h + ".cudapatch-new"
			_ = fsys.remove(tmp)
			if err = fsys.symlink(s.Target, tmp); err == nil {
				err = fsys.rename(tmp, h)
			}
		case OpRemove:
			var link bool
			if link, err = fsys.isLink(h); err == nil && link {
				err = fsys.remove(h)
			}
		case OpWrite:
			err = writeConf(fsys, h, s.Content)
		default:
			err = fmt.Errorf("unknown step %q", s.Op)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", s.Op, s.Path, err)
		}
	}
	return nil
}

// fixFS is what Apply does to files: by path on the host, or below a
// root without following links.
type fixFS struct {
	mkdirAll func(p string) error
	symlink  func(target, p string) error
	rename   func(from, to string) error
	remove   func(p string) error
	isLink   func(p string) (bool, error)
	readFile func(p string) ([]byte, error)
	create   func(p string) (*os.File, error)
}

func hostFS() fixFS {
	return fixFS{
		mkdirAll: func(p string) error { return os.MkdirAll(p, 0o755) },
		symlink:  os.Symlink,
		rename:   os.Rename,
		remove:   os.Remove,
		isLink: func(p string) (bool, error) {
			st, err := os.Lstat(p)
			return err == nil && st.Mode()&fs.ModeSymlink != 0, err
		},
		readFile: os.ReadFile,
		create: func(p string) (*os.File, error) {
			return os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		},
	}
}

func rootFS(d *confine.Dir) fixFS {
	return fixFS{
		mkdirAll: func(p string) error { return d.MkdirAll(p, 0o755) },
		symlink:  d.Symlink,
		rename:   d.Rename,
		remove:   d.Remove,
		isLink: func(p string) (bool, error) {
			st, err := d.Lstat(p)
			return err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK, err
		},
		readFile: d.ReadFile,
		create:   func(p string) (*os.File, error) { return d.Create(p, 0o600) },
	}
}

// writeConf writes the tmpfiles configuration through a temporary file
// renamed over it, checking again that it is cudapatch's to overwrite.
func writeConf(fsys fixFS, h, content string) error {
	if old, err := fsys.readFile(h); err == nil && !bytes.HasPrefix(old, []byte(Marker+"\n")) {
		return errors.New("exists and cudapatch did not write it")
	}
	if err := fsys.mkdirAll(filepath.Dir(h)); err != nil {
		return err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(h), ".cudapatch-driver-link-"+hex.EncodeToString(b[:]))
	f, err := fsys.create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.rename(tmp, h)
	}
	if err != nil {
		fsys.remove(tmp)
	}
	return err
}
