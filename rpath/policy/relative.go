package policy

import (
	"path/filepath"
	"strings"
)

// isOrigin says whether a RUNPATH entry is relative to the file's own
// directory. auto-patchelf tests for the substring "$ORIGIN"; the loader
// also expands "${ORIGIN}", so cudapatch keeps those entries too.
func isOrigin(e string) bool {
	return strings.Contains(e, "$ORIGIN") || strings.Contains(e, "${ORIGIN}")
}

// under says whether the clean absolute path p is dir or below it, by path
// components, as Python's PurePath.is_relative_to does.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// realPath is Python's Path.resolve() (strict=False): symbolic links
// resolved where the path exists, the rest taken as written.
func realPath(links Links, p string) string {
	p = filepath.Clean(p)
	if r, err := links.EvalSymlinks(p); err == nil {
		return r
	}
	parent, base := filepath.Dir(p), filepath.Base(p)
	if parent == p {
		return p
	}
	return filepath.Join(realPath(links, parent), base)
}

// expandOrigin replaces $ORIGIN and ${ORIGIN} with the directory of file.
func expandOrigin(file, e string) string {
	dir := filepath.Dir(file)
	e = strings.ReplaceAll(e, "${ORIGIN}", dir)
	return strings.ReplaceAll(e, "$ORIGIN", dir)
}

// sameDirOrigin returns the first old $ORIGIN entry of file that names the
// same directory as dir once links are resolved, or "": with
// Config.PreserveOrigin a dependency found through its old relative entry
// keeps that entry instead of an absolute path (auto-patchelf's
// find_first_matching_rpath_with_origin).
func sameDirOrigin(links Links, file, dir string, old []string) string {
	want := realPath(links, dir)
	for _, e := range old {
		if isOrigin(e) && realPath(links, expandOrigin(file, e)) == want {
			return e
		}
	}
	return ""
}

// relativeWithin returns the directory whose entries become relative for
// one file, or "" when none do: the store with Config.RelativeStore (when
// the file is in it), else the file's root with Config.RelativizeRoot.
func (c *Config) relativeWithin(path, root string) string {
	if c.RelativeStore != "" && under(filepath.Clean(path), c.RelativeStore) {
		return c.RelativeStore
	}
	if c.RelativizeRoot {
		return filepath.Clean(root)
	}
	return ""
}

// relativeEntry rewrites entry relative to the directory of file when it is
// an absolute path under within, as auto-patchelf's
// relativize_rpath_to_origin does: lexically, from the file's directory as
// found ("$ORIGIN" alone for the file's own directory). Other entries are
// returned as they are.
//
// cudapatch goes one step further: the loader takes $ORIGIN of an
// executable from /proc/self/exe, with every link resolved, so when the
// file's directory is reached through a symbolic link and the lexical
// result does not lead from the real directory to the entry, the entry is
// made relative to the real directory instead.
func relativeEntry(links Links, file, entry, within string) string {
	if isOrigin(entry) || !filepath.IsAbs(entry) {
		return entry
	}
	clean := filepath.Clean(entry)
	if !under(clean, within) {
		return entry
	}
	dir := filepath.Dir(file)
	rel, err := filepath.Rel(dir, clean)
	if err != nil {
		return entry
	}
	if real, err := links.EvalSymlinks(dir); err == nil && real != dir && !links.SameDir(filepath.Join(real, rel), clean) {
		if target, err := links.EvalSymlinks(clean); err == nil {
			if r, err := filepath.Rel(real, target); err == nil {
				rel = r
			}
		}
	}
	if rel == "." {
		return "$ORIGIN"
	}
	return "$ORIGIN/" + rel
}
