package patch_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
)

// TestFileErrorJSON: a file's error is its text in the JSON report (the
// kind is for callers, not the report), and reads back as that text.
func TestFileErrorJSON(t *testing.T) {
	cause := errors.New(`RUNPATH entry "/build/x" points into the build directory /build`)
	e := patch.FileError{Kind: patch.ErrorAudit, Err: cause}
	b, err := json.Marshal([]patch.FileError{e})
	if err != nil {
		t.Fatal(err)
	}
	if want := `["RUNPATH entry \"/build/x\" points into the build directory /build"]`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back []patch.FileError
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || back[0].Error() != cause.Error() || back[0].Kind != patch.ErrorUnknown {
		t.Errorf("read back %#v", back)
	}
	if !errors.Is(e, cause) {
		t.Error("FileError does not unwrap to its cause")
	}
	for k, want := range map[patch.ErrorKind]string{patch.ErrorUnknown: "unknown", patch.ErrorAudit: "audit", patch.ErrorHardLinks: "hard-links", patch.ErrorInternal: "internal", patch.ErrorInternal + 1: "ErrorKind(11)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(k), k, want)
		}
	}
}
