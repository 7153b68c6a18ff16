// Package ldso simulates glibc's dynamic loader search (ld.so) without
// executing anything: given an executable, it finds the file that each
// DT_NEEDED entry would be loaded from, and records how it was found.
//
// It is the engine of `cudapatch explain` (an ldd that runs nothing) and of
// lint's unresolvable-DT_NEEDED rule. It knows nothing of Nix or CUDA, and it
// reads no ELF bytes itself: a [Reader] supplied by the caller turns a path
// into an [Object].
//
// The rules follow glibc's elf/dl-load.c (_dl_map_object, open_path,
// fillin_rpath, _dl_dst_substitute) and elf/dl-cache.c (search_cache):
//
//   - Objects load breadth first: the executable's DT_NEEDED in order, then
//     each loaded object's, in load order. A name already loaded (as a
//     DT_NEEDED string, a path, or a DT_SONAME) or a file already loaded
//     under another name is not loaded twice.
//   - A name containing '/' is opened as is, after $ORIGIN/$LIB/$PLATFORM
//     expansion.
//   - Otherwise, when the requesting object has no DT_RUNPATH: the DT_RPATH
//     of the requester, then of the object that loaded it, and so on up to
//     the executable (an object's DT_RPATH is ignored when it also has
//     DT_RUNPATH); then LD_LIBRARY_PATH (not in secure mode); then the
//     requester's own DT_RUNPATH (never inherited); then /etc/ld.so.cache;
//     then the default directories. DF_1_NODEFLIB on the requester skips
//     cache entries in, and the search of, the default directories.
//   - Each search directory is tried with its glibc-hwcaps subdirectories
//     first, in priority order. A candidate of the wrong ELF class or machine
//     is skipped and the search goes on, as ld.so does.
//   - An empty path element means the current directory.
//
// Paths are logical: when [Config.Root] is set, every absolute path is taken
// inside it and symbolic links are followed without leaving it.
//
// [ParseCache] is hardened: hostile input gives an error, never a panic or
// an allocation larger than the input. Fuzz it with
//
//	go test ./rpath/ldso -run=- -fuzz=FuzzParseCache
//
// Not modelled: LD_PRELOAD and /etc/ld.so.preload, audit modules,
// DT_FILTER/DT_AUXILIARY, dlopen, and the legacy (pre-2.37) hwcap bits of
// cache entries, which are treated as unsupported.
package ldso
