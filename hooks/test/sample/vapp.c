/* bin/vapp: NEEDED libver.so, ver_two@VER_2: fails at load against the
 * older libver.so of deps/oldver. */
#include <stdio.h>
int ver_one(void);
int ver_two(void);
int main(void)
{
	printf("ver %d\n", ver_one() + ver_two());
	return 0;
}
