/* base_parallel.c: the CPU worker pool behind vm_parallel_for: threads started on first use, chunks
 * handed out through an atomic counter, the calling thread working too. One pool per VM. */
#include <stdatomic.h>
#include "base/base.h"

struct vm_pool {
  int nworkers;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  uint64_t generation;       /* bumped per job, so workers see a new one */
  int quit;
  int busy;                  /* workers still inside the current job */
  vm_range_fn fn;
  void *ctx;
  int64_t n, chunk;
  atomic_int_fast64_t next;
};

static void run_chunks(vm_pool *p) {
  for (;;) {
    int64_t b = atomic_fetch_add(&p->next, p->chunk);
    if (b >= p->n) break;
    int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    p->fn(p->ctx, b, e);
  }
}

static void *worker(void *arg) {
  vm_pool *p = arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->quit) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p);
    pthread_mutex_lock(&p->mu);
    if (--p->busy == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static vm_pool *pool_start(grace_vm *vm) {
  int nw = vm->threads - 1;
  vm_pool *p = vm_calloc(vm, sizeof *p);
  if (!p) return NULL;
  p->threads = vm_calloc(vm, sizeof(pthread_t) * (size_t)nw);
  if (!p->threads) { vm_free(vm, p, sizeof *p); return NULL; }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  for (int i = 0; i < nw; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p) != 0) break;
    p->nworkers++;
  }
  return p;
}

void vm_parallel_for(grace_vm *vm, int64_t n, int64_t grain, vm_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (vm->threads <= 1 || n < 2 * grain) { fn(ctx, 0, n); return; }
  if (!vm->pool) vm->pool = pool_start(vm);
  vm_pool *p = vm->pool;
  if (!p || p->nworkers == 0) { fn(ctx, 0, n); return; }
  int parts = p->nworkers + 1;
  int64_t chunk = (n + parts * 4 - 1) / (parts * 4);   /* a few chunks per thread balance uneven work */
  if (chunk < grain) chunk = grain;
  pthread_mutex_lock(&p->mu);
  p->fn = fn; p->ctx = ctx; p->n = n; p->chunk = chunk;
  atomic_store(&p->next, 0);
  p->busy = p->nworkers;
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p);
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void vm_pool_free(grace_vm *vm) {
  vm_pool *p = vm->pool;
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  vm_free(vm, p->threads, sizeof(pthread_t) * (size_t)(vm->threads - 1));
  vm_free(vm, p, sizeof *p);
  vm->pool = NULL;
}
