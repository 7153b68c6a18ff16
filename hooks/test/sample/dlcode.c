/* bin/dlcode: calls dlopen with a name its code builds, as PyTorch builds
 * libnvrtc's: the name's first eight bytes are a 64-bit immediate, no
 * string of it is in the read-only data. dlopen discovery's sibling rule
 * gives it the directory its output's other files find libdep.so in. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	volatile uint64_t head = 0x732e70656462696cULL; /* "libdep.s" */
	char name[16];
	uint64_t h = head;
	memcpy(name, &h, 8);
	name[8] = 'o';
	name[9] = 0;
	void *lib = argc > 1 ? dlopen(name, RTLD_NOW) : NULL;
	printf("dlcode %s\n", lib ? "opened" : "idle");
	return 0;
}
