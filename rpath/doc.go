// Package rpath decides what the RUNPATH and interpreter of each ELF file of
// a Nix output must be, and hands the edits to rpath/elfedit. It replaces
// nixpkgs' autoPatchelfHook together with the CUDA driver, cuda_compat and
// stub hooks, in one pass that writes each file once.
//
// The policy, in one place:
//
//   - Dependencies (DT_NEEDED, then .note.dlopen entries) are resolved
//     against an index built like auto-patchelf's, in two rounds: every
//     *.so* file of the paths being patched (recursively; skipped with
//     WithIgnoreExisting), then each search directory in the order given
//     (not recursively); each round followed by the absolute RUNPATH
//     directories of the libraries it found, breadth-first. Within a
//     directory names are taken in sorted order. A candidate must have a
//     compatible ELF class, machine and OS ABI (equal, or either side
//     SYSV). The first candidate wins. A .note.dlopen entry is satisfied by
//     any of its alternatives; if none is found it is missing, named
//     "any(a, b)" as auto-patchelf names it. The index is searched lazily
//     with exactly that precedence: directories are listed as lookups need
//     them, a library's headers are read only when a wanted name is its
//     file name, and RUNPATH directories are followed only when a name is
//     still unresolved after every directory queued before them.
//   - Libraries of the NVIDIA driver (DriverLibraries) are never resolved to
//     a store path nor to a stub: they are satisfied by the driver link.
//     Stub directories (".../stubs", "...-stubs/lib") are never indexed and
//     never appear in a result.
//   - Names present in the libc directory are satisfied without an entry,
//     unless WithKeepLibc.
//   - The RUNPATH is, in this order: the cuda_compat directory (when given),
//     the driver link, runtime dependencies (executables only), the
//     directories of resolved dependencies in the order they were needed,
//     appended entries, old $ORIGIN entries (WithPreserveOrigin, which also
//     writes a dependency's directory as the old $ORIGIN entry that leads
//     there); duplicates removed, first wins; never an empty entry. This is
//     auto-patchelf's order.
//   - With WithRelativeRpaths (entries under the store) or
//     WithRelativizeRpath (entries under the path the file was found
//     under), absolute entries become "$ORIGIN/…" relative to the file's
//     directory, as auto-patchelf's --relative-rpaths and
//     --relativize-rpath do; the cuda_compat directory and the driver link
//     stay absolute.
//   - Every result is audited before anything is written: entries under the
//     build directory, relative entries other than $ORIGIN, and stub
//     directories are errors. If any dependency is missing (and not ignored
//     with a Python fnmatch pattern) or any file fails the audit, nothing is
//     written at all.
//
// The package never prints; it returns a Report and logs through the
// *slog.Logger it is given.
package rpath
