// Package nvdriver reads the facts about an installed NVIDIA driver that
// decide whether a CUDA program will start: the loaded kernel module's
// version, and the version of a libcuda file, from its name
// (libcuda.so.580.159.04) and from the version string the library carries.
// A libcuda whose version differs from the kernel module's fails with
// "driver/library version mismatch", unless it is cuda_compat's and newer
// (forward compatibility); cuda_compat's libcuda older than the kernel
// module fails with CUDA error 803; a link-time stub fails with "CUDA
// driver is a stub library".
//
// It uses the standard library only and reads files through io.ReaderAt.
package nvdriver

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// procVersion matches /proc/driver/nvidia/version's first line: "NVRM
// version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu …", or, for
// the open modules, "… Open Kernel Module for x86_64  580.159.04  Release
// Build …".
var procVersion = regexp.MustCompile(`Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9][0-9.]*)`)

// KernelModule returns the version of the loaded nvidia kernel module:
// from proc/driver/nvidia/version, else sys/module/nvidia/version (proc and
// sys are where procfs and sysfs are mounted). "" means no module is
// loaded.
//
// The selector's C reader takes the version at the start of every process
// that loads it, with fixed buffers; this reader keeps to the same bounds
// (maxVersionFile, maxModule), so that what the build, explain and doctor
// report is what the process takes, whatever the files hold.
func KernelModule(proc, sys string) string {
	if b, err := readHead(filepath.Join(proc, "driver/nvidia/version")); err == nil {
		for _, m := range procVersion.FindAllSubmatchIndex(b, -1) {
			if m[3]-m[2] <= maxModule {
				return string(b[m[2]:m[3]])
			}
		}
	}
	if b, err := readHead(filepath.Join(sys, "module/nvidia/version")); err == nil {
		if v := strings.Trim(string(b), asciiSpace); IsVersion(v) {
			return v
		}
	}
	return ""
}

// The bounds of KernelModule: the first maxVersionFile bytes of a file
// are read, and a version longer than maxModule bytes is passed over. The
// kernel's files are one short line.
const (
	maxVersionFile = 8191
	maxModule      = 63
)

// asciiSpace is what the sys file is trimmed of: ASCII white space only,
// as the C reader trims it (strings.TrimSpace would trim U+00A0 too).
const asciiSpace = " \t\n\v\f\r"

// readHead reads the first maxVersionFile bytes of a regular file (procfs
// and sysfs files are; a FIFO is refused at once, never waited on).
func readHead(path string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxVersionFile))
	if err != nil && len(b) == 0 {
		return nil, err
	}
	return b, nil
}

// driverVersion is an NVIDIA driver version: 580.159.04, 535.309.01,
// 570.86.10, 390.157.
var driverVersion = regexp.MustCompile(`^[1-9][0-9]{2}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)

// IsVersion reports whether s looks like an NVIDIA driver version.
func IsVersion(s string) bool { return driverVersion.MatchString(s) }

// NameVersion returns the version in a libcuda file name:
// libcuda.so.580.159.04 gives 580.159.04; libcuda.so.1 and libcuda.so
// give "".
func NameVersion(name string) string {
	v, ok := strings.CutPrefix(filepath.Base(name), "libcuda.so.")
	if !ok || !IsVersion(v) {
		return ""
	}
	return v
}

// Compare compares dotted numeric versions: -1, 0 or +1. Missing parts,
// and parts that are not all digits, count as 0; parts compare as numbers
// of any length (580.0159 equals 580.159), so that the selector's C
// comparison, which has no integer type to overflow, gives the same
// answer on every machine.
func Compare(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y string
		if i < len(as) {
			x = digits(as[i])
		}
		if i < len(bs) {
			y = digits(bs[i])
		}
		if c := cmp.Compare(len(x), len(y)); c != 0 {
			return c
		}
		if c := strings.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

// digits is a version part's number as its digits without leading zeros:
// "" (zero) when the part is empty or not all digits.
func digits(part string) string {
	if part == "" || strings.Trim(part, "0123456789") != "" {
		return ""
	}
	return strings.TrimLeft(part, "0")
}

// Libcuda is what the bytes of a libcuda file say about it.
type Libcuda struct {
	// Version is the driver version the library carries: the NUL-ended
	// string "580.159.04" the real libcuda has in its read-only data,
	// which it compares with the kernel module's at cuInit. "" when the
	// file carries none, or several that nothing tells apart.
	Version string `json:"version,omitempty"`
	// Stub is set for a file that is no driver: no version string and no
	// reference to /proc/driver/nvidia or /dev/nvidia*, which every real
	// libcuda opens (the toolkit's stubs/libcuda.so, made for linking
	// only).
	Stub bool `json:"stub,omitempty"`
}

// maxLibcuda bounds how much of a file is scanned: real libcuda files are
// 30 to 100 MiB.
const maxLibcuda = 1 << 30

// chunk is how much is read at a time; strings across chunk boundaries
// are kept by carrying the unfinished one over.
const chunk = 1 << 20

// ReadLibcuda scans a libcuda file for its version string and for the
// marks of a real driver. The version is a NUL-delimited string that is a
// driver version; when several are found, the one that also ends a
// library name in the file (libnvidia-pkcs11.so.580.159.04) or the
// application-profiles path (nvidia-application-profiles-580.159.04-rc)
// wins, as those are built from the same version.
func ReadLibcuda(r io.ReaderAt, size int64) (Libcuda, error) {
	if size > maxLibcuda {
		return Libcuda{}, fmt.Errorf("%d bytes: more than the %d a libcuda may have", size, maxLibcuda)
	}
	count := map[string]int{}
	var suffixes []string // strings ending in a version after "so." or before "-rc"
	proc := false
	var carry []byte
	buf := make([]byte, chunk)
	procMark, devMark, soMark, rcMark := []byte("/proc/driver/nvidia"), []byte("/dev/nvidia"), []byte(".so."), []byte("-rc")
	scan := func(s []byte) {
		switch {
		case len(s) < 5 || len(s) > 4096:
		case len(s) <= 11 && s[0] >= '1' && s[0] <= '9' && driverVersion.Match(s):
			count[string(s)]++
		case bytes.Contains(s, procMark) || bytes.Contains(s, devMark):
			proc = true
		case bytes.Contains(s, soMark) || bytes.Contains(s, rcMark):
			if len(suffixes) < 1024 {
				suffixes = append(suffixes, string(s))
			}
		}
	}
	for off := int64(0); off < size; off += chunk {
		n, err := r.ReadAt(buf[:min(chunk, size-off)], off)
		if err != nil && !(errors.Is(err, io.EOF) && int64(n) == min(chunk, size-off)) {
			return Libcuda{}, fmt.Errorf("reading at 0x%x: %w", off, err)
		}
		data := buf[:n]
		for {
			i := bytes.IndexByte(data, 0)
			if i < 0 {
				carry = append(carry, data...)
				if len(carry) > 4096 {
					carry = carry[len(carry)-4096:]
				}
				break
			}
			if len(carry) > 0 {
				scan(append(carry, data[:i]...))
				carry = carry[:0]
			} else {
				scan(data[:i])
			}
			data = data[i+1:]
		}
	}
	out := Libcuda{Version: pickVersion(count, suffixes)}
	out.Stub = out.Version == "" && !proc
	return out, nil
}

// pickVersion chooses among the version strings found: the only one, or
// the only one that a library name or profile path in the file confirms.
func pickVersion(count map[string]int, suffixes []string) string {
	if len(count) == 1 {
		for v := range count {
			return v
		}
	}
	found := ""
	for v := range count {
		for _, s := range suffixes {
			if strings.HasSuffix(s, ".so."+v) || strings.Contains(s, "-"+v+"-rc") {
				if found != "" && found != v {
					return "" // two confirmed: nothing tells them apart
				}
				found = v
			}
		}
	}
	return found
}

// ReadLibcudaFile is ReadLibcuda on the file at path.
func ReadLibcudaFile(path string) (Libcuda, error) {
	f, err := openRegular(path)
	if err != nil {
		return Libcuda{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Libcuda{}, err
	}
	l, err := ReadLibcuda(f, st.Size())
	if err != nil {
		return Libcuda{}, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// openRegular opens a regular file for reading, non-blocking: a FIFO
// would wait for a writer.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}
