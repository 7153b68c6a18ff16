package printable

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// EncodeJSON writes v as indented JSON, as json.Encoder does, except that
// a string holding invalid UTF-8 (a file name, a DT_NEEDED name or a
// RUNPATH may hold any byte) keeps its bytes: encoding/json would write
// U+FFFD for each bad byte, and the JSON would no longer name the file.
// Each byte 0xXY that is not part of valid UTF-8 is written as the
// escape \udcXY, a lone low surrogate, as Python's surrogateescape and
// nixpkgs' auto-patchelf write it (valid UTF-8 never holds a surrogate,
// so the escape is unambiguous); valid text is written exactly as
// encoding/json writes it. Python reads the bytes back with
// s.encode("utf-8", "surrogateescape").
//
// The strings are found by walking v (exported struct fields, slices,
// arrays, map values, pointers, interfaces), swapped for unique
// placeholders while v is encoded and put back after: v must not be used
// concurrently meanwhile.
func EncodeJSON(w io.Writer, v any, indent string) error {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	s := &swap{prefix: "\ue000" + hex.EncodeToString(nonce[:]) + "-"}
	root := reflect.ValueOf(&v).Elem()
	s.walk(root, 0)
	defer s.undo()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := buf.Bytes()
	if len(s.raw) > 0 {
		out = s.restore(out)
	}
	_, err := w.Write(out)
	return err
}

// swap holds the invalid strings replaced by placeholders, and how to put
// each back.
type swap struct {
	prefix string
	raw    []string // by placeholder number
	undos  []func()
}

// maxDepth bounds the walk: the reports are shallow trees.
const maxDepth = 64

func (s *swap) placeholder(i int) string { return s.prefix + strconv.Itoa(i) + "\ue001" }

func (s *swap) walk(v reflect.Value, depth int) bool {
	if depth > maxDepth || !v.IsValid() {
		return false
	}
	changed := false
	switch v.Kind() {
	case reflect.String:
		if str := v.String(); !utf8.ValidString(str) && v.CanSet() {
			s.undos = append(s.undos, func() { v.SetString(str) })
			v.SetString(s.placeholder(len(s.raw)))
			s.raw = append(s.raw, str)
			changed = true
		}
	case reflect.Pointer:
		if !v.IsNil() {
			changed = s.walk(v.Elem(), depth+1)
		}
	case reflect.Interface:
		if v.IsNil() {
			break
		}
		// What an interface holds is not addressable: a copy is walked
		// and stored in its place.
		old := v.Elem()
		c := reflect.New(old.Type()).Elem()
		c.Set(old)
		if s.walk(c, depth+1) && v.CanSet() {
			v.Set(c)
			s.undos = append(s.undos, func() { v.Set(old) })
			changed = true
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() && s.walk(v.Field(i), depth+1) {
				changed = true
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			break // []byte is base64
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if s.walk(v.Index(i), depth+1) {
				changed = true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			k, old := it.Key(), it.Value()
			c := reflect.New(old.Type()).Elem()
			c.Set(old)
			if s.walk(c, depth+1) {
				v.SetMapIndex(k, c)
				s.undos = append(s.undos, func() { v.SetMapIndex(k, old) })
				changed = true
			}
		}
	}
	return changed
}

// undo puts every replaced string back, last replaced first.
func (s *swap) undo() {
	for i := len(s.undos) - 1; i >= 0; i-- {
		s.undos[i]()
	}
}

// restore replaces each placeholder in out with its string, escaped.
func (s *swap) restore(out []byte) []byte {
	pre := []byte(s.prefix)
	var b bytes.Buffer
	for {
		i := bytes.Index(out, pre)
		if i < 0 {
			b.Write(out)
			return b.Bytes()
		}
		b.Write(out[:i])
		rest := out[i+len(pre):]
		end := bytes.IndexRune(rest, '\ue001')
		n, err := strconv.Atoi(string(rest[:max(end, 0)]))
		if end < 0 || err != nil || n < 0 || n >= len(s.raw) {
			// Not one of ours (cannot happen: the nonce is random).
			b.Write(pre)
			out = rest
			continue
		}
		escapeJSON(&b, s.raw[n])
		out = rest[end+len("\ue001"):]
	}
}

// escapeJSON writes s as the inside of a JSON string: valid runs as
// encoding/json writes them, each invalid byte as \udcXY.
func escapeJSON(b *bytes.Buffer, s string) {
	for len(s) > 0 {
		i := 0
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		if i > 0 {
			q, _ := json.Marshal(s[:i])
			b.Write(q[1 : len(q)-1])
		}
		if i < len(s) {
			fmt.Fprintf(b, `\udc%02x`, s[i])
			i++
		}
		s = s[i:]
	}
}

// UnquoteJSON decodes a JSON string token (quotes included) as
// EncodeJSON's readers should: a lone \udcXY (XY from 80 to ff) is the
// byte 0xXY; everything else as JSON says. It gives back the bytes
// EncodeJSON was given.
func UnquoteJSON(tok []byte) (string, error) {
	s := string(tok)
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", fmt.Errorf("not a JSON string: %.40q", s)
	}
	s = s[1 : len(s)-1]
	var b bytes.Buffer
	hex4 := func(i int) (rune, error) {
		if i+6 > len(s) || s[i+1] != 'u' {
			return 0, fmt.Errorf("bad \\u escape at %d", i)
		}
		u, err := strconv.ParseUint(s[i+2:i+6], 16, 16)
		return rune(u), err
	}
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("bad escape at %d", i)
		}
		if s[i+1] != 'u' {
			c, ok := map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[s[i+1]]
			if !ok {
				return "", fmt.Errorf("bad escape at %d", i)
			}
			b.WriteByte(c)
			i += 2
			continue
		}
		r, err := hex4(i)
		if err != nil {
			return "", err
		}
		i += 6
		switch {
		case r >= 0xd800 && r < 0xdc00:
			lo, err := hex4(i)
			if err != nil || lo < 0xdc00 || lo > 0xdfff {
				return "", fmt.Errorf("lone high surrogate at %d", i-6)
			}
			i += 6
			b.WriteRune(0x10000 + (r-0xd800)<<10 + (lo - 0xdc00))
		case r >= 0xdc80 && r <= 0xdcff:
			b.WriteByte(byte(r - 0xdc00))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
