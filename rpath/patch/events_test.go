package patch_test

import (
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
)

// TestPythonJSON: the event lines are what Python's
// json.dumps({"T": {"k": s}}, default=str) prints; the expected strings were
// printed by Python 3.11 (os.fsdecode for the bytes that are not UTF-8).
func TestPythonJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`a"b\c`, `{"T": {"k": "a\"b\\c"}}`},
		{"tab\there", `{"T": {"k": "tab\there"}}`},
		{"nl\nx", `{"T": {"k": "nl\nx"}}`},
		{"\x01\x1f\x7f", `{"T": {"k": "\u0001\u001f\u007f"}}`},
		{"é", `{"T": {"k": "\u00e9"}}`},
		{"日本", `{"T": {"k": "\u65e5\u672c"}}`},
		{"😀", `{"T": {"k": "\ud83d\ude00"}}`},
		{"\u2028", `{"T": {"k": "\u2028"}}`},
		{"bad\xff\xfename", `{"T": {"k": "bad\udcff\udcfename"}}`},
	} {
		if got := (patch.Event{Type: "T", Fields: []patch.EventField{{Key: "k", Value: tc.in}}}).PythonJSON(); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
	ev := patch.Event{Type: "Dependency", Fields: []patch.EventField{{Key: "found", Value: false}, {Key: "location", Value: nil}}}
	if got, want := ev.PythonJSON(), `{"Dependency": {"found": false, "location": null}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestPyPath: str(pathlib.PurePosixPath(p)), as printed by Python 3.11.
func TestPyPath(t *testing.T) {
	for in, want := range map[string]string{
		"": ".", ".": ".", "./a": "a", "a//b/": "a/b", "//a": "//a", "///a": "/a",
		"/a/./b/.": "/a/b", "a/../b": "a/../b", "$ORIGIN/": "$ORIGIN", "./": ".", "/": "/",
	} {
		if got := patch.PyPath(in); got != want {
			t.Errorf("PyPath(%q) = %q, want %q", in, got, want)
		}
	}
}
