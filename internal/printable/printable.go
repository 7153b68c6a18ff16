// Package printable escapes the text a file or a tree supplies (paths,
// library names, search paths, section names) before it goes into
// line-oriented output. DT_NEEDED names, RUNPATHs and file names may hold
// any byte but NUL and '/': a newline in one breaks a report that is read
// line by line, and an escape sequence reaches the terminal of whoever
// looks at a hostile file. readelf escapes them too; the loader, the
// resolver and the edits keep the raw bytes, so escaping happens here, at
// the point of output and nowhere else.
package printable

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with control characters (C0, DEL) and invalid UTF-8
// escaped as Go writes them in a quoted string ("\n", "\x1b", "\xff").
// Printable text, quotes and backslashes included, is left as it is, so
// the common case costs one scan and no allocation.
func String(s string) string {
	if !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case needsEscape(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needsEscape reports a rune String escapes. ContainsFunc decodes invalid
// UTF-8 as RuneError; a valid U+FFFD is printed as it is by String.
func needsEscape(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }

// Fprintf is fmt.Fprintf with every string and error argument escaped
// with String; the format itself is the program's and is written as is.
func Fprintf(w io.Writer, format string, args ...any) (int, error) {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = String(v)
		case error:
			args[i] = String(v.Error())
		}
	}
	return fmt.Fprintf(w, format, args...)
}
