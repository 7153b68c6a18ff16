package printable_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// DecodeRaw is UnquoteJSON, failing t on an error.
func DecodeRaw(t testing.TB, tok []byte) string {
	t.Helper()
	s, err := printable.UnquoteJSON(tok)
	require.NoError(t, err)
	return s
}

type rawReport struct {
	Path  string            `json:"path"`
	Names []string          `json:"names"`
	Dep   *rawDep           `json:"dep"`
	Any   any               `json:"any"`
	ByKey map[string]string `json:"by_key"`
	Text  textish           `json:"text"`
	Blob  []byte            `json:"blob"`
	skip  string
}

type rawDep struct{ Path string }

// textish marshals through MarshalText, embedding its string.
type textish struct{ P string }

func (x textish) MarshalText() ([]byte, error) { return []byte("=" + x.P), nil }

// TestEncodeJSONKeepsBytes: every string, wherever it lies in the value,
// reads back byte for byte, with a Go decoder of the escape and with
// Python's surrogateescape; valid UTF-8 is encoded exactly as
// encoding/json encodes it, and the value is left as it was.
func TestEncodeJSONKeepsBytes(t *testing.T) {
	const (
		name = "lib\xff\nx<&>\"\\\x01.so"
		path = "/nix/store/\xfe\xfd-dep/lib"
		ok   = "caf\u00e9 \U0001F600 \ufffd"
	)
	v := &rawReport{
		Path: name, Names: []string{ok, path, "\xc3"}, Dep: &rawDep{Path: path},
		Any: map[string]any{"k": name}, ByKey: map[string]string{"a": path}, Text: textish{name},
		Blob: []byte{0xff}, skip: "\xff",
	}
	var out bytes.Buffer
	require.NoError(t, printable.EncodeJSON(&out, v, "  "))
	require.True(t, utf8.Valid(out.Bytes()), "the JSON itself is UTF-8")
	assert.Equal(t, name, v.Path, "the value is put back")
	assert.Equal(t, name, v.Any.(map[string]any)["k"])

	var got struct {
		Path  json.RawMessage   `json:"path"`
		Names []json.RawMessage `json:"names"`
		Dep   struct{ Path json.RawMessage }
		Any   map[string]json.RawMessage `json:"any"`
		ByKey map[string]json.RawMessage `json:"by_key"`
		Text  json.RawMessage            `json:"text"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	assert.Equal(t, name, DecodeRaw(t, got.Path))
	assert.Equal(t, []string{ok, path, "\xc3"}, []string{DecodeRaw(t, got.Names[0]), DecodeRaw(t, got.Names[1]), DecodeRaw(t, got.Names[2])})
	assert.Equal(t, path, DecodeRaw(t, got.Dep.Path))
	assert.Equal(t, name, DecodeRaw(t, got.Any["k"]))
	assert.Equal(t, path, DecodeRaw(t, got.ByKey["a"]))
	assert.Equal(t, "="+name, DecodeRaw(t, got.Text))
	assert.Contains(t, out.String(), `"lib\udcff\nx\u003c\u0026\u003e\"\\\u0001.so"`)

	// Valid UTF-8: as encoding/json writes it.
	valid := &rawReport{Path: ok, Names: []string{"a\u2028b", "<x>"}, Dep: &rawDep{"/lib"}}
	var a, b bytes.Buffer
	require.NoError(t, printable.EncodeJSON(&a, valid, "  "))
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(valid))
	assert.Equal(t, b.String(), a.String())

	// Python, which reads the escape as its surrogateescape.
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("no python3: the Go decoder alone checked the bytes")
		return
	}
	cmd := exec.Command(py, "-c", `import json,sys
d = json.load(sys.stdin)
sys.stdout.buffer.write(d["path"].encode("utf-8", "surrogateescape") + b"\0" + d["dep"]["Path"].encode("utf-8", "surrogateescape"))`)
	cmd.Stdin = &out
	pyOut, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, name+"\x00"+path, string(pyOut))
}
