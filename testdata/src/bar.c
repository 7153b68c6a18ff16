/* libbar.so: the leaf library, NEEDED by libfoo.so. */
const char *bar(void) { return "bar"; }
