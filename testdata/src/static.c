/* static: built with -static / -static-pie; no dynamic libraries at all. */
#include <stdio.h>

int main(void)
{
	puts("static ok");
	return 0;
}
