/* libfoo.so: NEEDED by main, itself NEEDs libbar.so. */
#include <stdio.h>

const char *bar(void);

const char *foo(void)
{
	static char buf[16];
	snprintf(buf, sizeof buf, "foo+%s", bar());
	return buf;
}
