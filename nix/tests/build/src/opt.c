/* libopt.so: NEEDED "libabsent 1.so", a name with a space that no input
 * provides; only an ignore pattern that keeps its space lets the build pass. */
int absent_value(void);
int opt_value(void) { return absent_value(); }
