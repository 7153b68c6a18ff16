package patchelf

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestShrinkRPath(t *testing.T) {
	libs := map[string]elf.Machine{
		"/a/libfoo.so":     elf.EM_X86_64,
		"/b/libfoo.so":     elf.EM_X86_64,
		"/b/libbar.so":     elf.EM_X86_64,
		"/arm/libfoo.so":   elf.EM_AARCH64,
		"/nix/s/libbar.so": elf.EM_X86_64,
	}
	probe := func(p string) (elf.Machine, error) {
		if m, ok := libs[filepath.Clean(p)]; ok {
			return m, nil
		}
		return 0, os.ErrNotExist
	}
	needed := []string{"libfoo.so", "libbar.so"}
	tests := []struct {
		rpath   string
		allowed []string
		want    string
	}{
		{"/a:/b", nil, "/a:/b"},
		{"/b:/a", nil, "/b"}, // /a only holds what /b already gave
		{"/none:/a", nil, "/a"},
		{"/arm:/a", nil, "/a"}, // another machine does not count
		{"$ORIGIN/../lib:rel:/none", nil, "$ORIGIN/../lib:rel"},
		{"/a::/b", nil, "/a:/b"},
		{"", nil, ""},
		{"/a:/nix/s:$ORIGIN", []string{"/nix/"}, "/nix/s:$ORIGIN"},
		{"/a/:/b", []string{"/a/"}, "/a/"},
		{"/a:/b", []string{""}, "/a:/b"},
		{"/a:/b", []string{"/a", ""}, "/a"},
	}
	for _, tt := range tests {
		got, removed := shrinkRPath(tt.rpath, needed, tt.allowed, elf.EM_X86_64, probe)
		if got != tt.want {
			t.Errorf("shrinkRPath(%q, allowed %q) = %q, want %q (removed %q)", tt.rpath, tt.allowed, got, tt.want, removed)
		}
	}
}

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
		{[]string{"--no-default-lib", "f"}, "option --no-default-lib is not supported by cudapatch's patchelf", true},
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
