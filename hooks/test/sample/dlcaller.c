/* bin/dlcaller: calls dlopen and spells no library name: a dlopen caller
 * whose own DT_NEEDED is only libc, as nvlink and cuda-memcheck are in the
 * CUDA toolkit. */
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
	printf("dlcaller %s\n", h ? "opened" : "idle");
	return 0;
}
