// Package ldcache reads, writes and computes the resolution cache that
// nixpkgs' glibc consults before a file's DT_RUNPATH: the ELF note
// ".note.nixos.ldcache" (owner "NixOS", type 0x63a86cb6), which patchelf
// writes with --build-resolution-cache.
//
// # The format
//
// The note's descriptor is a sequence of NUL-terminated string pairs,
// (needed name, path list), sorted by name and ended by an empty name. A
// path list is ':'-separated elements in RUNPATH order:
//
//   - "=FILE": the loader opens FILE directly, an absolute path probed when
//     the note was written;
//   - "?DIR": the loader searches DIR itself, as it would a RUNPATH entry.
//     Used for what only exists at run time: empty (a trailing one too)
//     and relative entries (the current directory), $ORIGIN/$LIB/$PLATFORM
//     entries, directories with a glibc-hwcaps subdirectory, and absolute
//     entries that are no directory the writer can search (missing, a
//     plain file, no search permission).
//
// A name with no entry, or whose elements all fail, falls back to the
// normal RUNPATH walk. The loader reads the note after LD_LIBRARY_PATH and
// before DT_RUNPATH, so a note that disagrees with the RUNPATH beside it
// wins over it: [Build] must be run on the final RUNPATH, and any edit of
// the RUNPATH, DT_NEEDED or the interpreter must rebuild or drop the note.
//
// # The rules
//
// [Build] follows patchelf 0.19.1's --build-resolution-cache
// (NixOS/patchelf #658, #659) byte for byte — every RUNPATH entry in
// order, every DT_NEEDED name that has no '/', an "=" element for each
// existing readable DIR/NAME, a "?" element for each run-time-only entry —
// except where [Rules] say otherwise. The
// rules cudapatch gives it (rpath.ResolutionRules) keep the NVIDIA driver
// out of the store: the driver link is a run-time-only directory (never
// probed at build time, where it would bake the build machine's driver into
// the package), driver libraries get no "=" element after it, and no
// element ever points into a stub directory.
//
// Decode is hardened: hostile input gives an error, never a panic or an
// allocation larger than the input. Fuzz it with
//
//	go test ./rpath/ldcache -run=- -fuzz=FuzzDecode
//
// The package reads and writes no ELF bytes itself: the note travels
// through rpath/elfedit as an [elfedit.Note] (see [NoteID]).
package ldcache
