/* cpu_fused.c: runs fused groups of the fusion analysis on the CPU, bit for bit what running their
 * instructions one by one through grace_run gives (the same float32 kernels and reduction loops do the
 * arithmetic).
 * Pointwise groups: one pass over the output. Its elements are cut into blocks of FX_BLOCK; per block, each
 * outside input is gathered (strides, broadcasting) into a buffer unless it can be read in place, then every
 * instruction runs its float32 kernel from cpu_pointwise.c over the block, reading and writing small
 * per-instruction buffers that stay in L1/L2. Buffers are reused once a value's last reader in the group has
 * run, so a long chain needs only a few. Blocks are spread over the worker pool with vm_parallel_for; each
 * running chunk takes one of the per-thread buffer arenas allocated up front (workers never allocate).
 * Matmul groups: the GEMM of cpu_matmul.c on packed panels of the right operand, the pointwise epilogue run
 * by the same block loop over each block of rows as soon as the GEMM has finished it (still in cache).
 * Row groups: reductions over the last dim with their pointwise producers and consumers, one pass per row. */
#include <stdatomic.h>
#include "cpu/cpu_fused.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_reduce_math.h"

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
int cpu_fx_supported(const grace_ir *ir, const ir_inst *k) {
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

/* A group made ready to run: its steps, outside values and buffer arenas. */
struct cpu_fx {
  grace_vm *vm;
  fx_mem m;
  fx_job job;
  int ndim;                       /* the output's shape */
  int64_t sizes[GRACE_MAX_DIMS];
};

grace_status cpu_fx_prepare(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                            int32_t out_value, int32_t gather_value, cpu_fx **out) {
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
    if (!cpu_fx_supported(ir, &ir->insts[k]))
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
    if (x->value == gather_value && !x->is_lit) x->direct = 0;   /* the output's own storage: read before it is written */
    x->buf = x->direct ? -1 : nbuf++;
  }

  cpu_fx *fx = vm_calloc(vm, sizeof *fx);
  if (!fx) return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  fx->vm = vm;
  fx->ndim = ondim;
  memcpy(fx->sizes, osizes, sizeof(int64_t) * (size_t)ondim);
  fx_job *job = &fx->job;
  *job = (fx_job){.steps = m.steps, .nstep = nstep, .exts = m.exts, .next = next};
  job->narena = vm->threads > 1 ? vm->threads : 1;   /* at most one chunk per thread runs at a time */
  job->arena_bytes = (size_t)(nbuf > 0 ? nbuf : 1) * FX_BUFBYTES;
  m.arenas_bytes = job->arena_bytes * (size_t)job->narena;
  m.busy_bytes = sizeof(atomic_int) * (size_t)job->narena;
  if (!(m.arenas = vm_alloc(vm, m.arenas_bytes)) || !(m.busy = vm_alloc(vm, m.busy_bytes))) {
    vm_free(vm, fx, sizeof *fx);
    return fx_fail(vm, &m, GRACE_ENOMEM, "out of host memory");
  }
  for (int i = 0; i < job->narena; i++) atomic_init(&m.busy[i], 0);
  job->arenas = m.arenas;
  job->busy = m.busy;
  atomic_init(&job->err, 0);
  fx->m = m;
  *out = fx;
  return GRACE_OK;
}

void cpu_fx_free(cpu_fx *fx) {
  if (!fx) return;
  grace_vm *vm = fx->vm;
  fx_mem_free(vm, &fx->m);
  vm_free(vm, fx, sizeof *fx);
}

int cpu_fx_shape(const cpu_fx *fx, const int64_t **sizes) {
  *sizes = fx->sizes;
  return fx->ndim;
}

void cpu_fx_bind(cpu_fx *fx, float *out) { fx->job.out = out; }

void cpu_fx_range(cpu_fx *fx, int64_t begin, int64_t end) {
  if (begin < end) fx_chunk(&fx->job, begin, end);
}

grace_status cpu_fused_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                           int32_t out_value, grace_tensor **out) {
  if (!out) return vm_err(vm, GRACE_EARG, "fused: no place for the result");
  *out = NULL;
  cpu_fx *fx = NULL;
  grace_status st = cpu_fx_prepare(vm, ir, insts, ninst, vals, out_value, -1, &fx);
  if (st != GRACE_OK) return st;
  grace_tensor *o = vm_tensor_new(vm, "fused", GRACE_FLOAT32, GRACE_CPU, fx->ndim, fx->sizes);
  if (!o) { cpu_fx_free(fx); return vm->status; }
  int64_t numel = vm_numel(fx->ndim, fx->sizes);
  fx->job.out = (float *)vm_ptr(o);
  if (numel > 0) vm_parallel_for(vm, numel, FX_GRAIN, fx_chunk, &fx->job);
  int lost = atomic_load(&fx->job.err);
  cpu_fx_free(fx);
  if (lost) {
    grace_tensor_release(o);
    return vm_err(vm, GRACE_EINTERNAL, "fused: more parallel chunks than buffer arenas");
  }
  *out = o;
  return GRACE_OK;
}

/* ---- matmul groups: the GEMM on packed panels, the pointwise epilogue per finished block ---- */
typedef struct fx_epi {
  cpu_fx *fx;
  int64_t N;
} fx_epi;

/* Rows [m0, m1) x columns [n0, n1) of the [rows, N] result are final: the epilogue runs over them in place. */
static void fx_epi_block(void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const fx_epi *e = ctx;
  if (n0 == 0 && n1 == e->N) { cpu_fx_range(e->fx, m0 * e->N, m1 * e->N); return; }
  for (int64_t r = m0; r < m1; r++) cpu_fx_range(e->fx, r * e->N + n0, r * e->N + n1);
}

grace_status cpu_fused_matmul_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                                  const cpu_mm_pack *pk, int32_t out_value, grace_tensor **out) {
  if (!out) return vm_err(vm, GRACE_EARG, "fused: no place for the result");
  *out = NULL;
  if (!ir || !insts || ninst <= 0 || !vals || insts[0] < 0 || insts[0] >= ir->ninst)
    return vm_err(vm, GRACE_EARG, "fused: bad arguments (%d instructions)", ninst);
  const ir_inst *mk = &ir->insts[insts[0]];
  int32_t mv = mk->first_result;
  if (mk->op != GRACE_OP_MATMUL || mk->nin != 2 || (ninst > 1 && (out_value < 0 || out_value >= ir->nval)))
    return vm_err(vm, GRACE_EUNSUPPORTED, "fused: a matmul group starts with its matmul");
  grace_tensor *a = vals[ir->args[mk->first_arg]], *b = vals[ir->args[mk->first_arg + 1]];
  const ir_type *mt = &ir->vals[mv].type;
  if (!a || !b || a->dtype != GRACE_FLOAT32 || b->dtype != GRACE_FLOAT32 || a->pending || b->pending ||
      a->storage->device != GRACE_CPU || b->storage->device != GRACE_CPU || mt->dtype != GRACE_FLOAT32)
    return vm_err(vm, GRACE_EUNSUPPORTED, "fused: only float32 CPU matmuls run fused");
  if (ninst > 1 && vals[mv]) return vm_err(vm, GRACE_EARG, "fused: the matmul's result is computed already");

  /* the GEMM on packed panels of a 2-d right operand, the epilogue in place per block */
  cpu_mm_pack own = {0};
  grace_status st = GRACE_EUNSUPPORTED;
  if (!pk && b->ndim == 2 && a->ndim >= 2 && b->sizes[1] > 1 && vm_numel(a->ndim - 1, a->sizes) > 1) {
    if ((st = cpu_mm_pack_b(vm, b, &own)) != GRACE_OK) return st;
    pk = &own;
  }
  grace_tensor *c = NULL;
  cpu_fx *fx = NULL;
  st = GRACE_EUNSUPPORTED;
  if (pk && b->ndim == 2 && a->ndim >= 2 && a->ndim == mt->ndim && pk->K == b->sizes[0] && pk->N == b->sizes[1] &&
      a->sizes[a->ndim - 1] == pk->K) {
    int64_t cs[GRACE_MAX_DIMS];   /* the call's sizes (the IR's may be symbolic): a's rows, b's columns */
    memcpy(cs, a->sizes, sizeof(int64_t) * (size_t)a->ndim);
    cs[a->ndim - 1] = pk->N;
    if (!(c = vm_tensor_new(vm, "matmul", GRACE_FLOAT32, GRACE_CPU, a->ndim, cs))) st = vm->status;
    else if (ninst > 1) {
      vals[mv] = c;   /* the epilogue reads the result from where the GEMM writes it */
      st = cpu_fx_prepare(vm, ir, insts + 1, ninst - 1, vals, out_value, mv, &fx);
      vals[mv] = NULL;
      const int64_t *fs = NULL;
      int fnd = fx ? cpu_fx_shape(fx, &fs) : 0;
      if (st == GRACE_OK && (fnd != c->ndim || memcmp(fs, c->sizes, sizeof(int64_t) * (size_t)fnd)))
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: the epilogue's shape is not the matmul's");
    } else st = GRACE_OK;
    if (st == GRACE_OK) {
      fx_epi e = {.fx = fx, .N = c->ndim ? c->sizes[c->ndim - 1] : 1};
      if (fx) cpu_fx_bind(fx, (float *)vm_ptr(c));
      st = vm_numel(c->ndim, c->sizes) == 0 ? GRACE_EUNSUPPORTED
           : cpu_mm_packed_run(vm, a, pk, (float *)vm_ptr(c), fx ? fx_epi_block : NULL, &e);
    }
    cpu_fx_free(fx);
    if (st != GRACE_OK) { grace_tensor_release(c); c = NULL; }
  }
  cpu_mm_pack_free(vm, &own);
  if (st == GRACE_OK) { *out = c; return GRACE_OK; }
  if (st != GRACE_EUNSUPPORTED) return st;

  /* eager's matmul (matrix-vector sums, batched right operands, empty shapes), then the epilogue as one loop */
  grace_tensor *args[2] = {a, b};
  if (ninst == 1) return cpu_matmul_run(vm, GRACE_OP_MATMUL, 2, args, &mk->attrs, 1, out);
  for (int i = 1; i < ninst; i++)
    if (!cpu_fx_supported(ir, &ir->insts[insts[i]]))
      return vm_err(vm, GRACE_EUNSUPPORTED, "fused: the epilogue has an instruction the fused loop does not run");
  if ((st = cpu_matmul_run(vm, GRACE_OP_MATMUL, 2, args, &mk->attrs, 1, &c)) != GRACE_OK) return st;
  vals[mv] = c;
  st = cpu_fused_run(vm, ir, insts + 1, ninst - 1, vals, out_value, out);
  vals[mv] = NULL;
  grace_tensor_release(c);
  return st;
}

/* ---- row groups: reductions over the last dim with their pointwise producers and broadcast consumers ----
 * One pass per row: every member is evaluated for row r into a row buffer (L floats) or, for values of the
 * reduced shape, one float; reductions read a row buffer. Rows are spread over the worker pool, each running
 * chunk with its own arena. Sums and maxima are computed by the very inner loops eager's reduction runs on the
 * same row (cpu_reduce_math.h), in the same chunking, so results are bit for bit eager's. */
enum { RX_ROW, RX_SCALAR };                       /* a value per element of the row, or one per row */
enum { RX_MEMBER, RX_EXT, RX_LIT };               /* where an argument comes from */
enum { RX_CHUNK = 1024, RX_MAXROW = 65536, RX_GRAIN = 65536 };

typedef struct rx_step {
  grace_op op;
  const grace_attrs *attrs;
  int cls;                        /* RX_ROW or RX_SCALAR: its result */
  int reduce;                     /* SUM, MEAN, MAX or MIN over the row */
  int chunked;                    /* the reduction reads an outside tensor eager reads in RX_CHUNK pieces */
  int is_bool;                    /* its result is truth bytes */
  int nin;
  int kind[3], ref[3];            /* per argument: RX_MEMBER (step), RX_EXT (exts), RX_LIT (lits) */
  float lit[3];
} rx_step;

typedef struct rx_job {
  rx_step *steps;
  int nstep;
  fx_ext *exts;                   /* coalesced over the row shape (RX_ROW readers) or the reduced shape */
  int64_t L;
  float *out;                     /* the last step's result, contiguous */
  char *arenas;
  size_t arena_bytes;
  int narena;
  atomic_int *busy;
  atomic_int err;
} rx_job;

/* The reduction of row x[0..n) as eager's reduce_range computes it for a float32 row: direct (one piece) or
 * in RX_CHUNK pieces, the partial states folded in order. */
static float rx_reduce(grace_op op, const float *x, int64_t n, int chunked) {
  int64_t piece = chunked ? RX_CHUNK : n;
  if (op == GRACE_OP_SUM || op == GRACE_OP_MEAN) {
    double s = 0;
    for (int64_t b = 0; b < n; b += piece) s += rm_sum_f32(x + b, n - b < piece ? n - b : piece);
    return op == GRACE_OP_MEAN ? (float)(s / (double)n) : (float)s;
  }
  int wm = op == GRACE_OP_MAX, have = 0;
  double best = 0;
  for (int64_t b = 0; b < n; b += piece) {
    if (have && isnan(best)) break;
    double m = rm_best_f32(x + b, n - b < piece ? n - b : piece, wm);
    if (have && !isnan(m) && (wm ? m <= best : m >= best)) continue;
    have = 1;
    best = m;
  }
  return (float)best;
}

static void rx_splat(void *buf, int is_bool, const void *v, int64_t n) {
  if (is_bool) memset(buf, *(const uint8_t *)v != 0, (size_t)n);
  else { float f = *(const float *)v, *o = buf; for (int64_t i = 0; i < n; i++) o[i] = f; }
}

static void rx_rows(void *ctx, int64_t r0, int64_t r1) {
  rx_job *j = ctx;
  int a = -1;
  for (int i = 0; i < j->narena && a < 0; i++) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&j->busy[i], &expect, 1)) a = i;
  }
  if (a < 0) { atomic_store(&j->err, 1); return; }
  int64_t L = j->L;
  size_t rb = (size_t)L * 4;
  char *base = j->arenas + (size_t)a * j->arena_bytes;
#define RX_BUF(i) ((void *)(base + (size_t)(i) * rb))
  char *tmp = base + (size_t)j->nstep * rb;   /* three argument buffers after the step buffers */
  for (int64_t r = r0; r < r1; r++)
    for (int i = 0; i < j->nstep; i++) {
      const rx_step *st = &j->steps[i];
      int64_t n = st->cls == RX_ROW ? L : 1;
      const void *in[3] = {NULL, NULL, NULL};
      for (int k = 0; k < st->nin; k++) {
        void *t = tmp + (size_t)k * rb;
        if (st->kind[k] == RX_LIT) { rx_splat(t, 0, &st->lit[k], n); in[k] = t; continue; }
        if (st->kind[k] == RX_MEMBER) {
          const rx_step *src = &j->steps[st->ref[k]];
          if (src->cls == st->cls || st->reduce) in[k] = RX_BUF(st->ref[k]);
          else { rx_splat(t, src->is_bool, RX_BUF(st->ref[k]), n); in[k] = t; }   /* one per row, over the row */
          continue;
        }
        const fx_ext *x = &j->exts[st->ref[k]];
        int64_t s = st->cls == RX_ROW || st->reduce ? r * L : r;
        if (x->direct) in[k] = (const float *)x->ptr + s;
        else if (x->constant) { rx_splat(t, x->is_bool, x->ptr, st->reduce ? L : n); in[k] = t; }
        else { fx_gather(x, s, st->reduce ? L : n, t); in[k] = t; }
      }
      int last = i == j->nstep - 1;
      void *o = last ? (void *)(j->out + (st->cls == RX_ROW ? r * L : r)) : RX_BUF(i);
      if (st->reduce) *(float *)o = rx_reduce(st->op, in[0], L, st->chunked);
      else cpu_pw_block_f32(st->op, st->attrs, n, in, o);   /* validated before the loop: cannot fail */
    }
#undef RX_BUF
  atomic_store(&j->busy[a], 0);
}

static int same_sizes(int na, const int64_t *a, int nb, const int64_t *b) {
  return na == nb && !memcmp(a, b, sizeof(int64_t) * (size_t)na);
}
/* Whether shape (nd, s) broadcasts to exactly (tn, t). */
static int bcast_to(int nd, const int64_t *s, int tn, const int64_t *t) {
  if (nd > tn) return 0;
  for (int d = 1; d <= nd; d++)
    if (s[nd - d] != 1 && s[nd - d] != t[tn - d]) return 0;
  return 1;
}

grace_status cpu_fused_row_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                               int32_t out_value, grace_tensor **out) {
  if (!out) return vm_err(vm, GRACE_EARG, "fused: no place for the result");
  *out = NULL;
  if (!ir || !insts || ninst <= 0 || !vals || out_value < 0 || out_value >= ir->nval ||
      ir->vals[out_value].inst != insts[ninst - 1])
    return vm_err(vm, GRACE_EARG, "fused: bad arguments (%d instructions, output value %d)", ninst, (int)out_value);
  /* the row shape: what the first reduction reads; the reduced shape: what it gives */
  const ir_type *dom = NULL, *red = NULL;
  int keep = 0;
  for (int i = 0; i < ninst && !dom; i++) {
    const ir_inst *k = &ir->insts[insts[i]];
    if (k->op >= GRACE_NOPS || grace_op_kind((grace_op)k->op) != GRACE_KIND_REDUCE) continue;
    dom = &ir->vals[ir->args[k->first_arg]].type;
    red = &ir->vals[k->first_result].type;
    keep = k->attrs.keepdim != 0;
  }
  if (!dom || dom->ndim < 1 || dom->sizes[dom->ndim - 1] < 2 || dom->sizes[dom->ndim - 1] > RX_MAXROW)
    return vm_err(vm, GRACE_EUNSUPPORTED, "fused: a row group reduces rows of 2 to %d elements", (int)RX_MAXROW);
  int D = dom->ndim;
  int64_t L = dom->sizes[D - 1], R = vm_numel(D, dom->sizes) / L;
  size_t sbytes = sizeof(rx_step) * (size_t)ninst, ebytes = sizeof(fx_ext) * (size_t)ninst * 3;
  size_t mbytes = sizeof(int32_t) * (size_t)ir->ninst;
  rx_step *steps = vm_calloc(vm, sbytes);
  fx_ext *exts = vm_calloc(vm, ebytes);
  int32_t *pos = vm_calloc(vm, mbytes);   /* instruction -> step + 1 */
  grace_status st = steps && exts && pos ? GRACE_OK : vm_err(vm, GRACE_ENOMEM, "fused: out of host memory");
  int next = 0;
  for (int i = 0; i < ninst && st == GRACE_OK; i++) {
    int32_t ki = insts[i];
    if (ki < 0 || ki >= ir->ninst || pos[ki]) { st = vm_err(vm, GRACE_EARG, "fused: bad or repeated instruction index"); break; }
    const ir_inst *k = &ir->insts[ki];
    const ir_type *t = &ir->vals[k->first_result].type;
    rx_step *s = &steps[i];
    s->op = (grace_op)k->op;
    s->attrs = &k->attrs;
    s->nin = k->nin;
    pos[ki] = i + 1;
    int is_red = k->op < GRACE_NOPS && grace_op_kind((grace_op)k->op) == GRACE_KIND_REDUCE;
    if (is_red) {
      int64_t d = k->attrs.ndims == 1 ? k->attrs.dims[0] : -100;
      int32_t v = ir->args[k->first_arg];
      const ir_type *xt = &ir->vals[v].type;
      if ((k->op != GRACE_OP_SUM && k->op != GRACE_OP_MEAN && k->op != GRACE_OP_MAX && k->op != GRACE_OP_MIN) ||
          (d != -1 && d != D - 1) || k->attrs.has_dtype || (k->attrs.keepdim != 0) != keep || k->nin != 1 ||
          xt->dtype != GRACE_FLOAT32 || t->dtype != GRACE_FLOAT32 || !same_sizes(xt->ndim, xt->sizes, D, dom->sizes) ||
          !same_sizes(t->ndim, t->sizes, red->ndim, red->sizes)) {
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: only float32 sum/mean/max/min over the last dim of the row shape");
        break;
      }
      s->reduce = 1;
      s->cls = RX_SCALAR;
    } else if (!cpu_fx_supported(ir, k)) {
      st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: a row group member the fused loop does not run");
      break;
    } else if (same_sizes(t->ndim, t->sizes, D, dom->sizes)) s->cls = RX_ROW;
    else if (same_sizes(t->ndim, t->sizes, red->ndim, red->sizes)) s->cls = RX_SCALAR;
    else { st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: a member's shape is neither the row nor the reduced shape"); break; }
    s->is_bool = t->dtype == GRACE_BOOL;
    for (int a = 0; a < k->nin && st == GRACE_OK; a++) {
      int32_t v = ir->args[k->first_arg + a];
      int p = v >= 0 ? pos[ir->vals[v].inst] : 0;
      if (v >= 0 && p && ir->vals[v].inst != ki) {
        const rx_step *src = &steps[p - 1];
        /* a row value feeds only row ops and reductions; a per-row value spreads over a row only as [.., 1] */
        if ((src->cls == RX_ROW && !(s->cls == RX_ROW || s->reduce)) || (src->cls == RX_SCALAR && s->reduce) ||
            (src->cls == RX_SCALAR && s->cls == RX_ROW && !keep))
          st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: a value read across row and reduced shapes");
        s->kind[a] = RX_MEMBER;
        s->ref[a] = p - 1;
        continue;
      }
      if (v < 0 || v >= ir->nval) { st = vm_err(vm, GRACE_EARG, "fused: a missing argument"); break; }
      if (is_literal(ir, v)) {
        s->kind[a] = RX_LIT;
        s->lit[a] = literal_f32(ir, v);
        continue;
      }
      const grace_tensor *x = vals[v];
      int want_bool = s->op == GRACE_OP_WHERE && a == 0;
      if (!x || x->dtype != (want_bool ? GRACE_BOOL : GRACE_FLOAT32) || x->storage->device != GRACE_CPU || x->pending) {
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: an outside input is not a computed CPU tensor of the expected dtype");
        break;
      }
      int over_row = s->cls == RX_ROW || s->reduce;
      int tn = over_row ? D : red->ndim;
      const int64_t *ts = over_row ? dom->sizes : red->sizes;
      if (s->reduce ? !same_sizes(x->ndim, x->sizes, D, dom->sizes) : !bcast_to(x->ndim, x->sizes, tn, ts)) {
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: an outside input does not broadcast to the member's shape");
        break;
      }
      fx_ext *e = &exts[next];
      e->value = v;
      e->is_bool = want_bool;
      e->ptr = vm_ptr(x);
      int64_t bst[GRACE_MAX_DIMS];
      vm_broadcast_strides(x, tn, ts, bst);
      fx_coalesce(e, tn, ts, bst);
      /* eager reads a reduction's outside input in place only when its rows are contiguous */
      if (s->reduce) s->chunked = x->strides[D - 1] != 1 && L > RX_CHUNK;
      s->kind[a] = RX_EXT;
      s->ref[a] = next++;
    }
  }
  const ir_type *ot = &ir->vals[out_value].type;
  if (st == GRACE_OK && (ot->dtype != GRACE_FLOAT32 || steps[ninst - 1].is_bool))
    st = vm_err(vm, GRACE_EUNSUPPORTED, "fused: the output must be float32");
  grace_tensor *o = NULL;
  rx_job job = {.steps = steps, .nstep = ninst, .exts = exts, .L = L};
  size_t abytes = 0, bbytes = 0;
  if (st == GRACE_OK) {
    job.narena = vm->threads > 1 ? vm->threads : 1;
    job.arena_bytes = (size_t)(ninst + 3) * (size_t)L * 4;
    abytes = job.arena_bytes * (size_t)job.narena;
    bbytes = sizeof(atomic_int) * (size_t)job.narena;
    /* rows of the input's length: data-sized (the product checked there, so arena_bytes did not overflow) */
    job.arenas = vm_alloc_data(vm, "fused", (size_t)(ninst + 3) * (size_t)job.narena, (size_t)L * 4);
    job.busy = job.arenas ? vm_alloc(vm, bbytes) : NULL;
    if (!job.arenas) st = vm->status;
    else if (!job.busy) st = vm_err(vm, GRACE_ENOMEM, "fused: out of host memory");
    else if (!(o = vm_tensor_new(vm, "fused", GRACE_FLOAT32, GRACE_CPU, ot->ndim, ot->sizes))) st = vm->status;
  }
  if (st == GRACE_OK && R > 0) {
    for (int i = 0; i < job.narena; i++) atomic_init(&job.busy[i], 0);
    atomic_init(&job.err, 0);
    job.out = (float *)vm_ptr(o);
    int64_t grain = RX_GRAIN / (L * ninst) > 0 ? RX_GRAIN / (L * ninst) : 1;
    vm_parallel_for(vm, R, grain, rx_rows, &job);
    if (atomic_load(&job.err)) st = vm_err(vm, GRACE_EINTERNAL, "fused: more parallel chunks than buffer arenas");
  }
  vm_free(vm, job.arenas, abytes);
  vm_free(vm, job.busy, bbytes);
  vm_free(vm, steps, sbytes);
  vm_free(vm, exts, ebytes);
  vm_free(vm, pos, mbytes);
  if (st != GRACE_OK) { grace_tensor_release(o); return st; }
  *out = o;
  return GRACE_OK;
}
