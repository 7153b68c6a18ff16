/* libgpu.so: NEEDED libcuda.so.1, which only the driver provides. */
int cuInit(unsigned int flags);
int gpu_init(void) { return cuInit(0); }
