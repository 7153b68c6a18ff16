package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// fileProblem says in a few words why the file a user named (name, at host
// on disk: they differ under --root) cannot be read as an ELF file, before
// the ELF reader tries (doctor, whose reading also opens other paths): "no such file or directory", "permission denied",
// "is a directory, not an ELF file". The reader's own errors for these
// name the path twice ("X: open X: …") or its internals ("ELF
// identification: reading 0x10 bytes at 0x0: read X: is a directory").
// It returns "" for a file to read.
//
// A FIFO, socket or device is refused as "not a regular file" from its
// stat, before anything opens it: opening a FIFO for reading waits for a
// writer, opening a device may act on it.
func fileProblem(name, host string) string {
	st, err := os.Stat(host)
	switch {
	case err != nil:
		return pathProblem(name, host, err)
	case st.IsDir():
		return isDirectory
	case !st.Mode().IsRegular():
		return notRegular
	}
	// Non-blocking, so that a path swapped for a FIFO since the stat
	// is not waited on.
	f, err := os.OpenFile(host, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return pathProblem(name, host, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return notRegular
	}
	return ""
}

// notRegular is elfedit.ErrNotRegular's message.
const notRegular = "not a regular file"

const isDirectory = "is a directory, not an ELF file"

// openProblem is fileProblem for a file the ELF reader already failed to
// open or read, from the reader's error: "" when the error is not about
// the path itself (a corrupt file keeps the reader's message, which names
// the offset). Commands that read many files use it rather than opening
// each file once more beforehand.
func openProblem(name, host string, err error) string {
	if errors.Is(err, syscall.EISDIR) {
		return isDirectory
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		return pathProblem(name, host, err)
	}
	return ""
}

// pathProblem is err without the path it repeats; the path on disk is
// added when it is not the name shown.
func pathProblem(name, host string, err error) string {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	if host != name {
		return fmt.Sprintf("%v (%s)", pe.Err, host)
	}
	return pe.Err.Error()
}

// hasELFMagic says whether the regular file at path starts with the ELF
// magic.
func hasELFMagic(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var magic [len(elf.ELFMAG)]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		return false, err
	}
	return bytes.Equal(magic[:], []byte(elf.ELFMAG)), nil
}
