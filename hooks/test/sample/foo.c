/* libfoo.so: shipped in the prebuilt tree's lib/, NEEDED libdep.so. */
int dep_value(void);
int foo_value(void) { return dep_value() + 2; }
