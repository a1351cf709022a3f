/* cuda_driver.h: the CUDA driver loaded at run time with dlopen; grace runs without it (CPU backend). */
#ifndef GRACE_CUDA_DRIVER_H
#define GRACE_CUDA_DRIVER_H

#include "grace.h"

typedef struct cuda_driver cuda_driver;

/* The driver of vm, loaded and probed on first call; NULL when no device is usable (reason: why()). */
cuda_driver *cuda_driver_get(grace_vm *vm);
/* Why cuda_driver_get gave NULL ("libcuda.so.1 not found", "no CUDA device", the driver's message). */
const char *cuda_driver_why(grace_vm *vm);
/* "NVIDIA H200, sm_90, 132 SMs" */
const char *cuda_driver_describe(grace_vm *vm);
void cuda_driver_free(grace_vm *vm);

#endif
