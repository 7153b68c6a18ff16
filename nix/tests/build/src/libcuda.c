/* A libcuda.so.1 that is not a stub: the driver's (CUINIT_RESULT 0) or
 * cuda_compat's (CUINIT_RESULT 1), so a program says which one it loaded.
 * With COMPAT_NOTE, the forward-compatibility note cuda_compat 580.95.05
 * carries (section .note.cuda.fwd_compatibility, owner "NVIDIA
 * Corporation"): the kernel-module branches it runs on. */
#ifdef COMPAT_NOTE
__asm__(".pushsection .note.cuda.fwd_compatibility,\"a\",%note\n"
	".balign 4\n.long 2f-1f\n.long 4f-3f\n.long 0\n"
	"1: .asciz \"NVIDIA Corporation\"\n2: .balign 4\n"
	"3: .ascii \"{\\\"format\\\":1,\\\"CUDA version\\\":\\\"13.0\\\","
	"\\\"driver\\\":[535,550,565,570,575,580],\\\"device\\\":[1,2,7,8,9,10,11,12,13,14]}\"\n"
	".byte 0\n4: .balign 4\n.popsection\n");
#endif
int cuInit(unsigned int flags)
{
	(void)flags;
	return CUINIT_RESULT;
}
