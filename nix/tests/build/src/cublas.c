/* libcublas.so.12 of the libcublas fixture: NEEDED libcudart.so.12. */
int cudart_value(void);
int cublas_value(void) { return cudart_value() + 1; }
