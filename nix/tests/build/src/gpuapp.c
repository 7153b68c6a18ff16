/* bin/gpuapp: NEEDED libgpu.so (which needs libcuda.so.1), libcublas.so.12
 * and libcudart.so.12. Prints cuInit's result, which names the libcuda it
 * loaded (0 the driver, 1 cuda_compat, 100 the stub), and 13 from cuBLAS. */
#include <stdio.h>
int gpu_init(void);
int cublas_value(void);
int main(void)
{
	printf("gpu cuInit=%d cublas=%d\n", gpu_init(), cublas_value());
	return 0;
}
