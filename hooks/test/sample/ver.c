/* libver.so: linked against with two versions (ver-new.map), shipped by
 * an older build input with one (ver-old.map): vapp's VER_2 is missing. */
int ver_one(void) { return 1; }
int ver_two(void) { return 2; }
