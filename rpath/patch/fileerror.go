package patch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// ErrorKind says what went wrong with one file; callers decide on it (the
// CLI's exit code), the report prints the error's text.
type ErrorKind int

// Error kinds, in the order a file meets them.
const (
	// ErrorUnknown is the kind of an error read back from a JSON report,
	// which holds only its text.
	ErrorUnknown ErrorKind = iota
	// ErrorRead: the file could not be opened or read.
	ErrorRead
	// ErrorResolve: a dependency's search could not be finished.
	ErrorResolve
	// ErrorNote: the resolution note could not be built.
	ErrorNote
	// ErrorPlan: the edit could not be planned or verified (a malformed
	// file, or one the engine refuses).
	ErrorPlan
	// ErrorPageSize: the file's machine cannot take the page size asked.
	ErrorPageSize
	// ErrorAudit: a planned RUNPATH entry failed the audit (wraps policy.ErrAudit).
	ErrorAudit
	// ErrorHardLinks: the file has other hard links that writing it would
	// change too (wraps elfedit.ErrHardLinks).
	ErrorHardLinks
	// ErrorClaim: the file could not be opened for writing and locked.
	ErrorClaim
	// ErrorWrite: writing the file failed.
	ErrorWrite
	// ErrorInternal: a bug, reported against the file.
	ErrorInternal
)

var errorKindNames = [...]string{"unknown", "read", "resolve", "note", "plan", "page-size", "audit", "hard-links", "claim", "write", "internal"}

func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) {
		return errorKindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// FileError is one error of one file: its kind, and its cause, whose text
// does not repeat the file's path (the report carries it once).
type FileError struct {
	Kind ErrorKind
	Err  error
}

func (e FileError) Error() string { return e.Err.Error() }
func (e FileError) Unwrap() error { return e.Err }

// MarshalJSON writes the error as its text.
func (e FileError) MarshalJSON() ([]byte, error) { return json.Marshal(e.Err.Error()) }

// UnmarshalJSON reads the text of an error; its kind is ErrorUnknown.
func (e *FileError) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*e = FileError{Kind: ErrorUnknown, Err: errors.New(s)}
	return nil
}

// addError records an error of out's file.
func (out *File) addError(kind ErrorKind, err error) {
	out.Errors = append(out.Errors, FileError{Kind: kind, Err: err})
}

// fileError is an error of the file at path, named.
func fileError(path string, err error) error {
	return fmt.Errorf("%s: %w", path, err)
}

// pathless is an error whose text leaves out the path of the file it is
// about; it unwraps to the error itself.
type pathless struct {
	msg string
	err error
}

func (p pathless) Error() string { return p.msg }
func (p pathless) Unwrap() error { return p.err }

// withoutPath is err with its text not naming path.
func withoutPath(path string, err error) error {
	return pathless{errMsg(path, err), err}
}

// errMsg is err's text without the file's path, which the report carries
// once.
func errMsg(path string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Op + ": " + pe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), path+": ")
}
