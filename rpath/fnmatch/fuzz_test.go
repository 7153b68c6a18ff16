package fnmatch_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// translate is the slow reference: a line-by-line port of CPython's
// fnmatch.translate, working on strings as Python does, that writes a Go
// regexp instead of a Python one. Python's class syntax is written back into
// Go's by pyClassToGo, so the edge cases come from Python's own string
// handling, not from the package's item list.
func translate(pattern string) string {
	pat := []rune(pattern)
	n := len(pat)
	var res strings.Builder
	for i := 0; i < n; {
		c := pat[i]
		i++
		switch c {
		case '*':
			res.WriteString(".*")
			continue
		case '?':
			res.WriteString(".")
			continue
		case '[':
			j := i
			if j < n && pat[j] == '!' {
				j++
			}
			if j < n && pat[j] == ']' {
				j++
			}
			for j < n && pat[j] != ']' {
				j++
			}
			if j >= n {
				break // literal '['
			}
			var stuff string
			if !slices.Contains(pat[i:j], '-') {
				stuff = strings.ReplaceAll(string(pat[i:j]), `\`, `\\`)
			} else {
				var chunks []string
				k := i + 1
				if pat[i] == '!' {
					k = i + 2
				}
				for {
					k = find(pat, '-', k, j)
					if k < 0 {
						break
					}
					chunks = append(chunks, string(pat[i:k]))
					i = k + 1
					k += 3
				}
				if chunk := string(pat[i:j]); chunk != "" {
					chunks = append(chunks, chunk)
				} else {
					chunks[len(chunks)-1] += "-"
				}
				for k := len(chunks) - 1; k > 0; k-- {
					a, b := []rune(chunks[k-1]), []rune(chunks[k])
					if a[len(a)-1] > b[0] {
						chunks[k-1] = string(a[:len(a)-1]) + string(b[1:])
						chunks = slices.Delete(chunks, k, k+1)
					}
				}
				for k, s := range chunks {
					s = strings.ReplaceAll(s, `\`, `\\`)
					chunks[k] = strings.ReplaceAll(s, `-`, `\-`)
				}
				stuff = strings.Join(chunks, "-")
			}
			stuff = setOps.ReplaceAllString(stuff, `\$1`)
			i = j + 1
			switch {
			case stuff == "":
				res.WriteString(`[^\x00-\x{10FFFF}]`) // Python writes (?!)
			case stuff == "!":
				res.WriteString(".")
			case stuff[0] == '!':
				res.WriteString("[^" + pyClassToGo(stuff[1:]) + "]")
			default:
				res.WriteString("[" + pyClassToGo(stuff) + "]")
			}
			continue
		}
		res.WriteString(regexp.QuoteMeta(string(c)))
	}
	return `^(?s:` + res.String() + `)\z`
}

// setOps finds the characters translate escapes so that re does not read
// "&&", "~~" or "||" as set operations.
var setOps = regexp.MustCompile(`([&~|])`)

// find is Python's str.find(sub, start, end) for one rune.
func find(s []rune, r rune, start, end int) int {
	if start >= end {
		return -1
	}
	if k := slices.Index(s[start:end], r); k >= 0 {
		return start + k
	}
	return -1
}

// pyClassToGo rewrites the inside of a Python class as written by translate:
// "\x" is the literal x, a bare '-' is a range operator (or a literal where
// re reads it so, which Go's parser agrees on), anything else is literal.
func pyClassToGo(s string) string {
	var sb strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == '\\' && i+1 < len(rs):
			i++
			fmt.Fprintf(&sb, `\x{%x}`, rs[i])
		case r == '-':
			sb.WriteByte('-')
		default:
			fmt.Fprintf(&sb, `\x{%x}`, r)
		}
	}
	return sb.String()
}

func TestReference(t *testing.T) {
	for _, tt := range matchTests {
		re := regexp.MustCompile(translate(tt.pattern))
		assert.Equal(t, tt.want, re.MatchString(tt.name), "translate(%q) = %s on %q", tt.pattern, re, tt.name)
	}
}

// FuzzMatch checks that Match never panics and agrees with translate.
func FuzzMatch(f *testing.F) {
	for _, tt := range matchTests {
		f.Add(tt.pattern, tt.name)
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		got := fnmatch.Match(pattern, name)
		re, err := regexp.Compile(translate(pattern))
		require.NoError(t, err, "translate(%q)", pattern)
		require.Equal(t, re.MatchString(name), got, "Match(%q, %q), regexp %s", pattern, name, re)
	})
}

// FuzzSet checks that a Set matches a name exactly when one of its
// patterns does.
func FuzzSet(f *testing.F) {
	f.Add("libcuda.so*", "libnvidia-*.so*", "li?", "libcuda.so.1")
	f.Add("libc", "[l]ibc*", "*", "libc.so.6")
	f.Add("lib\xff*", "libnv", "libn*", "libnvrtc.so.12")
	f.Fuzz(func(t *testing.T, a, b, c, name string) {
		want := fnmatch.Match(a, name) || fnmatch.Match(b, name) || fnmatch.Match(c, name)
		require.Equal(t, want, fnmatch.NewSet([]string{a, b, c}).Match(name), "NewSet(%q, %q, %q).Match(%q)", a, b, c, name)
	})
}
