/* gpu_stage.c: a host tensor a compiled device program takes every call (`model(x:cuda())`), copied ahead of the
 * program through page-locked staging memory: the host copies the tensor into one of a small ring of page-locked
 * buffers, and an asynchronous copy on the stream moves it to fresh device memory, ordered before the program's
 * kernels (or its graph). No synchronous copy stays inside the program, so it can be one CUDA graph (DESIGN:
 * PyGraph's data placement). A buffer is reused once the copy that read it has completed (an event per buffer). */
#include <string.h>
#include "cuda/cuda_graph.h"
#include "gpu/gpu_exec.h"

enum { STAGE_RING = 4 };

struct gpu_stage {
  void *buf[STAGE_RING];
  size_t cap[STAGE_RING];
  CUevent ev[STAGE_RING];
  int used[STAGE_RING], next;
  long copies;
  size_t bytes;           /* moved so far */
};

gpu_stage *gpu_stage_new(grace_vm *vm) { return vm_calloc(vm, sizeof(gpu_stage)); }

void gpu_stage_free(grace_vm *vm, gpu_stage *s) {
  if (!s) return;
  cuda_ctx *c = vm->cuda;
  if (c) {
    for (int r = 0; r < STAGE_RING; r++) if (s->used[r]) cuda_event_sync(c, s->ev[r]);
    for (int r = 0; r < STAGE_RING; r++) {
      cuda_host_free(c, s->buf[r]);
      if (s->ev[r]) cuda_event_free(c, s->ev[r]);
    }
  }
  vm_free(vm, s, sizeof *s);
}

size_t gpu_stage_bytes(const gpu_stage *s) { return s ? s->bytes : 0; }

grace_status gpu_stage_to_device(grace_vm *vm, gpu_stage *s, grace_tensor *host, grace_tensor **out) {
  *out = NULL;
  cuda_ctx *c = gpu_ctx(vm);
  if (!c) return vm->status;
  if (host->storage->device != GRACE_CPU || !vm_is_contiguous(host))   /* not what staging is for: a plain copy */
    return vm_route(vm, GRACE_OP_TO_DEVICE, 1, &host, &(grace_attrs){.device = GRACE_CUDA}, 1, out);
  size_t n = (size_t)vm_numel(host->ndim, host->sizes) * grace_dtype_size(host->dtype);
  int r = s->next;
  s->next = (r + 1) % STAGE_RING;
  grace_status st = GRACE_OK;
  if (s->used[r] && (st = cuda_event_sync(c, s->ev[r])) != GRACE_OK) return st;
  s->used[r] = 0;
  if (!s->ev[r] && (st = cuda_event_new(c, &s->ev[r])) != GRACE_OK) return st;
  if (s->cap[r] < n) {
    cuda_host_free(c, s->buf[r]);
    s->buf[r] = NULL;
    s->cap[r] = 0;
    if ((st = cuda_host_alloc(c, n ? n : 1, &s->buf[r])) != GRACE_OK) return st;
    s->cap[r] = n ? n : 1;
  }
  grace_tensor *d = vm_tensor_new(vm, "to", host->dtype, GRACE_CUDA, host->ndim, host->sizes);
  if (!d) return vm->status;
  if (n) {
    memcpy(s->buf[r], vm_ptr(host), n);
    st = cuda_copy_to_device_async(c, gpu_ptr(d), s->buf[r], n);
    if (st == GRACE_OK && (st = cuda_event_record(c, s->ev[r])) == GRACE_OK) s->used[r] = 1;
  }
  if (st != GRACE_OK) { grace_tensor_release(d); return st; }
  d->wrapped = host->wrapped;
  s->copies++;
  s->bytes += n;
  *out = d;
  return GRACE_OK;
}
