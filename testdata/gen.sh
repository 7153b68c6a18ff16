#!/usr/bin/env bash
# gen.sh OUTDIR: build the shared test fixtures from testdata/src/*.c.
#
# One directory per variant (linker, link flags, architecture):
#
#   OUTDIR/<variant>/bin/main        NEEDED libfoo.so, prints "main: foo+bar"
#   OUTDIR/<variant>/bin/loadlib     dlopen(argv[1]); prints "loaded"
#   OUTDIR/<variant>/lib/libfoo.so   SONAME libfoo.so, NEEDED libbar.so
#   OUTDIR/<variant>/lib/libbar.so   SONAME libbar.so
#
# main and libfoo.so carry the RUNPATH (or RPATH) /nonexistent/old/lib, so
# main does not run as built: a test patches the RUNPATH to the variant's lib
# directory and then main must print "main: foo+bar". Static variants hold
# only bin/main, which prints "static ok".
#
# Also writes OUTDIR/manifest.tsv (a header, then one line per variant, read
# by internal/fixtures) and OUTDIR/versions.txt (the toolchain that built them).
# The Debian packages it needs are listed in testdata/README.md.
set -euo pipefail
export LC_ALL=C

if [ $# -ne 1 ]; then
	echo "usage: gen.sh OUTDIR" >&2
	exit 2
fi
src=$(cd "$(dirname "$0")/src" && pwd)

# The RUNPATH every dynamic main and libfoo.so is linked with.
old=/nonexistent/old/lib

# arch -> cross compiler and qemu-user run prefix. i686 runs under qemu too:
# the host has no i386 ld.so, only the cross sysroot does.
declare -A cc=(
	[x86_64]=gcc
	[i686]=i686-linux-gnu-gcc
	[aarch64]=aarch64-linux-gnu-gcc
	[armhf]=arm-linux-gnueabihf-gcc
	[ppc64el]=powerpc64le-linux-gnu-gcc
	[riscv64]=riscv64-linux-gnu-gcc
	[s390x]=s390x-linux-gnu-gcc
	[ppc64]=powerpc64-linux-gnu-gcc
)
declare -A prefix=(
	[x86_64]=""
	[i686]="qemu-i386 -L /usr/i686-linux-gnu"
	[aarch64]="qemu-aarch64 -L /usr/aarch64-linux-gnu"
	[armhf]="qemu-arm -L /usr/arm-linux-gnueabihf"
	[ppc64el]="qemu-ppc64le -L /usr/powerpc64le-linux-gnu"
	[riscv64]="qemu-riscv64 -L /usr/riscv64-linux-gnu"
	[s390x]="qemu-s390x -L /usr/s390x-linux-gnu"
	[ppc64]="qemu-ppc64 -L /usr/powerpc64-linux-gnu"
)
crossarches=(aarch64 i686 armhf ppc64el riscv64 s390x ppc64)

# Fail loudly, before building anything, if a tool is missing.
missing=()
for t in gcc ld.bfd ld.gold ld.lld mold eu-elflint "${cc[@]}"; do
	command -v "$t" >/dev/null || missing+=("$t")
done
for a in "${crossarches[@]}"; do
	q=${prefix[$a]%% *}
	command -v "$q" >/dev/null || missing+=("$q")
	sysroot=${prefix[$a]##* }
	[ -d "$sysroot" ] || missing+=("$sysroot")
done
if [ ${#missing[@]} -ne 0 ]; then
	echo "gen.sh: missing: ${missing[*]} (see testdata/README.md for the apt-get line)" >&2
	exit 1
fi

mkdir -p "$1"
out=$(cd "$1" && pwd)

# Compile from inside src/ with relative names and without -g, so no build
# directory ends up in the output: the same sources give the same bytes.
cflags=(-O2)
cd "$src"

manifest=$out/manifest.tsv
printf 'name\tarch\tlinker\tflags\texe\tlink\trun_prefix\twant\telflint\n' >"$manifest"

# elflint DIR: "clean" when eu-elflint --gnu-ld accepts every file of the
# variant as built, else "dirty". lld, mold, gold and static glibc output
# already draws complaints; tests that run elflint on a patched file need
# this baseline to know whether a complaint is theirs.
elflint() {
	local f
	for f in "$1"/*/*; do
		eu-elflint --gnu-ld "$f" >/dev/null 2>&1 || {
			echo dirty
			return
		}
	done
	echo clean
}

# dyn NAME ARCH LINKER PIE DTAG [LDFLAG...]
#   PIE:  pie | no-pie                  (how bin/main and bin/loadlib link)
#   DTAG: runpath | rpath | none        (what main gets; libfoo.so gets
#                                        runpath unless DTAG is rpath)
#   LDFLAGs go to every link of the variant (both libraries and both programs).
# shellcheck disable=SC2054 # the commas belong to -Wl, arguments
dyn() {
	local name=$1 arch=$2 linker=$3 pie=$4 dtag=$5
	shift 5
	local c=${cc[$arch]} d=$out/$name
	local ld=(-fuse-ld="$linker" "$@")
	local exe=(-pie -fPIE)
	[ "$pie" = pie ] || exe=(-no-pie -fno-PIE)
	local librp=(-Wl,--enable-new-dtags -Wl,-rpath,"$old") mainrp
	case $dtag in
	runpath) mainrp=("${librp[@]}") ;;
	rpath)
		librp=(-Wl,--disable-new-dtags -Wl,-rpath,"$old")
		mainrp=("${librp[@]}")
		;;
	none) mainrp=() ;;
	*)
		echo "gen.sh: bad DTAG $dtag" >&2
		exit 1
		;;
	esac

	mkdir -p "$d/bin" "$d/lib"
	"$c" "${cflags[@]}" -fPIC -shared "${ld[@]}" -Wl,-soname,libbar.so \
		-o "$d/lib/libbar.so" bar.c
	"$c" "${cflags[@]}" -fPIC -shared "${ld[@]}" -Wl,-soname,libfoo.so "${librp[@]}" \
		-o "$d/lib/libfoo.so" foo.c -L"$d/lib" -lbar
	"$c" "${cflags[@]}" "${exe[@]}" "${ld[@]}" ${mainrp[@]+"${mainrp[@]}"} \
		-o "$d/bin/main" main.c -L"$d/lib" -lfoo -Wl,-rpath-link,"$d/lib"
	"$c" "${cflags[@]}" "${exe[@]}" "${ld[@]}" -o "$d/bin/loadlib" loadlib.c

	local flags="$pie $dtag${*:+ $*}"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$arch" "$linker" "$flags" \
		"$name/bin/main" dynamic "${prefix[$arch]}" "main: foo+bar" "$(elflint "$d")" >>"$manifest"
}

# static NAME FLAG: static.c with gcc and ld.bfd; FLAG is -static or -static-pie.
static() {
	local name=$1 flag=$2 d=$out/$1
	local pic=(-fno-PIE)
	[ "$flag" = -static ] || pic=(-fPIE)
	mkdir -p "$d/bin"
	gcc "${cflags[@]}" "${pic[@]}" "$flag" -fuse-ld=bfd -o "$d/bin/main" static.c
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" x86_64 bfd "${flag#-}" \
		"$name/bin/main" static "" "static ok" "$(elflint "$d")" >>"$manifest"
}

for l in bfd gold lld mold; do
	dyn "$l-pie" x86_64 "$l" pie runpath
	dyn "$l-nopie" x86_64 "$l" no-pie runpath
done
dyn bfd-separate-code x86_64 bfd pie runpath -Wl,-z,separate-code
dyn bfd-noseparate-code x86_64 bfd pie runpath -Wl,-z,noseparate-code
dyn bfd-hash-gnu x86_64 bfd pie runpath -Wl,--hash-style=gnu
dyn bfd-hash-sysv x86_64 bfd pie runpath -Wl,--hash-style=sysv
dyn bfd-hash-both x86_64 bfd pie runpath -Wl,--hash-style=both
dyn bfd-relro x86_64 bfd pie runpath -Wl,-z,relro
dyn bfd-norelro x86_64 bfd pie runpath -Wl,-z,norelro
dyn bfd-rpath x86_64 bfd pie rpath
dyn bfd-norunpath x86_64 bfd pie none
static static -static
static static-pie -static-pie
for a in "${crossarches[@]}"; do
	dyn "$a-bfd-pie" "$a" bfd pie runpath
done

{
	gcc --version | head -n1
	ld.bfd --version | head -n1
	ld.gold --version | head -n1
	ld.lld --version | head -n1
	mold --version | head -n1
	eu-elflint --version | head -n1
	for a in "${crossarches[@]}"; do
		"${cc[$a]}" --version | head -n1
	done
	for a in "${crossarches[@]}"; do
		q=${prefix[$a]%% *}
		echo "$q: $("$q" --version | head -n1)"
	done
} >"$out/versions.txt"
