#!/usr/bin/env bash
# scripts/patchelf-after.sh: does a file cudapatch wrote stay editable by
# patchelf? For each x86_64 fixture variant (testdata/build/*/, made by the
# tests), each state of its files:
#   pristine  patchelf --set-rpath on the fixture as built
#   plain     cudapatch patchelf --set-rpath (no note)
#   job       the main job (RUNPATH, interpreter, resolution note)
# and each PATCHELF given, seven patchelf operations on bin/main
# (--set-rpath and --force-rpath with a longer path, --add-rpath,
# --set-interpreter with a longer name, --add-needed, --replace-needed,
# --shrink-rpath); then bin/main must run and print "main: foo+bar".
#
#   bash scripts/patchelf-after.sh CUDAPATCH PATCHELF... [> report]
#
# One line per case; exit status 1 if any fails. Which failures are
# patchelf's own: docs/architecture.md, "Other tools afterwards".
set -uo pipefail
CP=$(readlink -f "$1")
shift
[ $# -gt 0 ] || { echo "usage: $0 CUDAPATCH PATCHELF..." >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
R=$(find "$HERE/testdata/build" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort | head -1)
[ -n "$R" ] || { echo "no fixtures under testdata/build: run go test ./internal/fixtures first" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "${T:?}"' EXIT
ln -s /lib64/ld-linux-x86-64.so.2 "$T/ld-linux-x86-64-with-a-much-longer-name-than-before.so.2"
fail=0 n=0
for v in bfd-pie bfd-nopie gold-pie gold-nopie lld-pie lld-nopie mold-pie mold-nopie bfd-hash-sysv bfd-noseparate-code bfd-norelro bfd-rpath bfd-norunpath; do
	[ -d "$R/$v" ] || continue
	for pre in pristine plain job; do
		for pe in "$@"; do
			for op in set-rpath force-rpath add-rpath set-interp add-needed replace-needed shrink; do
				W=$T/case
				rm -rf "${W:?}" && cp -a "$R/$v" "$W"
				long=$W/lib$(printf '/%.0s.' $(seq 30))
				case $pre in
				plain) for f in "$W/bin/main" "$W/lib/libfoo.so"; do "$CP" patchelf --set-rpath "$long" "$f"; done ;;
				job) (cd "$T" && "$CP" --search "$W/lib" --libc /lib/x86_64-linux-gnu --interpreter /lib64/ld-linux-x86-64.so.2 --ignore-missing '*' "$W" >/dev/null 2>&1) ;;
				pristine) for f in "$W/bin/main" "$W/lib/libfoo.so"; do "$pe" --set-rpath "$W/lib" "$f"; done ;;
				esac
				longer=$W/lib$(printf '/%.0s.' $(seq 90))
				m=$W/bin/main
				case $op in
				set-rpath) "$pe" --set-rpath "$longer" "$m" ;;
				force-rpath) "$pe" --force-rpath --set-rpath "$longer" "$m" ;;
				add-rpath) "$pe" --add-rpath /some/other/dir/with/a/long/enough/name/to/need/a/bigger/table "$m" ;;
				set-interp) "$pe" --set-interpreter "$T/ld-linux-x86-64-with-a-much-longer-name-than-before.so.2" "$m" ;;
				add-needed) "$pe" --add-needed libbar.so "$m" ;;
				replace-needed) cp "$W/lib/libfoo.so" "$W/lib/libfoo-renamed-with-a-longer-name.so" && "$pe" --replace-needed libfoo.so libfoo-renamed-with-a-longer-name.so "$m" ;;
				shrink) "$pe" --shrink-rpath "$m" ;;
				esac >"$T/out" 2>&1
				rc=$?
				out=$(env -u LD_LIBRARY_PATH "$m" 2>&1 | head -1)
				n=$((n + 1))
				if [ $rc -eq 0 ] && [ "$out" = "main: foo+bar" ]; then
					echo "ok   $v $pre $("$pe" --version | tr ' ' '-') $op"
				else
					fail=$((fail + 1))
					echo "FAIL $v $pre $("$pe" --version | tr ' ' '-') $op: patchelf exit $rc: $(head -c 120 "$T/out" | tr '\n' ' ') / main: $(echo "$out" | cut -c1-60)"
				fi
			done
		done
	done
done
echo "$n cases, $fail failed"
[ $fail -eq 0 ]
