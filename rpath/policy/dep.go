package policy

import "errors"

// ErrAudit means a planned RUNPATH failed the audit.
var ErrAudit = errors.New("RUNPATH audit failed")

// How a dependency was satisfied.
const (
	HowStore    = "resolved" // found in the index; its directory is in the RUNPATH
	HowLibc     = "libc"     // in the libc directory, found by the interpreter
	HowDriver   = "driver"   // an NVIDIA driver library, found through the driver link
	HowAbsolute = "absolute" // DT_NEEDED is an absolute path that exists
	HowIgnored  = "ignored"  // missing, but matched an ignore pattern
	HowMissing  = "missing"
	// HowFound is a name DiscoverDlopen found that the index resolves,
	// under DlopenReport, or in a file that does not import dlopen (its
	// callers get the directory, see dlopenCallers): reported, given no
	// RUNPATH entry in this file.
	HowFound = "found"
	// HowUnresolved is a name DiscoverDlopen found that nothing
	// satisfies: reported, never an error (it may be optional, or no
	// library name at all).
	HowUnresolved = "unresolved"
	// HowVersioned is a name DiscoverDlopen found without a version
	// ("libcudnn_graph.so") that no file has, where a file of that name
	// and a version does ("libcudnn_graph.so.9"): its caller appends the
	// version at run time. Under DlopenResolve its directory is in the
	// RUNPATH; it gets no note entry (the program never asks for the
	// Unversioned name, and which version it asks for is not known).
	HowVersioned = "versioned"
	// HowOutsideCaller is a name held by a file that does not call
	// dlopen but hands its names to a loader function (LoaderFunctions)
	// of a library outside the outputs: that library makes the call and
	// glibc searches its RUNPATH, which this run does not write, so no
	// RUNPATH entry here can make it load. Reported with a Hint, never
	// an error.
	HowOutsideCaller = "outside-caller"
)

// Where a dependency comes from (Dep.Source).
const (
	SourceNeeded  = "needed"        // DT_NEEDED
	SourceDlopen  = "dlopen"        // a .note.dlopen entry
	SourceStrings = "dlopen-string" // a string of a dlopen caller's read-only data (DiscoverDlopen)
	SourcePrefix  = "dlopen-prefix" // a library matching a soname prefix of that data (IsSonamePrefix)
	// SourceSibling is a DT_NEEDED of another file of a dlopen caller's
	// output, given to the caller for names it builds in code.
	SourceSibling = "dlopen-sibling"
	// SourceAddNeeded is a name a holder hands to a loader function
	// outside the outputs (HowOutsideCaller) that the run makes a
	// DT_NEEDED of the holder, on request: the loader then maps it when
	// the holder is loaded, through the holder's own RUNPATH.
	SourceAddNeeded = "add-needed"
)

// Kinds of Evidence.
const (
	EvidenceWhole  = "whole"  // the string is the name (or the name without its version)
	EvidencePrefix = "prefix" // the string is a soname prefix the name matches
	EvidenceNote   = "note"   // a .note.dlopen entry names it
	// EvidenceCode: the string is the name's CodeWord, held in the file's
	// executable code, and another file of the caller's output needs the
	// name (Dep.From).
	EvidenceCode = "code"
)

// CodeWord is what of a library name a program that builds the name in
// code holds there: its first eight bytes, the operand of a mov of a
// 64-bit immediate ("libnvrtc" of "libnvrtc.so.13"), or the whole name
// when it is shorter.
func CodeWord(name string) string { return name[:min(len(name), 8)] }

// Evidence is what brought a name that is no DT_NEEDED into a file's
// decisions: the string, in which file, of which kind.
type Evidence struct {
	File   string `json:"file"`
	String string `json:"string"`
	Kind   string `json:"kind"`
}

// Dep is the decision about one dependency.
type Dep struct {
	Name   string `json:"name"`
	Source string `json:"source"` // SourceNeeded, SourceDlopen, SourceStrings or SourcePrefix
	How    string `json:"how"`
	Path   string `json:"path,omitempty"` // the library file chosen
	Dir    string `json:"dir,omitempty"`  // the directory it was found in
	// Entry is the RUNPATH entry that reaches Dir when it is not Dir
	// itself: an old $ORIGIN entry kept by Config.PreserveOrigin, or Dir
	// made relative by Config.RelativeStore or Config.RelativizeRoot.
	Entry string `json:"entry,omitempty"`
	// Pattern is the first ignore-missing pattern that matches a
	// dependency nothing satisfied (or a driver library).
	Pattern string `json:"pattern,omitempty"`
	Hint    string `json:"hint,omitempty"`
	// From is, for a name this file did not find itself, the file that
	// holds it: this file imports dlopen and may be the caller that
	// dlopens the name for it (see dlopenCallers).
	From string `json:"from,omitempty"`
	// Evidence says, for a name that is no DT_NEEDED, which string of
	// which file brought it.
	Evidence Evidence `json:"evidence,omitzero"`

	// ResolvedHow is how a HowFound name of a file that cannot call
	// dlopen was resolved (HowStore, HowVersioned), for its callers; not
	// reported.
	ResolvedHow string `json:"-"`
}
