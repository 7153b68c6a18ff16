# bench/corpus-args.sh: sourced by the scripts that patch the CUDA corpus
# (bench/run.sh, bench/ab.sh, bench/symbols.sh, scripts/identical.sh), so
# that all of them run the main job with the same arguments.
#
# cuda_corpus_args TREE prints, one per line, the main job's arguments for a
# copy of the corpus' store at TREE: the gcc-lib and stub directories as
# search directories, libcuda.so.1 ignored (the driver's, found at run
# time), and every other store path as an output to patch.
cuda_corpus_args() {
	local d
	for d in "$1"/*; do
		case $d in
		*-gcc-*-lib) printf '%s\n' --search "$d/lib" ;;
		*-stubs) printf '%s\n' --search "$d/lib/stubs" ;;
		esac
	done
	printf '%s\n' --ignore-missing libcuda.so.1
	for d in "$1"/*; do
		case $d in *-gcc-*-lib | *-stubs | *-nvidia-x11-*) ;; *) echo "$d" ;; esac
	done
}
