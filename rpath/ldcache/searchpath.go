package ldcache

import (
	"fmt"
	"strings"
)

// How glibc's loader reads a search path (DT_RUNPATH, DT_RPATH, a "?DIR"
// note element), as fillin_rpath and _dl_dst_substitute do: it splits the
// string at every ':' first, then expands the dynamic string tokens of
// each element. Neither step has an escape, so a directory whose name
// holds a ':' or a token cannot be named by any entry.

// DynamicTokens are the tokens the loader expands ($NAME or ${NAME}).
var DynamicTokens = []string{"ORIGIN", "PLATFORM", "LIB"}

// TokenLen is glibc's is_dst: the length of token ref at the start of s,
// the text just after a '$' ("NAME", ended by anything that cannot
// continue an identifier, or "{NAME}"), 0 when s does not start with it.
func TokenLen(s, ref string) int {
	if strings.HasPrefix(s, "{"+ref+"}") {
		return len(ref) + 2
	}
	if !strings.HasPrefix(s, ref) {
		return 0
	}
	if len(s) > len(ref) {
		c := s[len(ref)]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' {
			return 0
		}
	}
	return len(ref)
}

// DynamicToken is the first token of s the loader expands, as spelled in
// s ("$LIB", "${ORIGIN}"), or "".
func DynamicToken(s string) string {
	for i := strings.IndexByte(s, '$'); i >= 0; {
		for _, ref := range DynamicTokens {
			if n := TokenLen(s[i+1:], ref); n > 0 {
				return s[i : i+1+n]
			}
		}
		j := strings.IndexByte(s[i+1:], '$')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return ""
}

// WhySplit is why no entry can name a directory with a ':' in it.
const WhySplit = "the loader splits entries at ':'"

// Unnameable says why no search-path entry can name the directory dir
// (a path as the file system spells it), "" when it can be written as
// it is: a ':' in it ends the entry, a token in it is expanded.
func Unnameable(dir string) string {
	if strings.Contains(dir, ":") {
		return WhySplit
	}
	if tok := DynamicToken(dir); tok != "" {
		return fmt.Sprintf("the loader expands %q in it", tok)
	}
	return ""
}

// MisreadDir is a directory a search path seems to name that the loader
// reads otherwise: Entries are the consecutive entries (one, or several
// a ':' split) that spell it.
type MisreadDir struct {
	Dir     string
	Entries []string
	Why     string
}

// maxJoin bounds how many consecutive entries MisreadDirs joins.
const maxJoin = 4

// MisreadDirs lists the directories a search path's entries seem meant
// to name and the loader reads otherwise, where exists says one is
// there: an entry with a token other than a leading $ORIGIN, spelled as
// it is, and a run of up to four consecutive entries joined with ':'.
// exists is given the spelling, a leading $ORIGIN for it to expand.
func MisreadDirs(path string, exists func(dir string) bool) []MisreadDir {
	entries := strings.Split(path, ":")
	var out []MisreadDir
	for i, e := range entries {
		if why := Unnameable(OriginRest(e)); why != "" && exists(e) {
			out = append(out, MisreadDir{Dir: e, Entries: entries[i : i+1], Why: why})
		}
		for j := i + 2; j <= min(len(entries), i+maxJoin); j++ {
			d := strings.Join(entries[i:j], ":")
			if (strings.HasPrefix(d, "/") || OriginRest(d) != d) && exists(d) {
				out = append(out, MisreadDir{Dir: d, Entries: entries[i:j], Why: WhySplit})
			}
		}
	}
	return out
}

// OriginRest is e less a leading $ORIGIN or ${ORIGIN} token.
func OriginRest(e string) string {
	for _, p := range []string{"$ORIGIN", "${ORIGIN}"} {
		if strings.HasPrefix(e, p) && TokenLen(e[1:], "ORIGIN") == len(p)-1 {
			return e[len(p):]
		}
	}
	return e
}
