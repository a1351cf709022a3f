/* cpu_fused.c: runs a fused group of float32 pointwise instructions as one pass over its output. The output's
 * elements are cut into blocks of FX_BLOCK; per block, each outside input is gathered (strides, broadcasting)
 * into a buffer unless it can be read in place, then every instruction runs its float32 kernel from
 * cpu_pointwise.c over the block, reading and writing small per-instruction buffers that stay in L1/L2.
 * Buffers are reused once a value's last reader in the group has run, so a long chain needs only a few.
 * Blocks are spread over the worker pool with vm_parallel_for; each running chunk takes one of the
 * per-thread buffer arenas allocated up front (workers never allocate). */
#include <stdatomic.h>
#include "vm/cpu_fused.h"

enum {
  FX_BLOCK = 512,                 /* elements per block: as cpu_pointwise.c, the buffers stay in cache */
  FX_BUFBYTES = FX_BLOCK * 4,     /* one buffer: a block of floats (or of truth bytes) */
  FX_GRAIN = 32768                /* elements per thread chunk at least: as cpu_pointwise.c */
};

/* A value read from outside the group: a computed tensor or a literal. */
typedef struct fx_ext {
  int32_t value;
  int is_bool;                    /* truth bytes (a WHERE condition), else floats */
  int direct;                     /* contiguous float32 laid out like the output: read in place */
  int constant;                   /* one value over the whole output: splatted once per chunk */
  float lit;                      /* a literal's value, rounded to float32 as eager's load rounds it */
  int is_lit;
  const char *ptr;                /* tensor data at its offset */
  int ndim;                       /* coalesced iteration over the output's shape */
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
  int buf;                        /* its buffer in an arena (not direct) */
} fx_ext;

/* One instruction of the group, ready to run per block. */
typedef struct fx_step {
  grace_op op;
  const grace_attrs *attrs;
  int nin;
  int is_ext[3];                  /* argument k: an fx_ext (1) or another step's result (0) */
  int ref[3];                     /* its index in exts, or the producing step */
  int buf;                        /* result buffer in an arena; -1: the output tensor */
  int ndim;                       /* its broadcast shape */
  int64_t sizes[GRACE_MAX_DIMS];
} fx_step;

typedef struct fx_job {
  fx_step *steps;
  int nstep;
  fx_ext *exts;
  int next;
  float *out;
  char *arenas;                   /* narena arenas of nbuf buffers each */
  size_t arena_bytes;
  int narena;
  atomic_int *busy;               /* per arena: taken by a running chunk */
  atomic_int err;                 /* a chunk found no free arena (cannot happen: one per thread) */
} fx_job;

static int is_literal(const grace_ir *ir, int32_t v) {
  return ir->insts[ir->vals[v].inst].op == IR_OP_LITERAL;
}

/* The float32 value eager execution sees for a literal: the 0-d tensor grace_ir_run makes (int64 for an
 * integer literal, float64 otherwise) loaded into a float32 buffer. */
static float literal_f32(const grace_ir *ir, int32_t v) {
  const ir_inst *k = &ir->insts[ir->vals[v].inst];
  return ir->vals[v].type.dtype == GRACE_INT64 ? (float)k->iliteral : (float)k->literal;
}

/* Drops size-1 dims and merges neighbours that the (contiguous) output and this input step through as one. */
static void fx_coalesce(fx_ext *e, int ndim, const int64_t *sizes, const int64_t *strides) {
  int nd = 0;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] == 1) continue;
    if (nd > 0 && e->strides[nd - 1] == strides[d] * sizes[d]) {
      e->sizes[nd - 1] *= sizes[d];
      e->strides[nd - 1] = strides[d];
      continue;
    }
    e->sizes[nd] = sizes[d];
    e->strides[nd] = strides[d];
    nd++;
  }
  if (nd == 0) { e->sizes[0] = 1; e->strides[0] = 0; nd = 1; }
  e->ndim = nd;
  int all_zero = 1;
  for (int d = 0; d < nd; d++) all_zero &= e->strides[d] == 0;
  e->constant = all_zero;
  e->direct = !e->is_bool && !all_zero && nd == 1 && e->strides[0] == 1;
}

/* Gathers elements [s, s+n) of the output's flat order from an outside tensor into buf (floats or bytes). */
static void fx_gather(const fx_ext *e, int64_t s, int64_t n, void *buf) {
  int64_t idx[GRACE_MAX_DIMS], off = 0, r = s;
  int last = e->ndim - 1;
  for (int d = last; d >= 0; d--) {
    idx[d] = r % e->sizes[d];
    r /= e->sizes[d];
    off += idx[d] * e->strides[d];
  }
  int64_t inner = e->strides[last];
  for (int64_t done = 0; done < n;) {
    int64_t run = e->sizes[last] - idx[last];
    if (run > n - done) run = n - done;
    if (e->is_bool) {
      const uint8_t *p = (const uint8_t *)e->ptr + off;
      uint8_t *o = (uint8_t *)buf + done;
      for (int64_t i = 0; i < run; i++) o[i] = p[i * inner] != 0;
    } else {
      const float *p = (const float *)e->ptr + off;
      float *o = (float *)buf + done;
      if (inner == 1) for (int64_t i = 0; i < run; i++) o[i] = p[i];
      else if (inner == 0) { float v = p[0]; for (int64_t i = 0; i < run; i++) o[i] = v; }
      else for (int64_t i = 0; i < run; i++) o[i] = p[i * inner];
    }
    done += run;
    idx[last] += run;
    off += run * inner;
    for (int d = last; d > 0 && idx[d] >= e->sizes[d]; d--) {   /* carry into the outer dims */
      off -= idx[d] * e->strides[d];
      idx[d] = 0;
      idx[d - 1]++;
      off += e->strides[d - 1];
    }
  }
}

static void fx_chunk(void *ctx, int64_t b, int64_t e) {
  fx_job *j = ctx;
  int a = -1;
  for (int i = 0; i < j->narena && a < 0; i++) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&j->busy[i], &expect, 1)) a = i;
  }
  if (a < 0) { atomic_store(&j->err, 1); return; }
  char *base = j->arenas + (size_t)a * j->arena_bytes;
#define FX_BUF(i) ((void *)(base + (size_t)(i) * FX_BUFBYTES))
  for (int k = 0; k < j->next; k++) {
    const fx_ext *x = &j->exts[k];
    if (!x->constant) continue;
    if (x->is_bool) memset(FX_BUF(x->buf), *(const uint8_t *)x->ptr != 0, FX_BLOCK);
    else {
      float v = x->is_lit ? x->lit : *(const float *)x->ptr, *o = FX_BUF(x->buf);
      for (int i = 0; i < FX_BLOCK; i++) o[i] = v;
    }
  }
  for (int64_t s = b; s < e; s += FX_BLOCK) {
    int64_t n = e - s < FX_BLOCK ? e - s : FX_BLOCK;
    for (int k = 0; k < j->next; k++) {
      const fx_ext *x = &j->exts[k];
      if (!x->constant && !x->direct) fx_gather(x, s, n, FX_BUF(x->buf));
    }
    for (int i = 0; i < j->nstep; i++) {
      const fx_step *st = &j->steps[i];
      const void *in[3] = {NULL, NULL, NULL};
      for (int k = 0; k < st->nin; k++) {
        if (!st->is_ext[k]) { in[k] = FX_BUF(j->steps[st->ref[k]].buf); continue; }
        const fx_ext *x = &j->exts[st->ref[k]];
        in[k] = x->direct ? (const void *)((const float *)x->ptr + s) : FX_BUF(x->buf);
      }
      void *out = st->buf < 0 ? (void *)(j->out + s) : FX_BUF(st->buf);
      cpu_pw_block_f32(st->op, st->attrs, n, in, out);   /* validated before the loop: cannot fail */
    }
  }
#undef FX_BUF
  atomic_store(&j->busy[a], 0);
}

/* Whether inst k is an op the fused loop runs, with the dtypes its float32 kernel takes. */
static int fx_supported(const grace_ir *ir, const ir_inst *k) {
  if (k->op < 0 || k->op >= GRACE_NOPS || k->nout != 1) return 0;
  grace_op op = (grace_op)k->op;
  grace_opkind kind = grace_op_kind(op);
  int nin = kind == GRACE_KIND_UNARY ? 1 : kind == GRACE_KIND_BINARY || kind == GRACE_KIND_COMPARE ? 2
          : op == GRACE_OP_WHERE ? 3 : 0;   /* masked_fill has checks of its own: left to eager */
  if (nin == 0 || k->nin != nin || cpu_pw_block_f32(op, &k->attrs, 0, NULL, NULL) != GRACE_OK) return 0;
  grace_dtype rdt = ir->vals[k->first_result].type.dtype;
  if (rdt != (kind == GRACE_KIND_COMPARE ? GRACE_BOOL : GRACE_FLOAT32)) return 0;
  int tensors = 0;
  for (int a = 0; a < nin; a++) {
    int32_t v = ir->args[k->first_arg + a];
    if (v < 0 || v >= ir->nval) return 0;
    grace_dtype dt = ir->vals[v].type.dtype;
    if (op == GRACE_OP_WHERE && a == 0) {
      if (dt != GRACE_BOOL || is_literal(ir, v)) return 0;
    } else if (is_literal(ir, v)) {
      if (dt != GRACE_FLOAT64 && dt != GRACE_INT64) return 0;
    } else if (dt != GRACE_FLOAT32) return 0;
    else tensors++;
  }
  /* with a float32 tensor among the values, eager computes in float32 (a literal never widens it) */
  return tensors > 0;
}

/* Frees what cpu_fused_run allocated (NULL entries skipped). */
typedef struct fx_mem {
  int32_t *map; size_t map_bytes;
  fx_step *steps; size_t steps_bytes;
  fx_ext *exts; size_t exts_bytes;
  int32_t *last; size_t last_bytes;
  int *freebuf; size_t freebuf_bytes;
  char *arenas; size_t arenas_bytes;
  atomic_int *busy; size_t busy_bytes;
} fx_mem;

static void fx_mem_free(grace_vm *vm, fx_mem *m) {
  vm_free(vm, m->map, m->map_bytes);
  vm_free(vm, m->steps, m->steps_bytes);
  vm_free(vm, m->exts, m->exts_bytes);
  vm_free(vm, m->last, m->last_bytes);
  vm_free(vm, m->freebuf, m->freebuf_bytes);
  vm_free(vm, m->arenas, m->arenas_bytes);
  vm_free(vm, m->busy, m->busy_bytes);
}

static grace_status fx_fail(grace_vm *vm, fx_mem *m, grace_status st, const char *msg) {
  fx_mem_free(vm, m);
  return msg ? vm_err(vm, st, "fused: %s", msg) : st;
}

grace_status cpu_fused_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                           int32_t out_value, grace_tensor **out) {
  if (!out) return vm_err(vm, GRACE_EARG, "fused: no place for the result");
  *out = NULL;
  if (!ir || !insts || ninst <= 0 || !vals || out_value < 0 || out_value >= ir->nval)
    return vm_err(vm, GRACE_EARG, "fused: bad arguments (%d instructions, output value %d)", ninst, (int)out_value);
  fx_mem m = {0};
  /* map[inst] = its position in the group + 1 (0: outside); map[ninst + value] = its fx_ext + 1 */
  m.map_bytes = sizeof(int32_t) * ((size_t)ir->ninst + (size_t)ir->nval);
  if (!(m.map = vm_calloc(vm, m.map_bytes))) return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  int32_t *pos = m.map, *extof = m.map + ir->ninst;
  for (int i = 0; i < ninst; i++) {
    int32_t k = insts[i];
    if (k < 0 || k >= ir->ninst || pos[k]) return fx_fail(vm, &m, GRACE_EARG, "bad or repeated instruction index");
    if (!fx_supported(ir, &ir->insts[k]))
      return fx_fail(vm, &m, GRACE_EUNSUPPORTED, "only float32 unary/binary/compare/where instructions fuse");
    pos[k] = i + 1;
  }
  int32_t out_inst = ir->vals[out_value].inst;
  if (!pos[out_inst] || ir->vals[out_value].type.dtype != GRACE_FLOAT32)
    return fx_fail(vm, &m, GRACE_EUNSUPPORTED, "the output must be a float32 result of the group");

  /* the instructions the output depends on, found backwards; their arguments must come earlier */
  m.last_bytes = sizeof(int32_t) * (size_t)ninst;
  if (!(m.last = vm_alloc(vm, m.last_bytes))) return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  int32_t *need = m.last;   /* first used as "needed" flags, then as step numbers */
  for (int i = 0; i < ninst; i++) need[i] = 0;
  need[pos[out_inst] - 1] = 1;
  int nstep = 0;
  for (int i = ninst - 1; i >= 0; i--) {
    if (!need[i]) continue;
    nstep++;
    const ir_inst *k = &ir->insts[insts[i]];
    for (int a = 0; a < k->nin; a++) {
      int32_t p = pos[ir->vals[ir->args[k->first_arg + a]].inst];
      if (p && p - 1 >= i) return fx_fail(vm, &m, GRACE_EARG, "instructions are not in program order");
      if (p) need[p - 1] = 1;
    }
  }

  /* steps and outside values */
  m.steps_bytes = sizeof(fx_step) * (size_t)nstep;
  m.exts_bytes = sizeof(fx_ext) * (size_t)nstep * 3;
  if (!(m.steps = vm_calloc(vm, m.steps_bytes)) || !(m.exts = vm_calloc(vm, m.exts_bytes)))
    return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  int ns = 0, next = 0;
  for (int i = 0; i < ninst; i++) {
    if (!need[i]) { need[i] = -1; continue; }
    need[i] = ns;   /* its step number */
    const ir_inst *k = &ir->insts[insts[i]];
    fx_step *st = &m.steps[ns++];
    st->op = (grace_op)k->op;
    st->attrs = &k->attrs;
    st->nin = k->nin;
    int ndims[3];
    const int64_t *shapes[3];
    for (int a = 0; a < k->nin; a++) {
      int32_t v = ir->args[k->first_arg + a];
      int32_t p = pos[ir->vals[v].inst];
      if (p) {
        const fx_step *src = &m.steps[need[p - 1]];
        st->is_ext[a] = 0;
        st->ref[a] = need[p - 1];
        ndims[a] = src->ndim;
        shapes[a] = src->sizes;
        continue;
      }
      st->is_ext[a] = 1;
      if (!extof[v]) {
        fx_ext *x = &m.exts[next];
        x->value = v;
        if (is_literal(ir, v)) { x->is_lit = 1; x->lit = literal_f32(ir, v); }
        else {
          const grace_tensor *t = vals[v];
          if (!t) return fx_fail(vm, &m, GRACE_EARG, "an outside input of the group has no value");
          grace_dtype want = st->op == GRACE_OP_WHERE && a == 0 ? GRACE_BOOL : GRACE_FLOAT32;
          if (t->dtype != want || t->storage->device != GRACE_CPU || t->pending)
            return fx_fail(vm, &m, GRACE_EUNSUPPORTED, "an outside input is not a computed float32 CPU tensor");
          x->is_bool = want == GRACE_BOOL;
          x->ptr = vm_ptr(t);
        }
        extof[v] = ++next;
      } else if (m.exts[extof[v] - 1].is_bool != (st->op == GRACE_OP_WHERE && a == 0))
        return fx_fail(vm, &m, GRACE_EUNSUPPORTED, "a value read both as a condition and as a number");
      st->ref[a] = extof[v] - 1;
      const fx_ext *x = &m.exts[st->ref[a]];
      ndims[a] = x->is_lit ? 0 : vals[v]->ndim;
      shapes[a] = x->is_lit ? NULL : vals[v]->sizes;
    }
    grace_status bs = grace_broadcast_shapes(vm, grace_op_name(st->op), k->nin, ndims, shapes, &st->ndim, st->sizes);
    if (bs != GRACE_OK) { fx_mem_free(vm, &m); return bs; }
  }
  fx_step *last_step = &m.steps[nstep - 1];   /* the output's instruction: last of those it depends on */

  /* buffers: a step's result lives from its step to its last reader; then the buffer is reused */
  int32_t *lastuse = m.last;   /* reuse: need[] is no longer read */
  for (int i = 0; i < nstep; i++) lastuse[i] = i;
  for (int i = 0; i < nstep; i++)
    for (int a = 0; a < m.steps[i].nin; a++)
      if (!m.steps[i].is_ext[a]) lastuse[m.steps[i].ref[a]] = i;
  m.freebuf_bytes = sizeof(int) * (size_t)(nstep + 1);
  if (!(m.freebuf = vm_alloc(vm, m.freebuf_bytes))) return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  int nfree = 0, nbuf = 0;
  for (int i = 0; i < nstep; i++) {
    fx_step *st = &m.steps[i];
    st->buf = st == last_step ? -1 : nfree > 0 ? m.freebuf[--nfree] : nbuf++;
    /* then the buffers whose last reader this is (after the result took one: kernels take restrict pointers) */
    for (int a = 0; a < st->nin; a++) {
      if (st->is_ext[a]) continue;
      int r = st->ref[a], dup = 0;
      for (int b = 0; b < a; b++) dup |= !st->is_ext[b] && st->ref[b] == r;
      if (!dup && lastuse[r] == i && m.steps[r].buf >= 0) m.freebuf[nfree++] = m.steps[r].buf;
    }
  }
  /* outside values, iterated over the output's shape */
  int ondim = last_step->ndim;
  const int64_t *osizes = last_step->sizes;
  for (int k = 0; k < next; k++) {
    fx_ext *x = &m.exts[k];
    if (x->is_lit) { x->constant = 1; x->ndim = 1; x->sizes[0] = 1; }
    else {
      int64_t bst[GRACE_MAX_DIMS];
      vm_broadcast_strides(vals[x->value], ondim, osizes, bst);
      fx_coalesce(x, ondim, osizes, bst);
    }
    x->buf = x->direct ? -1 : nbuf++;
  }

  grace_tensor *o = vm_tensor_new(vm, "fused", GRACE_FLOAT32, GRACE_CPU, ondim, osizes);
  if (!o) { fx_mem_free(vm, &m); return vm->status; }
  int64_t numel = vm_numel(ondim, osizes);
  if (numel > 0) {
    fx_job job = {.steps = m.steps, .nstep = nstep, .exts = m.exts, .next = next, .out = (float *)vm_ptr(o)};
    job.narena = vm->threads > 1 ? vm->threads : 1;   /* at most one chunk per thread runs at a time */
    job.arena_bytes = (size_t)(nbuf > 0 ? nbuf : 1) * FX_BUFBYTES;
    m.arenas_bytes = job.arena_bytes * (size_t)job.narena;
    m.busy_bytes = sizeof(atomic_int) * (size_t)job.narena;
    if (!(m.arenas = vm_alloc(vm, m.arenas_bytes)) || !(m.busy = vm_alloc(vm, m.busy_bytes))) {
      grace_tensor_release(o);
      return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
    }
    for (int i = 0; i < job.narena; i++) atomic_init(&m.busy[i], 0);
    job.arenas = m.arenas;
    job.busy = m.busy;
    atomic_init(&job.err, 0);
    vm_parallel_for(vm, numel, FX_GRAIN, fx_chunk, &job);
    if (atomic_load(&job.err)) {
      grace_tensor_release(o);
      return fx_fail(vm, &m, GRACE_EINTERNAL, "more parallel chunks than buffer arenas");
    }
  }
  fx_mem_free(vm, &m);
  *out = o;
  return GRACE_OK;
}
