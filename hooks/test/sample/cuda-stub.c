/* The link-time stub for libcuda.so.1; never shipped or searched. */
int cuInit(unsigned int flags) { (void)flags; return 100; }
