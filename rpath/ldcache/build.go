package ldcache

import (
	"slices"
	"strings"
	"syscall"
)

// Prober answers the questions Build asks of the file system, as
// patchelf asks them: is a search path entry a directory it can search
// (stat follows links, S_ISDIR, access X_OK), is DIR/NAME readable (access
// R_OK), and does DIR/glibc-hwcaps exist (access F_OK).
type Prober interface {
	SearchableDir(path string) bool
	Readable(path string) bool
	Exists(path string) bool
}

// OS probes the real file system.
type OS struct{}

// SearchableDir reports whether path stats as a directory and
// access(path, X_OK) == 0.
func (OS) SearchableDir(path string) bool { return SearchableDir(path) }

// Readable reports access(path, R_OK) == 0.
func (OS) Readable(path string) bool { return syscall.Access(path, 4) == nil }

// Exists reports access(path, F_OK) == 0.
func (OS) Exists(path string) bool { return syscall.Access(path, 0) == nil }

// SearchableDir reports whether path, links followed, is a directory the
// caller may search (access X_OK), patchelf's test of a search path entry
// it resolves names in.
func SearchableDir(path string) bool {
	var st syscall.Stat_t
	return syscall.Stat(path, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && syscall.Access(path, 1) == nil
}

// Rules change patchelf's generic rule where it would be wrong. The zero
// Rules is patchelf's rule exactly.
type Rules struct {
	// RunTimeOnly lists absolute directories that exist only at run time,
	// such as the NVIDIA driver link (/run/opengl-driver/lib). They are
	// never probed: every name gets a "?DIR" element there, in RUNPATH
	// order, as for $ORIGIN. Probing one at build time would bake the
	// build machine's driver into the package (outside a sandbox), or drop
	// the directory from the note altogether (inside one).
	RunTimeOnly []string
	// Restricted reports names that may only be found at run time: no "="
	// element after the first RunTimeOnly directory of the RUNPATH (the
	// cuda_compat directory comes before the driver link and still gets
	// its "=" element), and none at all when the RUNPATH has no such
	// directory. The NVIDIA driver's libraries must match the running
	// kernel module, so no store path, stub or host copy may stand in for
	// them.
	Restricted func(name string) bool
	// Excluded reports directories that never give an element, "=" or
	// "?": stub directories, whose libcuda fails at run time with
	// CUDA_ERROR_STUB_LIBRARY.
	Excluded func(dir string) bool
}

// Outcome says why Build produced no cache; the patchelf front end prints
// patchelf's warning for each.
type Outcome int

const (
	// Built: the cache has at least one entry.
	Built Outcome = iota
	// NothingToResolve: no DT_NEEDED name or an empty search path.
	NothingToResolve
	// NothingResolved: no name got an element.
	NothingResolved
)

// SplitPath splits a search path as patchelf does: every ':' ends an
// entry, so "a::b" has an empty entry and ":a" starts with one, but a
// trailing ':' adds none.
func SplitPath(s string) []string {
	var parts []string
	for {
		i := strings.IndexByte(s, ':')
		if i < 0 {
			break
		}
		parts = append(parts, s[:i])
		s = s[i+1:]
	}
	if s != "" {
		parts = append(parts, s)
	}
	return parts
}

// splitKeepTrailing is SplitPath, but a trailing ':' ends one more, empty,
// entry: the loader searches the current directory there, and the note
// keeps that position (patchelf 0.19.1's keepTrailingEmpty, NixOS/patchelf
// #659). An empty path has no entry.
func splitKeepTrailing(s string) []string {
	parts := SplitPath(s)
	if strings.HasSuffix(s, ":") {
		parts = append(parts, "")
	}
	return parts
}

// Build computes the cache of a file whose DT_NEEDED names are needed and
// whose search path (DT_RUNPATH, else DT_RPATH) is path. Names with a '/'
// are opened as they are by the loader and get no entry; a name with a
// ':' gets "?DIR" elements only (patchelf writes "=DIR/NAME", which the
// loader opens as the file DIR/ + the name up to the ':'). A name listed
// twice in DT_NEEDED gets its elements twice, as patchelf writes them.
//
// Every entry the loader may search at run time keeps its position, as
// patchelf 0.19.1 writes it (NixOS/patchelf #658, #659): an empty entry
// (trailing ones included), a relative one, one with a dynamic string
// token, one with a glibc-hwcaps subdirectory, and an absolute one that
// is not a directory build time can search (missing, a plain file, not
// searchable) give every name a "?" element there, so no later "="
// element can overtake it.
func Build(needed []string, path string, fs Prober, r Rules) (Cache, Outcome) {
	dirs := splitKeepTrailing(path)
	if len(needed) == 0 || len(dirs) == 0 {
		return nil, NothingToResolve
	}
	lists := map[string][]Element{}
	searched := func(n string) bool { return !strings.Contains(n, "/") }
	pastRunTime := false
	for _, dir := range dirs {
		if r.Excluded != nil && r.Excluded(dir) {
			continue
		}
		runTime := slices.Contains(r.RunTimeOnly, dir)
		hint := runTime || dir == "" || dir[0] != '/' || strings.Contains(dir, "$") ||
			!fs.SearchableDir(dir) || fs.Exists(dir+"/glibc-hwcaps")
		for _, n := range needed {
			if !searched(n) {
				continue
			}
			// The loader splits a path list at every ':': a name with
			// one cannot end an "=" element, and is searched for in
			// DIR instead.
			if hint || strings.Contains(n, ":") {
				lists[n] = append(lists[n], Element{Path: dir})
				continue
			}
			if r.Restricted != nil && r.Restricted(n) && (pastRunTime || !hasRunTimeDir(dirs, r.RunTimeOnly)) {
				continue
			}
			if p := dir + "/" + n; fs.Readable(p) {
				lists[n] = append(lists[n], Element{Exact: true, Path: p})
			}
		}
		pastRunTime = pastRunTime || runTime
	}
	if len(lists) == 0 {
		return nil, NothingResolved
	}
	c := make(Cache, 0, len(lists))
	for n, els := range lists {
		c = append(c, Entry{Name: n, Elements: els})
	}
	slices.SortFunc(c, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return c, Built
}

func hasRunTimeDir(dirs, runTime []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return slices.Contains(runTime, d) })
}
