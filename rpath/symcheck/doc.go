// Package symcheck binds the undefined dynamic symbols of a file's closure
// as glibc's loader would, without running anything: which library
// provides each symbol and version, and which references fail, at load or
// when first called. It is `cudapatch explain --symbols` (an ldd -r for any
// architecture) and the build-time check that a prebuilt binary's
// libraries are the ones it was linked against.
//
// It builds on rpath/ldso, whose Tree gives the load order (breadth first,
// the resolution-cache note and DT_RUNPATH deciding which file each name
// is), and reads each file through rpath/elfedit: only the dynamic symbol
// table, the string table, the version tables, the hash table and the
// relocation tables, all found through the dynamic section and bounded by
// the file's size. Symbols are looked up through .gnu.hash (else .hash).
//
// What a Checker keeps of a file is small: its versions and the references
// its relocations make (8 bytes each, names interned once for the
// Checker), its Bloom filter folded to at most 64 words, and a summary of
// its definitions made at the first lookup the filter passes: for each
// name interned so far, the symbols the hash table's walk meets for it.
// The tables themselves are read into scratch buffers, or an entry at a
// time for a big one, and dropped; a lookup of a name interned after the
// summary (and passed by the filter) makes it again. A caller that reads
// every file's references first (Read) makes each once.
//
// The rules follow glibc's elf/dl-lookup.c (do_lookup_x, check_match),
// elf/dl-version.c (_dl_check_map_versions, match_symbol) and the
// machines' elf_machine_rel*:
//
//   - The scope is the global one, in load order (the object itself first
//     under DT_SYMBOLIC); a copy relocation skips the executable.
//   - Only references a relocation makes are looked up. A reference only
//     PLT slots make (JUMP_SLOT in DT_JMPREL) binds when first called
//     under lazy binding, at load under DF_BIND_NOW, DF_1_NOW or LD_BIND_NOW;
//     every other one binds at load.
//   - A versioned reference binds to a definition of that version, hidden
//     (non-default) or not, or to an unversioned one; an unversioned
//     reference to a base or oldest-version definition, else to the one
//     non-hidden versioned definition of the name. Since glibc 2.30 the
//     file a version need names does not restrict where it is found.
//   - The first matching definition of an object decides: a local or
//     hidden one ends the search in that object. STB_WEAK and
//     STB_GNU_UNIQUE definitions bind as global ones; protected ones bind
//     from other objects as default ones.
//   - An unresolved weak reference is left zero, never an error. A version
//     need its library does not define fails at load (a weak one does
//     not); a library with no version definitions accepts every need.
//
// Not modelled: LD_PRELOAD, audit modules, dlopen'd objects and their
// local scopes, DT_FILTER/DT_AUXILIARY, the protected-data copy
// relocation check of GNU_PROPERTY_1_NEEDED_INDIRECT_EXTERN_ACCESS, and
// MIPS (which binds through its GOT; reported as unsupported).
package symcheck
