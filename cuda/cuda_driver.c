/* cuda_driver.c: loads libcuda.so.1 with dlopen and probes device 0; every call's status is checked and
 * turned into a message, nothing aborts. Types are declared here by their ABI so no header is needed. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "vm/vm.h"
#include "cuda/cuda_driver.h"

typedef int CUresult;
typedef int CUdevice;

struct cuda_driver {
  void *lib;
  int usable;
  CUdevice dev;
  int major, minor, sms;
  char name[128];
  char why[256];
  char desc[192];
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuGetErrorString)(CUresult, const char **);
};

enum { ATTR_SM_COUNT = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

static int check(cuda_driver *d, CUresult r, const char *call) {
  if (r == 0) return 1;
  const char *msg = NULL;
  if (d->cuGetErrorString) d->cuGetErrorString(r, &msg);
  snprintf(d->why, sizeof d->why, "%s failed: %s (CUresult %d)", call, msg ? msg : "unknown error", r);
  return 0;
}

static void probe(cuda_driver *d) {
  d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) { snprintf(d->why, sizeof d->why, "no CUDA driver (libcuda.so.1 not found)"); return; }
#define LOAD(f) if (!(*(void **)&d->f = dlsym(d->lib, #f))) { snprintf(d->why, sizeof d->why, "libcuda.so.1 lacks %s", #f); return; }
  LOAD(cuInit) LOAD(cuDeviceGetCount) LOAD(cuDeviceGet) LOAD(cuDeviceGetName) LOAD(cuDeviceGetAttribute)
  LOAD(cuGetErrorString)
#undef LOAD
  int n = 0;
  if (!check(d, d->cuInit(0), "cuInit") || !check(d, d->cuDeviceGetCount(&n), "cuDeviceGetCount")) return;
  if (n == 0) { snprintf(d->why, sizeof d->why, "no CUDA device"); return; }
  if (!check(d, d->cuDeviceGet(&d->dev, 0), "cuDeviceGet") ||
      !check(d, d->cuDeviceGetName(d->name, sizeof d->name, d->dev), "cuDeviceGetName") ||
      !check(d, d->cuDeviceGetAttribute(&d->major, ATTR_CC_MAJOR, d->dev), "cuDeviceGetAttribute") ||
      !check(d, d->cuDeviceGetAttribute(&d->minor, ATTR_CC_MINOR, d->dev), "cuDeviceGetAttribute") ||
      !check(d, d->cuDeviceGetAttribute(&d->sms, ATTR_SM_COUNT, d->dev), "cuDeviceGetAttribute"))
    return;
  d->usable = 1;
}

static cuda_driver *driver(grace_vm *vm) {
  if (!vm->cuda_probed) {
    vm->cuda_probed = 1;
    vm->cuda = vm_calloc(vm, sizeof *vm->cuda);
    if (vm->cuda) probe(vm->cuda);
  }
  return vm->cuda;
}

cuda_driver *cuda_driver_get(grace_vm *vm) {
  cuda_driver *d = driver(vm);
  return d && d->usable ? d : NULL;
}

const char *cuda_driver_why(grace_vm *vm) {
  cuda_driver *d = driver(vm);
  return !d ? "out of memory" : d->usable ? "usable" : d->why;
}

const char *cuda_driver_describe(grace_vm *vm) {
  cuda_driver *d = cuda_driver_get(vm);
  if (!d) return cuda_driver_why(vm);
  snprintf(d->desc, sizeof d->desc, "%s, sm_%d%d, %d SMs", d->name, d->major, d->minor, d->sms);
  return d->desc;
}

void cuda_driver_free(grace_vm *vm) {
  if (!vm->cuda) return;
  if (vm->cuda->lib) dlclose(vm->cuda->lib);
  vm_free(vm, vm->cuda, sizeof *vm->cuda);
  vm->cuda = NULL;
}
