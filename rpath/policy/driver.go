package policy

import (
	"path"
	"path/filepath"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// DriverLibraries are fnmatch patterns of the libraries that come with the
// NVIDIA driver. They must match the running kernel module, so they are
// never taken from the store: the loader finds them through the driver link
// (/run/opengl-driver/lib on NixOS, which the system fills from the
// configured driver). A toolkit's stub copies of them must never be reached
// at run time ("CUDA driver is a stub library").
var DriverLibraries = []string{
	"libcuda.so*",
	"libcudadebugger.so*",
	"libnvcuvid.so*",
	"libnvidia-allocator.so*",
	"libnvidia-cfg.so*",
	"libnvidia-eglcore.so*",
	"libnvidia-encode.so*",
	"libnvidia-fbc.so*",
	"libnvidia-glcore.so*",
	"libnvidia-glsi.so*",
	"libnvidia-glvkspirv.so*",
	"libnvidia-gpucomp.so*",
	"libnvidia-ml.so*",
	"libnvidia-ngx.so*",
	"libnvidia-nvvm.so*",
	"libnvidia-opencl.so*",
	"libnvidia-opticalflow.so*",
	"libnvidia-pkcs11*.so*",
	"libnvidia-ptxjitcompiler.so*",
	"libnvidia-rtcore.so*",
	"libnvidia-tls.so*",
	"libnvoptix.so*",
	"libGLX_nvidia.so*",
	"libEGL_nvidia.so*",
	"libGLESv1_CM_nvidia.so*",
	"libGLESv2_nvidia.so*",
}

// DriverMatcher matches driver library names.
type DriverMatcher struct{ set *fnmatch.Set }

func NewDriverMatcher(patterns []string) DriverMatcher {
	return DriverMatcher{fnmatch.NewSet(patterns)}
}

// Match says whether name (a DT_NEEDED name or a path) is one of m's.
func (m DriverMatcher) Match(name string) bool {
	return m.set.Match(filepath.Base(name))
}

// IsStubDir reports directories that hold link-time stub libraries: the
// CUDA toolkit's "lib/stubs" (or "lib64/stubs") and nixpkgs' "-stubs"
// outputs ("<hash>-cuda_cudart-12.4-stubs/lib").
func IsStubDir(dir string) bool {
	dir = filepath.Clean(dir)
	if filepath.Base(dir) == "stubs" {
		return true
	}
	base := filepath.Base(dir)
	return (base == "lib" || base == "lib64") && strings.HasSuffix(filepath.Base(filepath.Dir(dir)), "-stubs")
}

// ResolutionRules are the rules every resolution note cudapatch writes
// follows (see ldcache.Rules), given the driver link directories: they are
// run-time-only directories, never probed at build time; the driver's
// libraries (DriverLibraries) get no "=" element after them; stub
// directories give no element at all. Lint checks notes with the same
// rules.
func ResolutionRules(driverLinks ...string) ldcache.Rules {
	return NewDriverMatcher(DriverLibraries).Rules(driverLinks)
}

// Rules are the resolution-note rules of m, given the driver links.
func (m DriverMatcher) Rules(driverLinks []string) ldcache.Rules {
	return ldcache.Rules{RunTimeOnly: driverLinks, Restricted: m.Match, Excluded: IsStubDir}
}

// IsDriverLibrary reports whether name (a DT_NEEDED name or a path) is one
// of DriverLibraries.
func IsDriverLibrary(name string) bool {
	return NewDriverMatcher(DriverLibraries).Match(name)
}

// KnownDlopeners are fnmatch patterns of libraries that dlopen libcuda.so.1
// without naming it in DT_NEEDED or a .note.dlopen note: the CUDA runtime
// (libcudart), which every runtime API call goes through; libcublasLt,
// which opens the driver itself; libnvrtc, which asks the driver for the
// GPU architecture; and NCCL, which links the runtime statically. The
// loader searches the RUNPATH of the object calling dlopen, so these need
// the driver link in their own RUNPATH. Programs that link the CUDA
// runtime statically (nvcc's default) dlopen the driver too, and cannot be
// told apart from the outside.
var KnownDlopeners = []string{
	"libcudart.so*",
	"libcublasLt.so*",
	"libnvrtc.so*",
	"libnccl.so*",
}

// IsCompatDir reports cuda_compat directories: a directory named compat
// (the package's layout, <cuda_compat>/compat) or any path naming
// cuda_compat.
func IsCompatDir(e string) bool {
	return path.Base(e) == "compat" || strings.Contains(e, "cuda_compat") || strings.Contains(e, "cuda-compat")
}
