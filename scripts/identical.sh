#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2317 # functions run through compare; $ORIGIN is literal
# scripts/identical.sh: do two commits write the same bytes? A refactoring
# must leave every output byte-identical; this runs the main job of each
# commit over the same real trees, at the same path, and compares every
# file (content, mode, link target).
#
#   bash scripts/identical.sh OLD NEW [WORKDIR]     (commits or branches)
#
# Trees, each one skipped with a line when absent:
#   usr       this machine's /usr/bin and /usr/lib/<multiarch>, every file
#             given the tree's library directory (so most files grow)
#   userland  a debootstrapped Debian's /usr ($USERLAND, default
#             /srv/fresh-pristine/usr; scripts/userland.sh makes one)
#   corpus    the CUDA corpus ($CPCORPUS, default /tmp/cpcorpus;
#             scripts/cuda-corpus.sh), with bench/run.sh's arguments
# The fuzz corpus is checked by TestFuzzCorpusOutputs in rpath/elfedit.
# Exit 0 when every tree is identical, 1 otherwise (the differing files
# are listed).
set -euo pipefail
OLD=${1:?usage: identical.sh OLD NEW [WORKDIR]}
NEW=${2:?usage: identical.sh OLD NEW [WORKDIR]}
W=${3:-/tmp/cudapatch-identical}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/corpus-args.sh
. "$REPO/bench/corpus-args.sh"
USERLAND=${USERLAND:-/srv/fresh-pristine/usr}
CORPUS=${CPCORPUS:-/tmp/cpcorpus}
MULTI=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
log() { printf '%s identical.sh: %s\n' "$(date +%T)" "$*" >&2; }

rm -rf "$W" && mkdir -p "$W/bin"
for c in "$OLD" "$NEW"; do
	git -C "$REPO" worktree add -q --detach "$W/src-$c" "$c"
	(cd "$W/src-$c" && CGO_ENABLED=0 go build -o "$W/bin/$c" ./cmd/cudapatch)
	git -C "$REPO" worktree remove --force "$W/src-$c"
done

# run TREE-NAME SRC-SETUP ARGS-FUNCTION: lay the tree out at $W/tree,
# patch it with each commit's binary, keep each result.
status=0
compare() {
	local name=$1 setup=$2 argsf=$3 c
	for c in "$OLD" "$NEW"; do
		rm -rf "$W/tree" && mkdir -p "$W/tree"
		"$setup"
		mapfile -t args < <("$argsf")
		"$W/bin/$c" "${args[@]}" >"$W/$name-$c.out" 2>"$W/$name-$c.err" || echo "exit $?" >>"$W/$name-$c.err"
		rm -rf "${W:?}/$name-$c" && mv "$W/tree" "$W/$name-$c"
	done
	local n
	n=$(find "$W/$name-$OLD" -type f | wc -l)
	log "$name: $(grep -h '^cudapatch: .*files' "$W/$name-$OLD.err" | tail -1) / $(grep -h '^cudapatch: .*files' "$W/$name-$NEW.err" | tail -1)"
	if grep -q '^exit\|nothing written' "$W/$name-$OLD.err" "$W/$name-$NEW.err"; then
		log "$name: a run wrote nothing or failed ($W/$name-*.err): the comparison proves nothing"
		status=1
	fi
	if diff -r --no-dereference "$W/$name-$OLD" "$W/$name-$NEW" >"$W/$name.diff" 2>&1 &&
		diff <(cd "$W/$name-$OLD" && find . -printf '%p %m %l\n' | sort) \
			<(cd "$W/$name-$NEW" && find . -printf '%p %m %l\n' | sort) >>"$W/$name.diff"; then
		log "$name: $n files identical"
	else
		log "$name: DIFFERENT ($W/$name.diff)"
		head -20 "$W/$name.diff" >&2
		status=1
	fi
	rm -rf "${W:?}/$name-$OLD" "${W:?}/$name-$NEW"
}

# Copies keep no hard link (the main job refuses a file with several) and
# the libc directory is an empty one, so that every library, libc's too,
# resolves in the tree and most files grow a RUNPATH.
mkdir -p "$W/nolibc"
LIBC=(--interpreter "$(readlink -f /lib64/ld-linux-x86-64.so.2)" --libc "$W/nolibc")
usr_setup() {
	mkdir -p "$W/tree/bin" "$W/tree/lib"
	cp -a --no-preserve=links /usr/bin/. "$W/tree/bin/"
	cp -a --no-preserve=links "/usr/lib/$MULTI/." "$W/tree/lib/"
}
usr_args() { printf '%s\n' "${LIBC[@]}" --search "$W/tree/lib" --ignore-missing '*' "$W/tree/bin" "$W/tree/lib"; }
compare usr usr_setup usr_args

if [ -d "$USERLAND/lib/$MULTI" ]; then
	userland_setup() { cp -a --no-preserve=links "$USERLAND/." "$W/tree/"; }
	userland_args() {
		printf '%s\n' "${LIBC[@]}" --search "$W/tree/lib/$MULTI" --ignore-missing '*' \
			--append-rpath '$ORIGIN' "$W/tree/bin" "$W/tree/lib"
	}
	compare userland userland_setup userland_args
else
	log "userland: $USERLAND absent, skipped"
fi

if [ -d "$CORPUS/pristine/store" ]; then
	corpus_tree_args() { cuda_corpus_args "$W/tree"; }
	corpus_setup() { cp -a --no-preserve=links "$CORPUS/pristine/store/." "$W/tree/"; }
	compare corpus corpus_setup corpus_tree_args
else
	log "corpus: $CORPUS/pristine/store absent, skipped"
fi
exit $status
