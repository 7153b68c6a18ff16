package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cudapatch/cudapatch/rpath/selector"
)

// selectorBuild is where Config.Selector builds the selector, and
// with which C compiler.
// proc and sys, set only by tests, are where the selector reads the
// machine ("": /proc and /sys).
type selectorBuild struct {
	dir       string
	cc        []string
	proc, sys string
}

// prepareCompat settles the cuda_compat entry before any file is decided:
// a selector is used as it is; cuda_compat's own libcuda gets its selector
// built (Config.Selector), which then takes its place; a directory
// without a libcuda is kept as given.
func (c *job) prepareCompat(ctx context.Context) error {
	if c.CudaCompat == "" {
		if c.selector.dir != "" {
			return errors.New("a selector directory needs a cuda_compat directory (--cuda-compat)")
		}
		return nil
	}
	lib := filepath.Join(c.CudaCompat, selector.Name)
	_, err := selector.Read(lib)
	switch {
	case err == nil:
		return nil // a selector already
	case errors.Is(err, fs.ErrNotExist):
		return nil // no libcuda to choose: nothing shadows the driver
	case !errors.Is(err, selector.ErrNotSelector):
		return fmt.Errorf("cuda_compat: %w", err)
	case c.selector.dir == "":
		return fmt.Errorf("cuda_compat: %s is cuda_compat's own libcuda, which fails with CUDA error 803 on a driver not older than it: "+
			"give a selector directory (--cuda-compat-selector DIR) to build the libcuda.so.1 that chooses between it and the driver when each process starts", lib)
	}
	spec, err := selector.ForCompat(c.CudaCompat, []string{filepath.Join(c.DriverLink, selector.Name)})
	if err != nil {
		return err
	}
	spec.Proc, spec.Sys = c.selector.proc, c.selector.sys
	if !c.dryRun {
		if err := os.MkdirAll(c.selector.dir, 0o755); err != nil {
			return fmt.Errorf("selector: %w", err)
		}
		if err := selector.Build(ctx, spec, c.selector.cc, c.selector.dir); err != nil {
			return err
		}
	}
	c.CudaCompat = c.selector.dir
	return nil
}
