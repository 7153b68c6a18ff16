/* libdep.so: the library a "buildInput" provides (deps/dep/lib). */
int dep_value(void) { return 40; }
