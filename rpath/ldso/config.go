package ldso

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso/internal/x86isa"
)

// Config is the loader's environment: what ld.so would know at startup.
type Config struct {
	// Root, when set, is the directory every absolute path is taken in, as
	// if the program ran chrooted there. Symbolic links are followed
	// inside it.
	Root string `json:"root,omitempty"`
	// WorkDir is the current directory, inside Root, that relative search
	// directories (and empty path elements) are relative to. Empty means
	// the process's current directory when Root is empty, "/" otherwise.
	WorkDir string `json:"workdir,omitempty"`
	// LDLibraryPath is the value of LD_LIBRARY_PATH (':' or ';' separated).
	LDLibraryPath string `json:"ld_library_path,omitempty"`
	// Secure is AT_SECURE (setuid/setgid or capabilities). As in glibc,
	// LD_LIBRARY_PATH is then ignored altogether, a path element using
	// $ORIGIN is dropped unless it starts with $ORIGIN, and $ORIGIN in the
	// executable's own paths must expand into a default directory.
	Secure bool `json:"secure,omitempty"`
	// Loader is the loader simulated: LoaderNixOS (nixpkgs' glibc, which
	// reads each requester's resolution-cache note before its DT_RUNPATH;
	// also the meaning of "") or LoaderStock (glibc as released).
	Loader Loader `json:"loader,omitempty"`
	// Cache is the parsed /etc/ld.so.cache; nil means none.
	Cache *Cache `json:"-"`
	// Platform is the $PLATFORM expansion (AT_PLATFORM: x86_64, i686,
	// aarch64). Empty drops path elements that use $PLATFORM, as ld.so
	// does when it has no value.
	Platform string `json:"platform,omitempty"`
	// Lib is the $LIB expansion: lib/x86_64-linux-gnu on Debian, lib64 on
	// Fedora, lib on Arch.
	Lib string `json:"lib,omitempty"`
	// DefaultDirs are the trusted system directories searched last (glibc's
	// SYSTEM_DIRS), in order.
	DefaultDirs []string `json:"default_dirs"`
	// Hwcaps are the glibc-hwcaps subdirectory names the CPU supports,
	// best first (x86-64-v4, x86-64-v3, x86-64-v2), as ld.so --help lists
	// them "supported, searched".
	Hwcaps []string `json:"hwcaps,omitempty"`
	// LegacyHwcaps are the pre-2.37 hwcap subdirectories (tls/x86_64,
	// x86_64…) tried after the glibc-hwcaps ones, best first. glibc 2.37
	// removed them. Only LoaderStock searches them: nixpkgs' loader, which
	// reads resolution notes, is a newer glibc.
	LegacyHwcaps []string `json:"legacy_hwcaps,omitempty"`
	// Identities, when set, remembers the identity of every file found,
	// across Resolve calls: for many calls over a tree that does
	// not change meanwhile (the symbol check of every file of a tree).
	Identities *IdentityCache `json:"-"`
	// NoDir, when set, says that a host path is no directory (absent, or
	// not one), so that no file below it opens through the Reader: an
	// untraced resolution then skips the subdirectories below it. It
	// must agree with the Reader; nil tries every one.
	NoDir func(path string) bool `json:"-"`
	// Untraced leaves Need.Tried empty: for a caller that needs where each
	// name was found, not how (the attempts are a large part of what a
	// resolution allocates).
	Untraced bool `json:"-"`
}

// IdentityCache is Config.Identities. It is safe for concurrent use.
type IdentityCache struct{ m sync.Map }

// machineInfo is what a machine's glibc port uses for paths.
type machineInfo struct {
	triplet  string // Debian multiarch directory name
	platform string // AT_PLATFORM
}

func machineOf(class elf.Class, machine elf.Machine) (machineInfo, bool) {
	is64 := class == elf.ELFCLASS64
	switch {
	case machine == elf.EM_X86_64 && is64:
		return machineInfo{"x86_64-linux-gnu", "x86_64"}, true
	case machine == elf.EM_X86_64:
		return machineInfo{"x86_64-linux-gnux32", "x86_64"}, true
	case machine == elf.EM_386:
		return machineInfo{"i386-linux-gnu", "i686"}, true
	case machine == elf.EM_AARCH64:
		return machineInfo{"aarch64-linux-gnu", "aarch64"}, true
	case machine == elf.EM_ARM:
		return machineInfo{"arm-linux-gnueabihf", "v7l"}, true
	case machine == elf.EM_PPC64:
		return machineInfo{"powerpc64le-linux-gnu", ""}, true
	case machine == elf.EM_S390 && is64:
		return machineInfo{"s390x-linux-gnu", ""}, true
	case machine == elf.EM_RISCV && is64:
		return machineInfo{"riscv64-linux-gnu", "riscv64"}, true
	case machine == elf.EM_LOONGARCH && is64:
		return machineInfo{"loongarch64-linux-gnu", "loongarch64"}, true
	}
	return machineInfo{}, false
}

// DefaultConfig returns the configuration of the glibc loader for programs
// of the given class and machine installed under root ("" for the host):
//
//   - Cache: root/etc/ld.so.cache, nil when absent.
//   - DefaultDirs and Lib follow the distribution's layout, found by
//     looking for libc.so.6: Debian multiarch (/lib/<triplet>,
//     /usr/lib/<triplet>, /lib, /usr/lib; $LIB = lib/<triplet>), else
//     /lib64 and /usr/lib64 for 64-bit programs when libc is there
//     (Fedora, SUSE; $LIB = lib64), else /lib and /usr/lib ($LIB = lib).
//   - Platform: AT_PLATFORM of the machine; for x86-64 on this host's
//     CPU, the name glibc sets in its place on an Intel CPU ("haswell",
//     "xeon_phi"; see rpath/ldso/internal/x86isa).
//   - Hwcaps: for x86-64, the x86-64-v{4,3,2} levels this host's CPU
//     supports, from CPUID and the state the OS saves, by glibc's rules
//     (see rpath/ldso/internal/x86isa); none when this program does not
//     run on x86-64. Other machines get none: aarch64, i386 and arm
//     have no glibc-hwcaps subdirectories (glibc's elf/dl-hwcaps-subdirs.c,
//     the empty default); those of POWER (power10, power9), s390x (z13…)
//     and RISC-V (rva20u64…) are not modelled.
//   - LegacyHwcaps: for x86-64 on this host's CPU, when root's loader
//     (/lib64/ld-linux-x86-64.so.2) is glibc 2.26 to 2.36, as its
//     --version text says: the subdirectories it tries in each directory
//     for "tls", $PLATFORM and its legacy hwcap names (Debian 12 and
//     Ubuntu 22.04 search 15 of them on an AVX-512 Intel CPU, 7 on an
//     AMD one). Otherwise none: glibc 2.37
//     dropped them, a NixOS host's /lib64 loader is a stub, and other
//     machines' legacy hwcaps are not modelled.
//
// LDLibraryPath, Secure, WorkDir and Loader are left for the caller. An unreadable
// or malformed cache is an error.
func DefaultConfig(root string, class elf.Class, machine elf.Machine) (Config, error) {
	cfg := Config{Root: root}
	mi, _ := machineOf(class, machine)
	cfg.Platform = mi.platform

	has := func(dir string) bool {
		_, err := os.Stat(filepath.Join(root, dir, "libc.so.6"))
		return err == nil
	}
	switch {
	case mi.triplet != "" && (has("/lib/"+mi.triplet) || has("/usr/lib/"+mi.triplet)):
		cfg.DefaultDirs = []string{"/lib/" + mi.triplet, "/usr/lib/" + mi.triplet, "/lib", "/usr/lib"}
		cfg.Lib = "lib/" + mi.triplet
	case class == elf.ELFCLASS64 && (has("/lib64") || has("/usr/lib64")):
		cfg.DefaultDirs = []string{"/lib64", "/usr/lib64"}
		cfg.Lib = "lib64"
	default:
		cfg.DefaultDirs = []string{"/lib", "/usr/lib"}
		cfg.Lib = "lib"
	}

	if machine == elf.EM_X86_64 && class == elf.ELFCLASS64 {
		if regs, ok := x86isa.Read(); ok {
			cfg.Hwcaps = regs.Level().Hwcaps()
			if p := regs.Platform(); p != "" {
				cfg.Platform = p
			}
			if legacyLoader(root, "/lib64/ld-linux-x86-64.so.2") {
				caps := append([]string{"tls", cfg.Platform}, regs.LegacyHwcaps()...)
				cfg.LegacyHwcaps = LegacySubdirs(caps)
			}
		}
	}

	data, err := os.ReadFile(filepath.Join(root, "/etc/ld.so.cache"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return cfg, err
	default:
		if cfg.Cache, err = ParseCache(data); err != nil {
			return cfg, fmt.Errorf("%s: %w", filepath.Join(root, "/etc/ld.so.cache"), err)
		}
	}
	return cfg, nil
}

// LegacySubdirs is the subdirectories a glibc loader before 2.37 tried in
// each directory of a search path, best first, for its legacy
// capabilities caps: "tls", then $PLATFORM when it has one, then its
// hwcap names from the highest bit down (x86-64: tls, haswell, avx512_1,
// x86_64). Every combination in that order, the first capability the
// most significant (_dl_important_hwcaps): tls/haswell/avx512_1/x86_64,
// tls/haswell/avx512_1, tls/haswell/x86_64, …, x86_64. A name listed
// twice (an AMD CPU's platform and hwcap are both "x86_64") is tried
// twice, as the loader does.
func LegacySubdirs(caps []string) []string {
	n := len(caps)
	if n == 0 || n > 16 {
		return nil
	}
	out := make([]string, 0, 1<<n-1)
	parts := make([]string, 0, n)
	for m := 1<<n - 1; m > 0; m-- {
		parts = parts[:0]
		for i, c := range caps {
			if m&(1<<(n-1-i)) != 0 {
				parts = append(parts, c)
			}
		}
		out = append(out, strings.Join(parts, "/"))
	}
	return out
}

// legacyLoader says whether the loader at interp under root is glibc 2.26
// to 2.36, whose legacy hwcap subdirectories DefaultConfig models: read
// from the text its --version prints ("… release version 2.36."), a
// string of its read-only data, without running it. A loader that cannot
// be read, or holds no such text, is taken for a newer one.
func legacyLoader(root, interp string) bool {
	fsy, err := newFsys(Config{Root: root, WorkDir: "/"})
	if err != nil {
		return false
	}
	hp, err := fsy.host(interp)
	if err != nil {
		return false
	}
	f, err := elfedit.Open(hp)
	if err != nil {
		return false
	}
	defer f.Close()
	var major, minor int
	ok := false
	f.ReadOnlyStrings([]byte(releaseMarker), func(s []byte) bool {
		major, minor, ok = glibcRelease(s)
		return !ok
	})
	return ok && major == 2 && minor >= 26 && minor < 37
}

// releaseMarker precedes the version in a loader's --version text.
const releaseMarker = " release version "

// glibcRelease reads the glibc release from a loader's bytes: the version
// after " release version " (2.36 of "stable release version 2.36.", 2.37
// of "development release version 2.37.9000.").
func glibcRelease(data []byte) (major, minor int, ok bool) {
	i := bytes.Index(data, []byte(releaseMarker))
	if i < 0 {
		return 0, 0, false
	}
	rest := data[i+len(releaseMarker):]
	num := func() (int, bool) {
		n, k := 0, 0
		for k < len(rest) && k < 6 && rest[k] >= '0' && rest[k] <= '9' {
			n = n*10 + int(rest[k]-'0')
			k++
		}
		rest = rest[k:]
		return n, k > 0
	}
	major, ok1 := num()
	if !ok1 || len(rest) == 0 || rest[0] != '.' {
		return 0, 0, false
	}
	rest = rest[1:]
	minor, ok2 := num()
	if !ok2 {
		return 0, 0, false
	}
	return major, minor, true
}
