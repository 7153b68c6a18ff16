#!/usr/bin/env bash
# maps-on-host.sh TREE...: has the host's glibc map every x86_64 ELF
# executable and shared library below TREE (ld.so --list, LD_LIBRARY_PATH
# unset) and prints those it refuses itself ("error while loading shared
# libraries: FILE: ..."); a dependency it cannot find is not counted. Run it
# on a patched tree (the small-files tree, the CUDA corpus): a layout the
# loader refuses cannot pass for one that only reads back right. Exits 1
# when a file is refused.
set -euo pipefail
loader=${LOADER:-/lib64/ld-linux-x86-64.so.2}
checked=0 refused=0
while IFS= read -r -d '' f; do
	# ELF, x86_64 (e_machine 0x3e), ET_EXEC or ET_DYN (e_type 2 or 3).
	hdr=$(head -c 20 -- "$f" 2>/dev/null | od -An -tx1 -v | tr -d ' \n') || continue
	[[ $hdr == 7f454c46* && ${hdr:36:4} == 3e00 && ${hdr:32:4} =~ ^0[23]00$ ]] || continue
	checked=$((checked + 1))
	out=$(env -u LD_LIBRARY_PATH "$loader" --list "$f" 2>&1 || true)
	if grep -qF -- "error while loading shared libraries: $f: " <<<"$out"; then
		refused=$((refused + 1))
		grep -F -- "error while loading shared libraries: $f: " <<<"$out" | head -1
	fi
done < <(find "$@" -type f -print0)
echo "maps-on-host: $checked files, $refused refused"
[[ $refused -eq 0 ]]
