// Package nvdrivertest reads the compat-or-driver table that
// nvdriver.Choose's test and the selector's C decision share.
package nvdrivertest

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
)

// Row is one line of testdata/choose.txt.
type Row struct {
	Line    string
	Compat  nvdriver.Compat
	Machine nvdriver.Machine
	Want    nvdriver.Use
	Reason  string
}

// ChooseTable reads rpath/nvdriver/testdata/choose.txt.
func ChooseTable(tb testing.TB) []Row {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(self), "..", "testdata", "choose.txt")
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var rows []Row
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, " | ")
		if len(f) != 6 {
			tb.Fatalf("%s: %d columns, want 6: %q", path, len(f), line)
		}
		r := Row{Line: line, Want: nvdriver.Use(f[4]), Reason: f[5]}
		switch f[0] {
		case "-":
		case "nvgpu":
			r.Machine.Tegra = true
		default:
			r.Machine.Module = f[0]
		}
		if f[1] != "-" {
			r.Compat.Version = f[1]
		}
		switch f[2] {
		case "-":
		case "*":
			r.Compat.Note = &nvdriver.CompatNote{Format: 1}
		default:
			r.Compat.Note = &nvdriver.CompatNote{Format: 1, Driver: ints(tb, f[2])}
		}
		if f[3] != "-" {
			r.Machine.Devices = ints(tb, f[3])
			if r.Compat.Note != nil {
				r.Compat.Note.Device = []int{1, 2, 7, 8, 9, 10}
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func ints(tb testing.TB, s string) []int {
	var out []int
	for _, x := range strings.Split(s, ",") {
		n, err := strconv.Atoi(x)
		if err != nil {
			tb.Fatalf("%q: %v", s, err)
		}
		out = append(out, n)
	}
	return out
}

// NoteAsm is C source that gives the library it is compiled into a
// .note.cuda.fwd_compatibility section holding desc (JSON), owner
// "NVIDIA Corporation", laid out as cuda_compat's libcuda has it.
func NoteAsm(desc string) string {
	return `__asm__(".pushsection .note.cuda.fwd_compatibility,\"a\",%note\n" ` +
		`".balign 4\n.long 2f-1f\n.long 4f-3f\n.long 0\n1: .asciz \"NVIDIA Corporation\"\n2: .balign 4\n" ` +
		`"3: .ascii \"` + strings.ReplaceAll(desc, `"`, `\\\"`) + `\"\n.byte 0\n4: .balign 4\n.popsection\n");` + "\n"
}
