package patchelf

import (
	"fmt"
	"testing"
)

func TestParsePatchelfArgs(t *testing.T) {
	tests := []struct {
		args    []string
		want    string // fmt of selected fields, or the error
		wantErr bool
	}{
		{[]string{"--add-needed", "b", "--add-needed", "a", "--add-needed", "b", "f"}, "add [a b]", false},
		{[]string{"--replace-needed", "a", "x", "--replace-needed", "b", "y", "--replace-needed", "a", "z", "f"}, "replace [{a z} {b y}]", false},
		{[]string{"--interpreter", "/l", "f"}, "interp /l", false},
		{[]string{"--page-size", " +12x", "f"}, "", false},
		{[]string{"--page-size", "-1", "f"}, "invalid argument to --page-size", true},
		{[]string{"--no-default-lib", "--clear-symbol-version", "puts", "f"}, "", false},
		{[]string{"--output", "o"}, "missing filename", true},
	}
	for _, tt := range tests {
		o, err := parsePatchelfArgs(tt.args)
		if tt.wantErr {
			if err == nil || err.Error() != tt.want {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		var got string
		switch {
		case o.addNeeded != nil:
			got = fmt.Sprint("add ", o.addNeeded)
		case o.replaceNeeded != nil:
			got = fmt.Sprint("replace ", o.replaceNeeded)
		case o.setInterp != "":
			got = "interp " + o.setInterp
		}
		if got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.args, got, tt.want)
		}
	}
}
