package selector_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// fuzzCompats are the cuda_compat sides FuzzDecision picks from: none, and
// two versions with and without a branch list.
var fuzzCompats = []struct {
	version  string
	branches []int
}{
	{},
	{version: "580.95.05"},
	{version: "580.95.05", branches: []int{535, 550, 565, 570, 575, 580}},
	{version: "535.261.03", branches: []int{470, 525}},
	// A note no real library has: a branch past 32 bits (580 in its low
	// bits) and one below 100.
	{version: "580.95.05", branches: []int{1<<32 + 580, 99}},
}

// FuzzDecision: whatever proc/driver/nvidia/version and
// sys/module/nvidia/version hold, the selector's C reader and decision
// (what runs at the start of every process that loads it) and
// nvdriver.KernelModule and Choose (what explain, doctor and the build
// report) take the same module version and make the same choice.
//
//	go test ./rpath/selector -run=- -fuzz=FuzzDecision -fuzztime=5m
func FuzzDecision(f *testing.F) {
	a := arches()[0]
	a.need(f)
	// One decider for each compat, deciding with the constants generated
	// from it, as the library does; none has none.
	progs := make([]string, len(fuzzCompats))
	for i, c := range fuzzCompats {
		info := &nvdriver.Compat{Version: c.version}
		if c.version == "" {
			info = nil
		} else if c.branches != nil {
			info.Note = &nvdriver.CompatNote{Driver: c.branches}
		}
		progs[i] = specDecider(f, a, info)
	}
	for i, v := range []string{"580.159.04", "535.261.03", "570.86.10", "390.157"} {
		f.Add([]byte(procLine(i%2, v)), []byte(v+"\n"), uint8(i*9))
	}
	f.Add([]byte("Kernel Module for aarch64\t565.57.01 rest\n"), []byte(" 550.54.15 \n"), uint8(0x1f))
	f.Add([]byte("x\x00y Kernel Module  580.1.2\n"), []byte("loaded\n"), uint8(0x2b))
	f.Add([]byte{}, []byte("\v530.30.02\u00a0"), uint8(0x26))
	// Parts past 64 bits, against compat 580.95.05 with its branches.
	f.Add([]byte("Kernel Module 580.99999999999999999999\n"), []byte{}, uint8(0x11))
	f.Add([]byte("Kernel Module 0000000000000000000580.0000000000000000000094.9\n"), []byte{}, uint8(0x11))
	f.Add([]byte("Kernel Module 580.65.06\n"), []byte{}, uint8(0x21))
	f.Add([]byte("Kernel Module 099.1\n"), []byte{}, uint8(0x21))
	f.Fuzz(func(t *testing.T, proc, sys []byte, mode uint8) {
		dir := t.TempDir()
		procRoot, sysRoot := filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
		procFile := filepath.Join(procRoot, "driver/nvidia/version")
		sysFile := filepath.Join(sysRoot, "module/nvidia/version")
		nvgpu := filepath.Join(sysRoot, "module/nvgpu")
		if mode&1 != 0 {
			write(t, procFile, string(proc))
		}
		if mode&2 != 0 {
			write(t, sysFile, string(sys))
		}
		if mode&4 != 0 {
			if err := os.MkdirAll(nvgpu, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		k := int(mode>>3) % len(fuzzCompats)
		c := fuzzCompats[k]
		compat := nvdriver.Compat{Version: c.version}
		cArg, bArg := "-", "-"
		if c.version != "" {
			cArg, bArg = "spec", "spec"
		}
		if c.branches != nil {
			compat.Note = &nvdriver.CompatNote{Driver: c.branches}
		}
		m := nvdriver.ReadMachine(procRoot, sysRoot)
		module := m.Module
		if module == "" {
			module = "-"
		}
		want := fmt.Sprintf("%s %s\n", nvdriver.Choose(compat, m).Use, module)
		got, err := a.exec(t, nil, progs[k], procFile, sysFile, cArg, bArg, nvgpu)
		if err != nil {
			t.Fatalf("decider: %v: %s", err, got)
		}
		if got != want {
			t.Errorf("proc %q sys %q compat %q %v: the selector says %q, Go %q", proc, sys, c.version, c.branches, got, want)
		}
	})
}

// FuzzForCompat: whatever bytes cuda_compat's libcuda holds (its note,
// its exported names, its headers), ForCompat gives a one-line error
// naming the file, or a Spec whose source Source writes and the C
// compiler compiles and assembles: nothing read from the library can
// break or inject into the generated C.
//
//	go test ./rpath/selector -run=- -fuzz=FuzzForCompat -fuzztime=5m
func FuzzForCompat(f *testing.F) {
	a := arches()[0]
	a.need(f)
	for i, note := range []string{compatNote, `{"format":1,"driver":[4294967876,-1],"device":[]}`, ""} {
		dir := f.TempDir()
		lib := filepath.Join(dir, fmt.Sprintf("seed%d.so", i))
		c := write(f, filepath.Join(dir, "seed.c"), fakeSource("compat", 13000, true, note)+"int cu\\u00e9(void) { return 1; }\n")
		a.compile(f, "-shared", "-fPIC", "-fextended-identifiers", "-Wl,-soname,libcuda.so.1", "-o", lib, c)
		b, err := os.ReadFile(lib)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		compat := write(t, filepath.Join(dir, "compat", "libcuda.so.580.95.05"), string(data))
		if err := os.Symlink("libcuda.so.580.95.05", filepath.Join(dir, "compat", selector.Name)); err != nil {
			t.Fatal(err)
		}
		spec, err := selector.ForCompat(filepath.Join(dir, "compat"), []string{"/run/opengl-driver/lib/libcuda.so.1"})
		if err != nil {
			if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || !strings.Contains(msg, compat) && !strings.Contains(msg, "cuda_compat") {
				t.Fatalf("error not one line naming the file: %q", msg)
			}
			return
		}
		src, err := selector.Source(spec)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		c := write(t, filepath.Join(dir, "sel.c"), string(src))
		out, err := exec.Command(a.cc, "-c", "-fPIC", "-O0", "-o", filepath.Join(dir, "sel.o"), c).CombinedOutput()
		if err != nil {
			t.Fatalf("the source of a Spec ForCompat accepted does not compile: %v\n%s", err, out)
		}
	})
}
