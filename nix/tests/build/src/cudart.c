/* libcudart.so.12 of the cuda_cudart fixture. */
int cudart_value(void) { return 12; }
