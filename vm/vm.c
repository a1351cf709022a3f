/* vm.c: the VM's life: configuration, the backends it registers, the default device, and the backend
 * description. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <mimalloc.h>
#include "base/base.h"
#include "cuda/cuda_api.h"
#include "cpu/cpu_kernels.h"
#include "gpu/gpu_exec.h"
#include "vm/vm_trace.h"
#include "vm/vm_grad.h"

/* ---- the hooks base/ calls into tracing and replay (base.h's vm_hooks) ---- */
static grace_status hook_created(grace_vm *vm, grace_tensor *t) {
  return vm_tracing(vm) ? vm_trace_created(vm, t) : GRACE_OK;
}
static grace_status hook_read(grace_vm *vm, const grace_tensor *t, const char *how) {
  return vm_tracing(vm) ? vm_trace_read(vm, t, how) : GRACE_OK;
}
static grace_status hook_materialize(grace_vm *vm, const grace_tensor *t) {
  grace_status st = t->pending || vm_trace_replaying(vm) ? vm_replay_flush(vm) : GRACE_OK;
  if (st == GRACE_OK && t->pending && t->lazy) st = vm_lazy_compute(vm, (grace_tensor *)t);   /* kept inside */
  return st;
}
static void hook_hold(grace_vm *vm, int delta) {
  if (delta > 0) grace_trace_pause(vm);
  else grace_trace_resume(vm);
}
static const vm_hooks trace_hooks = {hook_created, hook_read, hook_materialize, hook_hold, vm_grad_drop, vm_lazy_drop};

#ifdef GRACE_SYSTEM_MALLOC
/* Under sanitizers (make asan): mimalloc's pages hide a use after free or an overflow from ASan, the system's
 * allocator does not. */
#include <malloc.h>
static void *vm_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud; (void)osize;
  if (nsize == 0) { free(ptr); return NULL; }
  if (align < sizeof(void *)) align = sizeof(void *);
  void *p = aligned_alloc(align, (nsize + align - 1) / align * align);
  if (p && ptr) {
    size_t old = malloc_usable_size(ptr);
    memcpy(p, ptr, old < nsize ? old : nsize);
    free(ptr);
  }
  return p;
}
#else
static void *vm_default_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud; (void)osize;
  if (nsize == 0) { mi_free(ptr); return NULL; }
  return mi_realloc_aligned(ptr, nsize, align);
}
#endif

grace_vm *grace_vm_new(const grace_config *cfg, char *err, size_t errlen) {
  grace_config def = {0};
  if (!cfg) cfg = &def;
  grace_alloc_fn alloc = cfg->alloc ? cfg->alloc : vm_default_alloc;
  grace_vm *vm = alloc(cfg->alloc_ud, NULL, 0, sizeof *vm, VM_ALIGN);
  if (!vm) {
    if (err && errlen) snprintf(err, errlen, "grace_vm_new: out of memory");
    return NULL;
  }
  memset(vm, 0, sizeof *vm);
  vm->backend[GRACE_CPU] = &cpu_backend;
  vm->backend[GRACE_CUDA] = &gpu_backend;
  vm->hooks = &trace_hooks;
  vm->alloc = alloc;
  vm->alloc_ud = cfg->alloc_ud;
  vm->index_base = cfg->index_base ? 1 : 0;
  vm->max_bytes = cfg->max_bytes;
  vm->seed = 0x5eed;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  vm->threads = cfg->threads > 0 ? cfg->threads : ncpu > 0 ? (int)(ncpu > 64 ? 64 : ncpu) : 1;
  const char *dev = cfg->device;
  if (!dev || !*dev) dev = getenv("GRACE_DEVICE");
  if (!dev || !*dev) dev = "auto";
  if (grace_set_default_device(vm, dev) != GRACE_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", vm->err);
    grace_vm_free(vm);
    return NULL;
  }
  return vm;
}

void grace_vm_free(grace_vm *vm) {
  if (!vm) return;
  vm->backend[GRACE_CUDA]->release(vm);
  vm->backend[GRACE_CPU]->release(vm);
  vm->alloc(vm->alloc_ud, vm, sizeof *vm, 0, VM_ALIGN);
}

int grace_cuda_available(grace_vm *vm) { return vm ? cuda_usable(vm) : 0; }

grace_status grace_set_default_device(grace_vm *vm, const char *name) {
  if (!vm) return GRACE_EARG;
  if (!name) return vm_err(vm, GRACE_EARG, "set_default_device: a NULL name");
  if (!strcmp(name, "cpu")) vm->default_device = GRACE_CPU;
  else if (!strcmp(name, "cuda")) {
    if (!grace_cuda_available(vm))
      return vm_err(vm, GRACE_EDEVICE, "device 'cuda' requested but no CUDA device is usable: %s",
                    cuda_why(vm));
    vm->default_device = GRACE_CUDA;
  } else if (!strcmp(name, "auto")) {
    /* Tensors on the GPU need the CUDA backend (cuda/); until it runs ops, auto stays on the CPU. */
    vm->default_device = GRACE_CPU;
  } else
    return vm_err(vm, GRACE_EARG, "unknown device '%s' (expected cpu, cuda or auto)", name);
  return GRACE_OK;
}

const char *grace_backend_info(grace_vm *vm) {
  if (!vm) return NULL;
  if (vm->default_device == GRACE_CUDA)
    snprintf(vm->info, sizeof vm->info, "cuda: %s", cuda_describe(vm));
  else
    snprintf(vm->info, sizeof vm->info, "cpu (%d thread%s)%s%s", vm->threads, vm->threads == 1 ? "" : "s",
             grace_cuda_available(vm) ? "; CUDA device present: " : "",
             grace_cuda_available(vm) ? cuda_describe(vm) : "");
  return vm->info;
}

