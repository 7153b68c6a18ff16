/* A libcuda.so.1 that is not a stub: the driver's (CUINIT_RESULT 0) or
 * cuda_compat's (CUINIT_RESULT 1), so a program says which one it loaded. */
int cuInit(unsigned int flags)
{
	(void)flags;
	return CUINIT_RESULT;
}
