package policy

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

// Config is the RUNPATH policy's configuration: what the options of the
// main job set that decides a file's RUNPATH, interpreter and note
// entries once its dependencies are resolved.
type Config struct {
	// Interpreter is set on every file that has one ("" keeps it).
	Interpreter string
	// CudaCompat is a cuda_compat directory put ahead of the driver link.
	CudaCompat string
	// DriverLink and DriverLink32 are the driver link directories of
	// 64-bit and 32-bit x86 files; DriverLinkFor says who gets one.
	DriverLink    string
	DriverLink32  string
	DriverLinkFor DriverLinkPolicy
	// RuntimeDeps come first in the RUNPATH of executables.
	RuntimeDeps []string
	// AppendRunpaths are appended to every RUNPATH, verbatim.
	AppendRunpaths []string
	// PreserveOrigin keeps the old $ORIGIN entries.
	PreserveOrigin bool
	// RelativeStore and RelativizeRoot make entries relative (see
	// WithRelativeRpaths, WithRelativizeRpath).
	RelativeStore  string
	RelativizeRoot bool
	// BuildDirs are the directories no entry may point into (the audit).
	BuildDirs []string
	// Dlopen says what the names dlopen discovery found become.
	Dlopen DlopenMode
	// ForceRPath writes the search path as DT_RPATH.
	ForceRPath bool
}
