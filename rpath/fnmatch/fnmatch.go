// Package fnmatch matches library names against shell patterns exactly as
// CPython's fnmatch.fnmatchcase does, because nixpkgs' auto-patchelf matches
// autoPatchelfIgnoreMissingDeps with Python's fnmatch and cudapatch must
// ignore the very same missing libraries.
//
// The rules are those of CPython 3.11–3.13 (Lib/fnmatch.py, translate):
//
//   - '*' matches any run of characters, '?' matches one character.
//   - '[seq]' matches one character in seq and '[!seq]' one not in it. A ']'
//     right after '[' or '[!' is a member, a '-' at either edge is a member,
//     'a-z' is a range, and a reversed range such as 'z-a' is dropped,
//     together with the characters that border it, the way CPython drops it.
//     A set left empty matches nothing; a '[!]' left empty matches anything.
//   - A '[' with no closing ']' is an ordinary character.
//   - Backslash is an ordinary character: there is no way to quote.
//   - '/' and a leading '.' are ordinary characters (fnmatch is not glob).
//   - The pattern must match the whole name, case-sensitively, as on POSIX.
//
// Patterns and names are read as UTF-8, one character per rune; each byte
// that is not valid UTF-8 reads as U+FFFD, as in a Go range loop. Python's
// fnmatch never rejects a pattern, so Compile never fails either.
package fnmatch

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// opKind says what one step of a compiled pattern matches.
type opKind uint8

const (
	opLiteral opKind = iota // one rune equal to op.r
	opAny                   // '?': any one rune
	opSet                   // '[...]': one rune in (or, negated, not in) op.ranges
	opStar                  // '*': any run of runes; runs of '*' are one op
)

// runeRange is the closed interval [lo, hi]; a single member has lo == hi.
type runeRange struct{ lo, hi rune }

// op is one step of a compiled pattern. Every op but opStar consumes exactly
// one rune, which is what lets Match backtrack only to the last star.
type op struct {
	kind   opKind
	negate bool // opSet: match runes outside ranges
	r      rune // opLiteral
	ranges []runeRange
}

func (o *op) matches(r rune) bool {
	switch o.kind {
	case opLiteral:
		return r == o.r
	case opAny:
		return true
	}
	for _, rg := range o.ranges {
		if rg.lo <= r && r <= rg.hi {
			return !o.negate
		}
	}
	return o.negate
}

// Pattern is a compiled pattern. It is immutable, so one Pattern may be
// matched from many goroutines at once, as when cudapatch walks a tree in
// parallel.
type Pattern struct {
	src string
	ops []op
	// exact is set when the pattern is plain text, so Match is a string
	// comparison. It is never set for a pattern holding U+FFFD, which also
	// matches invalid bytes in a name.
	exact bool
	// prefix is the text of the literal ops that open the pattern (up to
	// the first other op or U+FFFD): every name it matches starts with it,
	// so most names are turned away by one comparison.
	prefix string
	nlit   int // the ops prefix spells
}

// Compile compiles pattern. It never fails: like Python's fnmatch, it reads
// any pattern, taking an unterminated '[' literally.
func Compile(pattern string) *Pattern {
	pat := []rune(pattern)
	p := &Pattern{src: pattern}
	exact := true
	for i := 0; i < len(pat); {
		c := pat[i]
		i++
		switch c {
		case '*':
			if n := len(p.ops); n == 0 || p.ops[n-1].kind != opStar {
				p.ops = append(p.ops, op{kind: opStar})
			}
			exact = false
			continue
		case '?':
			p.ops = append(p.ops, op{kind: opAny})
			exact = false
			continue
		case '[':
			if o, next, ok := compileSet(pat, i); ok {
				p.ops = append(p.ops, o)
				i = next
				exact = false
				continue
			}
		}
		if c == utf8.RuneError {
			exact = false
		}
		p.ops = append(p.ops, op{kind: opLiteral, r: c})
	}
	p.exact = exact
	for p.nlit < len(p.ops) && p.ops[p.nlit].kind == opLiteral && p.ops[p.nlit].r != utf8.RuneError {
		p.nlit++
	}
	lit := make([]rune, p.nlit)
	for i := range lit {
		lit[i] = p.ops[i].r
	}
	p.prefix = string(lit)
	return p
}

// compileSet compiles the set that opens just before pat[i]. It reports
// false when no ']' closes it, and the '[' is then a literal.
//
// It follows CPython's translate step by step, because the edge cases are
// defined by what translate writes into the regular expression and by how
// Python's re then reads that: split at the hyphens that form ranges, drop
// reversed ranges by merging their neighbours, and only then look for a
// leading '!'. So '[z-a!b]' is the negated set [^b], just as in Python.
func compileSet(pat []rune, i int) (op, int, bool) {
	j := i
	if j < len(pat) && pat[j] == '!' {
		j++
	}
	if j < len(pat) && pat[j] == ']' {
		j++
	}
	for j < len(pat) && pat[j] != ']' {
		j++
	}
	if j >= len(pat) {
		return op{}, i, false
	}
	stuff := pat[i:j]

	// chunks are the runs between range hyphens: the last rune of one chunk
	// and the first of the next are the ends of a range. Other hyphens are
	// members.
	var chunks [][]rune
	if !slices.Contains(stuff, '-') {
		chunks = [][]rune{stuff}
	} else {
		// A hyphen first (after '!') is a member, and so is one right
		// after a range: the search resumes past the range's upper end.
		k := 1
		if stuff[0] == '!' {
			k = 2
		}
		start := 0
		for k < len(stuff) {
			d := slices.Index(stuff[k:], '-')
			if d < 0 {
				break
			}
			k += d
			chunks = append(chunks, stuff[start:k])
			start = k + 1
			k += 3
		}
		if start < len(stuff) {
			chunks = append(chunks, stuff[start:])
		} else {
			// A trailing hyphen is a member.
			last := len(chunks) - 1
			chunks[last] = slices.Concat(chunks[last], []rune{'-'})
		}
		// Drop reversed ranges with both their ends, from the right.
		// Every chunk is non-empty here: the first holds at least one
		// rune, middle ones at least two, and a merge leaves the first
		// chunk empty only when it was the only range.
		for k := len(chunks) - 1; k > 0; k-- {
			a, b := chunks[k-1], chunks[k]
			if a[len(a)-1] > b[0] {
				chunks[k-1] = slices.Concat(a[:len(a)-1], b[1:])
				chunks = slices.Delete(chunks, k, k+1)
			}
		}
	}

	// Flatten to the items Python's re sees between the brackets: members,
	// and the hyphens that join chunks.
	type item struct {
		r    rune
		dash bool // a range hyphen, not a member
	}
	var items []item
	for n, c := range chunks {
		if n > 0 {
			items = append(items, item{r: '-', dash: true})
		}
		for _, r := range c {
			items = append(items, item{r: r})
		}
	}

	o := op{kind: opSet}
	switch {
	case len(items) == 0:
		// Empty set: translate writes (?!), which never matches.
		return o, j + 1, true
	case len(items) == 1 && !items[0].dash && items[0].r == '!':
		// Negated empty set: translate writes '.', which matches anything.
		return op{kind: opAny}, j + 1, true
	case !items[0].dash && items[0].r == '!':
		o.negate = true
		items = items[1:]
	}
	// Read the items as Python's sre_parse reads a class: a member followed
	// by a range hyphen and another item is a range; a range hyphen in
	// member position, or last, is a plain '-'.
	for k := 0; k < len(items); {
		lo := items[k].r
		k++
		if k+1 < len(items) && items[k].dash {
			o.ranges = append(o.ranges, runeRange{lo, items[k+1].r})
			k += 2
			continue
		}
		o.ranges = append(o.ranges, runeRange{lo, lo})
	}
	return o, j + 1, true
}

// Match reports whether name matches p as a whole.
//
// Every op but '*' consumes one rune, so when a step fails it is enough to
// let the last '*' swallow one more rune and retry from there: an earlier
// star can never do better. This is the leftmost match CPython spells with
// atomic groups, (?>.*?fixed), and it takes O(len(pattern)·len(name)) time
// even for patterns like '*a*a*a*a*b'.
func (p *Pattern) Match(name string) bool {
	if p.exact {
		return name == p.src
	}
	if !strings.HasPrefix(name, p.prefix) {
		return false
	}
	ops := p.ops
	pi, ni := p.nlit, len(p.prefix) // no star before: nothing to retry there
	starPi, starNi := -1, 0         // op after the last star, and where it resumes
	for pi < len(ops) || ni < len(name) {
		if pi < len(ops) {
			o := &ops[pi]
			if o.kind == opStar {
				if pi == len(ops)-1 {
					return true
				}
				pi++
				starPi, starNi = pi, ni
				continue
			}
			if ni < len(name) {
				r, size := utf8.DecodeRuneInString(name[ni:])
				if o.matches(r) {
					pi++
					ni += size
					continue
				}
			}
		}
		if starPi < 0 || starNi >= len(name) {
			return false
		}
		_, size := utf8.DecodeRuneInString(name[starNi:])
		starNi += size
		pi, ni = starPi, starNi
	}
	return true
}

// String returns the pattern as given to Compile, so that logs show it as
// written in autoPatchelfIgnoreMissingDeps.
func (p *Pattern) String() string { return p.src }

// Match reports whether name matches pattern, like Python's
// fnmatch.fnmatchcase(name, pattern); note the order of the arguments. It
// compiles pattern on each call: compile once with Compile to match many
// names.
func Match(pattern, name string) bool {
	return Compile(pattern).Match(name)
}

// Set is several patterns matched at once: a name matches the Set when it
// matches one of them. Each pattern whose literal prefix is at least
// setKey bytes long is filed under those bytes, so a name is tried only
// against the patterns filed under its own first bytes and those with a
// shorter prefix: the driver's twenty-five library patterns, asked about
// every library name of every closure, are then one map lookup for most
// names.
type Set struct {
	short []*Pattern
	byKey map[string][]*Pattern
}

const setKey = 4

// NewSet compiles patterns into a Set.
func NewSet(patterns []string) *Set {
	s := &Set{byKey: map[string][]*Pattern{}}
	for _, src := range patterns {
		p := Compile(src)
		if len(p.prefix) < setKey {
			s.short = append(s.short, p)
		} else {
			k := p.prefix[:setKey]
			s.byKey[k] = append(s.byKey[k], p)
		}
	}
	return s
}

// Match reports whether name matches one of s's patterns; a nil Set has
// none.
func (s *Set) Match(name string) bool {
	if s == nil {
		return false
	}
	for _, p := range s.short {
		if p.Match(name) {
			return true
		}
	}
	if len(name) < setKey {
		return false
	}
	for _, p := range s.byKey[name[:setKey]] {
		if p.Match(name) {
			return true
		}
	}
	return false
}
