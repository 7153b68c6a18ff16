/* "libabsent 1.so": linked against by libopt.so, never shipped. */
int absent_value(void) { return 1; }
