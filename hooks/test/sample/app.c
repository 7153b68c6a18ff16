/* bin/app: NEEDED libfoo.so and libdep.so; prints "sample 42". */
#include <stdio.h>
int foo_value(void);
int dep_value(void);
int main(void)
{
	printf("sample %d\n", foo_value() + dep_value() - 40);
	return 0;
}
