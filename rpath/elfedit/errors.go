package elfedit

import (
	"errors"
	"fmt"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// FormatError reports a malformed or unsupported file. It carries the file
// offset of the record at fault so that a message can be checked with a hex
// dump.
type FormatError struct {
	Off int64  // file offset of the offending record, -1 if none
	Msg string // what is wrong
}

func (e *FormatError) Error() string {
	if e.Off < 0 {
		return e.Msg
	}
	return fmt.Sprintf("%s (at 0x%x)", e.Msg, e.Off)
}

var _ error = (*FormatError)(nil)

// formatErr makes a FormatError. Its message names what the file holds
// (section names, note owners), escaped so that it stays one line.
func formatErr(off int64, format string, args ...any) error {
	return &FormatError{Off: off, Msg: printable.String(fmt.Sprintf(format, args...))}
}

// Sentinel errors callers branch on.
var (
	// ErrNotELF means the file does not start with the ELF magic.
	ErrNotELF = errors.New("not an ELF file")
	// ErrInterrupted means a plan was asked of a file that ends in the
	// journal of an interrupted edit, read as it is (NewFile, Open):
	// only a file read to edit (NewFileToEdit, OpenForEdit) finishes or
	// undoes that edit first.
	ErrInterrupted = errors.New("ends in the journal of an interrupted edit: read it to edit (OpenForEdit) to finish or undo that edit first")
	// ErrNotRegular means the path names a FIFO, socket or device: it is
	// refused before it is opened for reading.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotDynamic means an edit of dynamic-linking data was asked of a file
	// that has no PT_DYNAMIC (a static executable, an object file).
	ErrNotDynamic = errors.New("no dynamic section (statically linked?)")
	// ErrNoInterpreter means the interpreter of a file without PT_INTERP was
	// asked to be changed.
	ErrNoInterpreter = errors.New("no PT_INTERP (not a dynamically linked executable)")
	// ErrSelfRelocating means a search path was asked of a static PIE or a
	// dynamic loader: their startup code relocates them before anything
	// else runs and asserts that their .dynamic has no DT_RUNPATH or
	// DT_RPATH, so the result would crash before main.
	ErrSelfRelocating = errors.New("self-relocating object")
	// ErrHardLinks means the file has several hard links and the caller did
	// not allow breaking them: editing in place would silently change the
	// other paths too.
	ErrHardLinks = errors.New("file has several hard links")
	// ErrRefusedInput means the file breaks a verifier rule no edit is
	// made over (refusedRules): nothing was written.
	ErrRefusedInput = errors.New("not editing a file the verifier rejects")
	// ErrVerify means the result of a plan failed the verifier; nothing was
	// written.
	ErrVerify = errors.New("result would be invalid")
)

// HardLinkError is ErrHardLinks with the file's link count; a caller
// that checks before editing (a tree that is written only when every
// file can be) reports it with the same words as EditFile.
type HardLinkError struct{ Links uint64 }

func (e *HardLinkError) Error() string {
	return fmt.Sprintf("%v (%d links): refusing to change the other paths too", ErrHardLinks, e.Links)
}

// Unwrap makes errors.Is(err, ErrHardLinks) hold.
func (e *HardLinkError) Unwrap() error { return ErrHardLinks }
