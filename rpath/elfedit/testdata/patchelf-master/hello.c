#include <stdio.h>
int main(void) { puts("hello from a patchelf-noted binary"); return 0; }
