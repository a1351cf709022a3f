/* cuda_alloc.c: a caching allocator for device memory. cuMemAlloc/cuMemFree are slow and synchronize the device,
 * so a released block is kept in a cache keyed by its size class and handed out again by a later request of the
 * same class. grace uses one stream per VM, so a block released after the work that used it was queued can be
 * reused by the next allocation on that stream without waiting: the new work is queued behind the old. Sizes are
 * rounded as PyTorch's allocator does (512 B up to 1 MiB, 2 MiB granules above) so that slightly different sizes
 * share a class. */
#include <stdint.h>
#include <stdio.h>
#include "cuda/cuda_internal.h"

enum { SMALL_LIMIT = 1 << 20, SMALL_ROUND = 512, LARGE_ROUND = 2 << 20 };

static size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= SMALL_LIMIT) return (n + SMALL_ROUND - 1) / SMALL_ROUND * SMALL_ROUND;
  return (n + (size_t)LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

/* Fibonacci hashing of the 512-byte granule number: the top 10 bits index the 1024 buckets. */
static size_t bucket(uint64_t x) { return (size_t)((x >> 9) * 0x9E3779B97F4A7C15ull >> 54) % CUDA_ALLOC_BUCKETS; }
static size_t live_bucket(CUdeviceptr p) { return bucket(p); }
static size_t size_bucket(size_t n) { return bucket(n); }

static void track_live(cuda_ctx *c, cuda_block *b) {
  b->arena = b->held = 0;
  if (c->cap) cuda_capture_adopt(c, b);   /* a graph's memory: kept for its replays */
  size_t h = live_bucket(b->ptr);
  b->next = c->live[h];
  c->live[h] = b;
  c->mem.allocated += b->size;
  if (c->mem.allocated > c->mem.peak_allocated) c->mem.peak_allocated = c->mem.allocated;
}

/* Frees every cached block to the driver. */
static void free_cached(cuda_ctx *c) {
  for (size_t h = 0; h < CUDA_ALLOC_BUCKETS; h++) {
    cuda_block *b = c->cached[h];
    while (b) {
      cuda_block *next = b->next;
      c->fn.cuMemFree_v2(b->ptr);
      c->mem.reserved -= b->size;
      vm_free(c->vm, b, sizeof *b);
      b = next;
    }
    c->cached[h] = NULL;
  }
}

grace_status cuda_malloc(cuda_ctx *c, size_t n, CUdeviceptr *ptr) {
  *ptr = 0;
  c->mem.nalloc++;
  if (n > SIZE_MAX - LARGE_ROUND)
    return vm_err(c->vm, GRACE_ENOMEM, "cuda: out of memory allocating %zu bytes (more than can exist)", n);
  size_t size = round_size(n);
  size_t h = size_bucket(size);
  cuda_block *shared = c->cap ? cuda_capture_reuse(c, size) : NULL;   /* a capture takes the arena's first */
  if (shared) { c->mem.ncache_hits++; *ptr = shared->ptr; return GRACE_OK; }
  for (cuda_block **pb = &c->cached[h]; *pb; pb = &(*pb)->next)
    if ((*pb)->size == size) {
      cuda_block *b = *pb;
      *pb = b->next;
      track_live(c, b);
      c->mem.ncache_hits++;
      *ptr = b->ptr;
      return GRACE_OK;
    }
  cuda_block *b = vm_alloc(c->vm, sizeof *b);
  if (!b) return vm_err(c->vm, GRACE_ENOMEM, "cuda: out of host memory");
  CUresult r = c->fn.cuMemAlloc_v2(&b->ptr, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    /* Cached blocks of other classes may be what stands in the way. */
    c->mem.noom_retries++;
    c->fn.cuStreamSynchronize(c->stream);
    free_cached(c);
    r = c->fn.cuMemAlloc_v2(&b->ptr, size);
  }
  if (r) {
    vm_free(c->vm, b, sizeof *b);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) return cuda_check(c->vm, r, "cuMemAlloc_v2");
    size_t dev_free = 0, dev_total = 0;
    c->fn.cuMemGetInfo_v2(&dev_free, &dev_total);
    return vm_err(c->vm, GRACE_ENOMEM,
                  "cuda: out of memory allocating %zu bytes (allocated %zu, reserved %zu, free %zu of %zu)", n,
                  c->mem.allocated, c->mem.reserved, dev_free, dev_total);
  }
  b->size = size;
  c->mem.ndriver_allocs++;
  c->mem.reserved += size;
  track_live(c, b);
  *ptr = b->ptr;
  return GRACE_OK;
}

/* Moves a live block to the cache (it must be in the live table). */
static void to_cache(cuda_ctx *c, cuda_block *b) {
  for (cuda_block **pb = &c->live[live_bucket(b->ptr)]; *pb; pb = &(*pb)->next)
    if (*pb == b) {
      *pb = b->next;
      c->mem.allocated -= b->size;
      size_t h = size_bucket(b->size);
      b->next = c->cached[h];
      c->cached[h] = b;
      return;
    }
}

void cuda_alloc_unpool(cuda_ctx *c, cuda_block *b) {
  b->arena = 0;
  if (!b->held) to_cache(c, b);
}

void cuda_release(cuda_ctx *c, CUdeviceptr ptr, size_t n) {
  (void)n;   /* the block's own record says its size */
  if (!ptr) return;
  for (cuda_block **pb = &c->live[live_bucket(ptr)]; *pb; pb = &(*pb)->next)
    if ((*pb)->ptr == ptr) {
      cuda_block *b = *pb;
      /* an arena block stays at the address graphs replay with; any capture may take it again */
      if (b->arena) { b->held = 0; return; }
      *pb = b->next;
      c->mem.allocated -= b->size;
      size_t h = size_bucket(b->size);
      b->next = c->cached[h];
      c->cached[h] = b;
      return;
    }
}

void cuda_empty_cache(cuda_ctx *c) {
  /* cuMemFree waits for the device anyway; syncing first keeps the order explicit. */
  c->fn.cuStreamSynchronize(c->stream);
  free_cached(c);
}

void cuda_memory_stats(cuda_ctx *c, cuda_mem_stats *out) { *out = c->mem; }

/* Blocks held now (weights, a graph's pool) stay in the new peak: it is the highest allocation from here on. */
void cuda_alloc_reset_peak(cuda_ctx *c) { c->mem.peak_allocated = c->mem.allocated; }

void cuda_alloc_free_all(cuda_ctx *c) {
  free_cached(c);
  for (size_t h = 0; h < CUDA_ALLOC_BUCKETS; h++) {
    cuda_block *b = c->live[h];
    while (b) {
      cuda_block *next = b->next;
      c->fn.cuMemFree_v2(b->ptr);
      vm_free(c->vm, b, sizeof *b);
      b = next;
    }
    c->live[h] = NULL;
  }
  c->mem.allocated = c->mem.reserved = 0;
}
