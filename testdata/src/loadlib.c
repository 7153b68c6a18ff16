/* loadlib LIB: dlopen(LIB, RTLD_NOW), so a patched library's own RUNPATH is
 * what resolves its NEEDED entries. Prints "loaded" or dlerror(). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: loadlib LIB\n");
		return 2;
	}
	if (dlopen(argv[1], RTLD_NOW) == NULL) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	puts("loaded");
	return 0;
}
