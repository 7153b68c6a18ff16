package patch

import (
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// shrinkKept shrinks the search path a file keeps (cudapatch gives it no
// RUNPATH of its own) as patchelf --shrink-rpath would, in the same edit:
// nixpkgs' fixupPhase runs that on every ELF file (patchelf's setup hook),
// and the hook takes that pass over with WriteOptions.ShrinkKept. Like patchelf, a
// DT_RPATH becomes DT_RUNPATH, and the path is not audited: it is the
// vendor's, less some entries.
func shrinkKept(info elfedit.Info, e *elfedit.Edit) {
	old, isRPath := "", false
	switch {
	case info.RunPath != nil:
		old = *info.RunPath
	case info.RPath != nil:
		old, isRPath = *info.RPath, true
	default:
		return
	}
	kept, _ := policy.ShrinkPath(old, info.Needed, nil, info.ELFMachine(), policy.ProbeMachine)
	switch {
	case kept == "":
		e.RemovePath = true
	case kept != old || isRPath:
		e.SetPath = &kept
	}
}
