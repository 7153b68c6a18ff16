//go:build ignore

// measure runs one command and appends one tab-separated line of what it
// cost to a file:
//
//	label wall_s user_s sys_s maxrss_kib rchar wchar read_bytes write_bytes exit
//
// wall_s is the monotonic clock around fork+exec+wait. user_s, sys_s and
// maxrss_kib come from wait4's rusage, which covers the command and every
// descendant it waited for (maxrss is the largest single process, as
// /usr/bin/time -v reports it). The I/O columns are the difference of this
// process's /proc/self/io across the run: when a child is reaped the kernel
// adds its counters, and those of its own reaped descendants, to the
// parent's, so a bash script that runs thousands of patchelf processes is
// counted in full. rchar/wchar are the bytes passed to read/write-like
// system calls (page cache hits included); read_bytes/write_bytes are what
// the block layer was asked for (write_bytes counts whole pages dirtied).
//
// Usage: go run bench/measure.go OUT LABEL -- CMD ARGS...
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func procIO() (map[string]int64, error) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, sc.Err()
}

func main() {
	if len(os.Args) < 5 || os.Args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: measure OUT LABEL -- CMD ARGS...")
		os.Exit(2)
	}
	out, label, argv := os.Args[1], os.Args[2], os.Args[4:]
	before, err := procIO()
	if err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
	after, err := procIO()
	if err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	line := fmt.Sprintf("%s\t%.6f\t%.6f\t%.6f\t%d\t%d\t%d\t%d\t%d\t%d\n", label,
		wall.Seconds(), cmd.ProcessState.UserTime().Seconds(), cmd.ProcessState.SystemTime().Seconds(),
		ru.Maxrss,
		after["rchar"]-before["rchar"], after["wchar"]-before["wchar"],
		after["read_bytes"]-before["read_bytes"], after["write_bytes"]-before["write_bytes"], code)
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
	os.Exit(code)
}
