/* main: NEEDs libfoo.so; prints "main: foo+bar" once both libraries load. */
#include <stdio.h>

const char *foo(void);

int main(void)
{
	printf("main: %s\n", foo());
	return 0;
}
