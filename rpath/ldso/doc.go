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
//     DT_RUNPATH); then LD_LIBRARY_PATH (not in secure mode); then, under
//     [LoaderNixOS], the requester's resolution-cache note; then the
//     requester's own DT_RUNPATH (never inherited); then /etc/ld.so.cache;
//     then the default directories. DF_1_NODEFLIB on the requester skips
//     cache entries in, and the search of, the default directories.
//   - Each search directory is tried with its glibc-hwcaps subdirectories
//     first, in priority order. A candidate of the wrong ELF class or machine
//     is skipped and the search goes on, as ld.so does.
//   - An empty path element means the current directory.
//
// # The resolution-cache note
//
// [LoaderNixOS], the default, is nixpkgs' glibc with
// pkgs/development/libraries/glibc/ldcache.patch (NixOS/nixpkgs 6a3cc2e8;
// elf/dl-load.c: _dl_find_nixos_cache, _dl_lookup_nixos_cache, and the
// lookup in _dl_map_new_object). For a name without '/' that the DT_RPATH
// chain and LD_LIBRARY_PATH did not find, it reads the requester's own
// .note.nixos.ldcache (see rpath/ldcache; a note is never inherited):
//
//   - Only a note inside a PT_NOTE segment is read. A descriptor of two
//     bytes or less, or one not ending in two NULs, is no note at all.
//   - Pairs are walked in file order and the first matching name wins
//     (the loader does not need them sorted). A pair with an empty path
//     list met by a lookup disables the note for that lookup and every
//     later one of the same object.
//   - Each ':'-separated element in order: "=FILE" is opened as is, and a
//     missing file or one of the wrong ELF class or machine moves on to
//     the next element; "?DIR" is searched like one DT_RUNPATH entry
//     ($ORIGIN/$LIB/$PLATFORM expanded, "" the current directory,
//     glibc-hwcaps subdirectories first); anything else is skipped.
//   - When no element gives a file, the search goes on with DT_RUNPATH.
//
// The note comes after LD_LIBRARY_PATH whatever the object's search path,
// so for an object with DT_RPATH and no DT_RUNPATH it only answers names
// the whole DT_RPATH chain misses: ldcache.patch adds its lookup after
// glibc's DT_RPATH walk and LD_LIBRARY_PATH, not in place of the walk.
// [LoaderStock] is glibc as released, to which the note is inert.
//
// Paths are logical: when [Config.Root] is set, every absolute path is taken
// inside it and symbolic links are followed without leaving it.
//
// [ParseCache] is hardened: hostile input gives an error, never a panic or
// an allocation larger than the input. Fuzz it with
//
//	go test ./rpath/ldso -run=- -fuzz=FuzzParseCache
//
// An object's [Object.Dlopen] names (what the [Reader] says it may pass to
// dlopen) are opened once every DT_NEEDED is loaded, object by object in
// load order, as dlopen called from that object searches (its DT_RPATH
// chain, LD_LIBRARY_PATH, its note, its own DT_RUNPATH…), followed by the
// DT_NEEDED of what they load; such a Need has Dlopen set, and one found
// nowhere is not [Tree.Missing].
//
// The glibc-hwcaps subdirectories of x86-64 come from CPUID as glibc
// reads it (see [DefaultConfig]), not from /proc/cpuinfo's names.
//
// The legacy hwcap subdirectories a stock loader of glibc 2.26 to 2.36
// tries in each directory (tls/haswell/avx512_1/x86_64 … x86_64) are
// modelled for x86-64 ([DefaultConfig], [LegacySubdirs]).
//
// Not modelled: LD_PRELOAD and /etc/ld.so.preload, audit modules,
// DT_FILTER/DT_AUXILIARY, dlopen flags (RTLD_GLOBAL, namespaces), the legacy
// (pre-2.37) hwcap bits of cache entries, which are treated as unsupported,
// the legacy subdirectories of other machines' loaders, the glibc-hwcaps
// subdirectories of POWER, s390x and RISC-V, and GLIBC_TUNABLES'
// glibc.cpu.hwcaps and glibc.cpu.hwcap_mask, which can mask CPU features.
package ldso
