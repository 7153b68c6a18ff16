package patch_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

func TestShrinkPath(t *testing.T) {
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
		got, removed := policy.ShrinkPath(tt.rpath, needed, tt.allowed, elf.EM_X86_64, probe)
		if got != tt.want {
			t.Errorf("ShrinkPath(%q, allowed %q) = %q, want %q (removed %q)", tt.rpath, tt.allowed, got, tt.want, removed)
		}
	}
}
