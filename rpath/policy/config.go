package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultDriverLink is where NixOS links the running NVIDIA driver's
// libraries.
const DefaultDriverLink = "/run/opengl-driver/lib"

// DefaultDriverLink32 is the driver link of 32-bit x86 programs.
const DefaultDriverLink32 = "/run/opengl-driver-32/lib"

// DriverLinkPolicy says which files get the driver link in their RUNPATH.
type DriverLinkPolicy string

const (
	// DriverLinkAll adds it to every dynamic ELF file, as nixpkgs'
	// autoAddDriverRunpath does: libcudart and libcublasLt dlopen libcuda
	// through their own RUNPATH without naming it anywhere.
	DriverLinkAll DriverLinkPolicy = "all"
	// DriverLinkNeeded adds it only to files that need a driver library
	// (DT_NEEDED or .note.dlopen).
	DriverLinkNeeded DriverLinkPolicy = "needed"
	// DriverLinkNone never adds it.
	DriverLinkNone DriverLinkPolicy = "none"
)

// Config is the RUNPATH policy's configuration: what decides a file's
// RUNPATH, interpreter and note entries once its dependencies are
// resolved. The main job (patch.Config.Policy) and lint (lint.Options.Policy)
// take the same struct, so that the flags they share have one meaning:
// lint is told what the main job was asked.
//
// The zero value of each field means its default; Resolved fills the
// defaults in, and Decide wants a resolved Config.
type Config struct {
	// Interpreter is set on every file that has one; "" keeps it. Lint
	// reads the architecture of this interpreter file and skips the
	// files the main job skips for theirs.
	Interpreter string
	// CudaCompat is a cuda_compat directory (absolute) put ahead of the
	// driver link; "" is none.
	CudaCompat string
	// DriverLink is the driver link directory (absolute) of 64-bit
	// files; "" means DefaultDriverLink.
	DriverLink string
	// DriverLink32 is the driver link of 32-bit x86 files; "" means
	// DriverLink with /opengl-driver/ replaced by /opengl-driver-32/.
	DriverLink32 string
	// DriverLinkFor says which files get the driver link; "" means
	// DriverLinkAll.
	DriverLinkFor DriverLinkPolicy
	// RuntimeDeps come first in the RUNPATH of executables, used as
	// given (nixpkgs' runtimeDependencies, whose hook appends /lib).
	RuntimeDeps []string
	// AppendRunpaths are appended to every RUNPATH, verbatim ($ORIGIN
	// allowed).
	AppendRunpaths []string
	// PreserveOrigin keeps the $ORIGIN entries of the old RUNPATH.
	PreserveOrigin bool
	// RelativeStore, a store directory (absolute), makes the entries
	// under it relative to a file under it too
	// ("$ORIGIN/../../<hash>-dep/lib"), so that a copied closure can
	// move: auto-patchelf's --relative-rpaths. The cuda_compat
	// directory and the driver link stay absolute. "" is off.
	RelativeStore string
	// RelativizeRoot makes the entries under the path a file was found
	// under (one given to the main job) relative to the file:
	// auto-patchelf's --relativize-rpath.
	RelativizeRoot bool
	// BuildDirs are the directories no entry may point into (the
	// audit). nil means [/build], the Nix sandbox's build directory; an
	// empty non-nil slice means none. Lint takes them as directories
	// besides /build and /tmp.
	BuildDirs []string
	// Dlopen says what the library names found by dlopen discovery
	// (DiscoverDlopen) become; "" means DlopenResolve.
	Dlopen DlopenMode
	// ForceRPath writes the search path as DT_RPATH (patchelf
	// --force-rpath).
	ForceRPath bool
	// IgnoreMissing are Python fnmatch patterns (rpath/fnmatch; "*"
	// matches all) of the base names of missing dependencies that are
	// no error of the main job and no finding of lint. Decide does not
	// read them.
	IgnoreMissing []string
}

// Validate reports every value of c that is wrong, in one joined error.
func (c *Config) Validate() error {
	var errs []error
	if c.CudaCompat != "" && !filepath.IsAbs(c.CudaCompat) {
		errs = append(errs, fmt.Errorf("cuda_compat directory %q is not absolute", c.CudaCompat))
	}
	if c.DriverLink != "" && !filepath.IsAbs(c.DriverLink) {
		errs = append(errs, fmt.Errorf("driver link %q is not absolute", c.DriverLink))
	}
	switch c.DriverLinkFor {
	case "", DriverLinkAll, DriverLinkNeeded, DriverLinkNone:
	default:
		errs = append(errs, fmt.Errorf("driver link policy %q: want all, needed or none", c.DriverLinkFor))
	}
	if c.RelativeStore != "" && !filepath.IsAbs(c.RelativeStore) {
		errs = append(errs, fmt.Errorf("store directory %q is not absolute", c.RelativeStore))
	}
	if slices.Contains(c.IgnoreMissing, "") {
		errs = append(errs, errors.New("empty ignore-missing pattern"))
	}
	if c.Dlopen != "" && !slices.Contains(DlopenModes, c.Dlopen) {
		errs = append(errs, fmt.Errorf("dlopen mode %q: want off, report or resolve", c.Dlopen))
	}
	return errors.Join(errs...)
}

// Resolved returns a copy of c with the defaults of its zero fields
// filled in: what Decide reads. c is not changed.
func (c *Config) Resolved() Config {
	r := *c
	if r.DriverLink == "" {
		r.DriverLink = DefaultDriverLink
	}
	if r.DriverLink32 == "" {
		r.DriverLink32 = strings.Replace(r.DriverLink, "/opengl-driver/", "/opengl-driver-32/", 1)
	}
	if r.DriverLinkFor == "" {
		r.DriverLinkFor = DriverLinkAll
	}
	if r.BuildDirs == nil {
		r.BuildDirs = []string{"/build"}
	}
	if r.Dlopen == "" {
		r.Dlopen = DlopenResolve
	}
	if r.RelativeStore != "" {
		r.RelativeStore = filepath.Clean(r.RelativeStore)
	}
	return r
}
