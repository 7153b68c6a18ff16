package fnmatch_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// matchTests are (pattern, name, want) rows. Each want is what CPython's
// fnmatch.fnmatchcase(name, pattern) answers; TestAgainstPython checks that.
var matchTests = []struct {
	pattern, name string
	want          bool
}{
	// Patterns seen in nixpkgs' autoPatchelfIgnoreMissingDeps.
	{"libcuda.so.1", "libcuda.so.1", true},
	{"libcuda.so.1", "libcuda.so", false},
	{"libcuda.so.1", "libcuda.so.10", false}, // whole name, not a prefix
	{"libcuda.so*", "libcuda.so", true},
	{"libcuda.so*", "libcuda.so.1", true},
	{"libcuda.so*", "libcudart.so.12", false},
	{"*", "libcuda.so.1", true},
	{"*", "", true},
	{"libnvidia-*.so.1", "libnvidia-ml.so.1", true},
	{"libnvidia-*.so.1", "libnvidia-.so.1", true}, // '*' may match nothing
	{"libnvidia-*.so.1", "libnvidia-ml.so.535", false},
	{"lib[!x]*.so", "libfoo.so", true},
	{"lib[!x]*.so", "libxfoo.so", false},
	{"lib[!x]*.so", "lib.so", false}, // [!x] needs one character

	// Empty pattern and name.
	{"", "", true},
	{"", "a", false},
	{"a", "", false},

	// '*': any run, runs of stars are one star, whole-name match.
	{"*.so", ".so", true},
	{"*.so", "a.so.1", false},
	{"a*b*c", "abc", true},
	{"a*b*c", "aXbYc", true},
	{"a*b*c", "aXbYcZ", false},
	{"a***b", "ab", true},
	{"*a*a*a*a*b", strings.Repeat("a", 40), false},
	{"*a*a*a*a*b", strings.Repeat("a", 40) + "b", true},
	{"*ab", "aab", true}, // the star must give back a character
	{"*aab", "aaab", true},

	// '?': exactly one character, a rune not a byte.
	{"?", "a", true},
	{"?", "", false},
	{"?", "ab", false},
	{"??", "é", false},
	{"?", "é", true},
	{"?", "☃", true},
	{"?", "𝄞", true},
	{"?", "\n", true}, // DOTALL: '?' matches a newline too
	{"*", "a\nb", true},

	// '[seq]' and '[!seq]'.
	{"[abc]", "b", true},
	{"[abc]", "d", false},
	{"[abc]", "", false},
	{"[!abc]", "d", true},
	{"[!abc]", "a", false},
	{"[!abc]", "", false},
	{"[!a]", "\n", true},
	{"[é☃]", "☃", true},
	{"[^a]", "^", true}, // '^' is a member, not negation
	{"[^a]", "b", false},
	{"[a^]", "^", true},
	{"[[]", "[", true}, // '[' inside a set is a member
	{"[[a]", "a", true},
	{"[a[]", "[", true},
	{"[&&a]", "&", true}, // re's set operations are escaped
	{"[a~~]", "~", true},
	{"[||]", "|", true},
	{"[a|b]", "|", true},

	// ']' right after '[' or '[!' is a member.
	{"[]]", "]", true},
	{"[]a]", "a", true},
	{"[]a]", "]", true},
	{"[!]]", "]", false},
	{"[!]]", "a", true},
	{"[!]a]", "a", false},
	{"[]", "[]", true},   // unterminated: ']' was taken as a member
	{"[!]", "[!]", true}, // likewise
	{"[]]]", "]]", true}, // set {']'} then a literal ']'
	{"[a]]", "a]", true},

	// Ranges.
	{"[a-c]", "b", true},
	{"[a-c]", "d", false},
	{"[a-c]", "-", false},
	{"[!a-c]", "b", false},
	{"[!a-c]", "d", true},
	{"[0-9a-f]", "e", true},
	{"[a-a]", "a", true},
	{"[α-ω]", "λ", true}, // ranges compare code points
	{"[α-ω]", "z", false},
	{"[]-a]", "^", true}, // ']' can start a range
	{"[!]-a]", "^", false},
	{"[a-b-c]", "-", true}, // a-b, then '-' and 'c' are members
	{"[a-b-c]", "c", true},
	{"[a-b-c]", "ab", false},
	{"[\\-a]", "]", true}, // backslash starts a range, it escapes nothing
	{"[\\-a]", "\\", true},

	// Reversed ranges are dropped with their ends, as CPython does.
	{"[z-a]", "z", false},
	{"[z-a]", "a", false},
	{"[z-a]", "-", false},
	{"[z-a]", "", false},
	{"[!z-a]", "q", true}, // negated empty set matches anything
	{"[!z-a]", "", false},
	{"[xz-ab]", "x", true},
	{"[xz-ab]", "b", true},
	{"[xz-ab]", "z", false},
	{"[xz-ab]", "a", false},
	{"[z-a!b]", "a", true}, // leaves "!b": now negated
	{"[z-a!b]", "b", false},
	{"[z-a!]", "q", true},   // leaves "!": anything
	{"[z-a!-~]", "x", true}, // leaves "!-~" read as [^-~]
	{"[z-a!-~]", "-", false},
	{"[z-a!-~]", "~", false},
	{"[c-ba-d]", "b", true}, // c-b goes with its ends: "c" + "a-d" → a-d
	{"[c-ba-d]", "d", true},
	{"[c-ba-d]", "e", false},

	// '-' at the edges is a member.
	{"[-a]", "-", true},
	{"[-a]", "a", true},
	{"[-a]", "b", false},
	{"[a-]", "-", true},
	{"[a-]", "b", false},
	{"[!-a]", "-", false},
	{"[!-a]", "b", true},
	{"[!a-]", "-", false},
	{"[-]", "-", true},
	{"[--]", "-", true},
	{"[---]", "-", true},
	{"[!-]", "-", false},
	{"[!-]", "a", true},
	{"[--a]", "-", true},
	{"[--a]", "0", true},  // '-' .. 'a'
	{"[a--]", "-", false}, // reversed a-'-' is dropped: nothing is left
	{"[a--]", "a", false},
	{"[a--]x", "x", false},

	// Unterminated '[' is literal.
	{"[", "[", true},
	{"[a", "[a", true},
	{"[a", "a", false},
	{"[!", "[!", true},
	{"lib[x.so", "lib[x.so", true},
	{"[*", "[abc", true}, // the star after it is still a star
	{"[?", "[x", true},
	{"a[b*c[", "a[bxyc[", true},
	{"a[b*c[", "abxyc[", false},

	// Backslash is not an escape.
	{"\\", "\\", true},
	{"\\*", "\\abc", true},
	{"\\*", "*", false},
	{"\\?", "\\x", true},
	{"\\[a]", "\\a", true},
	{"[\\]", "\\", true},
	{"[\\]]", "\\]", true},

	// '/' and leading dots are ordinary characters.
	{"*", ".hidden", true},
	{"?hidden", ".hidden", true},
	{"a*b", "a/x/b", true},
	{"a?b", "a/b", true},
	{"[/]", "/", true},
	{"*.so", "dir/lib.so", true},

	// Case-sensitive, as fnmatch on POSIX.
	{"LIB*.so", "lib.so", false},
	{"[A-Z]", "a", false},

	// Regexp metacharacters are literal.
	{"a.c", "abc", false},
	{"a+", "aa", false},
	{"(a|b)", "(a|b)", true},
	{"$^{}", "$^{}", true},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchTests {
		assert.Equal(t, tt.want, fnmatch.Match(tt.pattern, tt.name),
			"Match(%q, %q)", tt.pattern, tt.name)
		p := fnmatch.Compile(tt.pattern)
		assert.Equal(t, tt.want, p.Match(tt.name), "Compile(%q).Match(%q)", tt.pattern, tt.name)
		assert.Equal(t, tt.pattern, p.String())
	}
}

func TestInvalidUTF8(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"?", "\xff", true},          // one invalid byte is one character
		{"??", "\xe2\x82", true},     // a cut-short rune is one per byte
		{"\xff", "\xfe", true},       // both read as U+FFFD
		{"\ufffd", "\xff", true},     // so does a real U+FFFD
		{"a\ufffd", "a\ufffd", true}, // and it still matches itself
		{"lib\xff.so", "lib\xff.so", true},
		{"lib\xff*", "lib\xfe.so", true}, // the literal prefix stops at U+FFFD
		{"lib\xff*", "li", false},
		{"[\xff]", "\xfe", true},
		{"[!\xff]", "\xfe", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, fnmatch.Match(tt.pattern, tt.name), "Match(%q, %q)", tt.pattern, tt.name)
	}
}

// pythonFnmatch answers fnmatch.fnmatchcase for each pair with one run of
// the real CPython.
func pythonFnmatch(t *testing.T, pairs [][2]string) []bool {
	t.Helper()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the differential test needs python3 (CI installs Debian's)")
	in, err := json.Marshal(pairs)
	require.NoError(t, err)
	const script = `
import fnmatch, json, sys
pairs = json.load(sys.stdin)
json.dump([fnmatch.fnmatchcase(name, pat) for pat, name in pairs], sys.stdout)
`
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "python3: %s", stderr.String())
	var got []bool
	require.NoError(t, json.Unmarshal(out, &got))
	require.Len(t, got, len(pairs))
	return got
}

// randomPairs returns patterns over a small alphabet rich in set syntax, each
// with names that are random or made to fit the pattern loosely.
func randomPairs(r *rand.Rand, n int) [][2]string {
	const patAlpha = "ab*?[]!-^/.\\z&~é"
	const nameAlpha = "ab-]!^/.\\[z&~éc"
	pick := func(alpha []rune, max int) string {
		var sb strings.Builder
		for range r.IntN(max + 1) {
			sb.WriteRune(alpha[r.IntN(len(alpha))])
		}
		return sb.String()
	}
	pa, na := []rune(patAlpha), []rune(nameAlpha)
	var pairs [][2]string
	for len(pairs) < n {
		pat := pick(pa, 8)
		pairs = append(pairs, [2]string{pat, pick(na, 4)})
		// A name built by reading the pattern naively hits more matches.
		var sb strings.Builder
		for _, c := range pat {
			switch c {
			case '*':
				sb.WriteString(pick(na, 2))
			case '?', '[', ']', '!':
				sb.WriteRune(na[r.IntN(len(na))])
			default:
				sb.WriteRune(c)
			}
		}
		pairs = append(pairs, [2]string{pat, sb.String()})
	}
	return pairs
}

// TestAgainstPython compares every table row and thousands of random pairs
// with CPython's own fnmatch.fnmatchcase.
func TestAgainstPython(t *testing.T) {
	var pairs [][2]string
	for _, tt := range matchTests {
		pairs = append(pairs, [2]string{tt.pattern, tt.name})
	}
	table := len(pairs)
	pairs = append(pairs, randomPairs(rand.New(rand.NewPCG(1, 2)), 4000)...)

	want := pythonFnmatch(t, pairs)
	matched := 0
	for i, pair := range pairs {
		got := fnmatch.Match(pair[0], pair[1])
		if i < table {
			assert.Equal(t, matchTests[i].want, want[i],
				"table row disagrees with python: fnmatchcase(%q, %q)", pair[1], pair[0])
		}
		assert.Equal(t, want[i], got, "Match(%q, %q): python says %v", pair[0], pair[1], want[i])
		if want[i] {
			matched++
		}
	}
	// The random pairs must exercise both answers, or they prove little.
	assert.Greater(t, matched, len(pairs)/10)
}
