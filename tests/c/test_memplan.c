/* test_memplan.c: the static memory planner on hand-written IR texts. Every plan goes through a checker that
 * recomputes lifetimes here, independently of the planner (walking view chains value by value), and fails a
 * plan where two values live at the same step share bytes (an in-place pair excepted), a slot is not 256-byte
 * aligned or runs past the arena, or the arena is below the peak. Expected offsets and sizes are worked out
 * by hand in the comments; a slot of f32[64] is 256 bytes. */
#include <mimalloc.h>
#include <stdlib.h>
#include "grace.h"
#include "ir/ir.h"
#include "ir/ir_memplan.h"
#include "tap.h"

static grace_vm *vm;

/* The host allocator counts live blocks, so the test can tell that the planner frees all it allocates. */
static long live_blocks;
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud; (void)osize;
  if (nsize == 0) { if (ptr) { live_blocks--; mi_free(ptr); } return NULL; }
  void *p = mi_realloc_aligned(ptr, nsize, align);
  if (p && !ptr) live_blocks++;
  return p;
}

/* ---- the independent model: storage owner, whether a value needs the arena, its lifetime ---- */

static int op_is_view(int op) { return op < GRACE_NOPS && grace_op_kind((grace_op)op) == GRACE_KIND_VIEW; }

static int32_t owner(const grace_ir *ir, int32_t v) {
  while (op_is_view(ir->insts[ir->vals[v].inst].op)) v = ir->args[ir->insts[ir->vals[v].inst].first_arg];
  return v;
}

static int64_t raw_bytes(const grace_ir *ir, int32_t v) {
  int64_t n = (int64_t)grace_dtype_size(ir->vals[v].type.dtype);
  for (int d = 0; d < ir->vals[v].type.ndim; d++) n *= ir->vals[v].type.sizes[d];
  return n;
}

/* Whether v must be in the arena: a non-view op result, not returned, not the storage of a returned view. */
static int needs_arena(const grace_ir *ir, int32_t v) {
  int op = ir->insts[ir->vals[v].inst].op;
  if (op >= GRACE_NOPS || op_is_view(op) || raw_bytes(ir, v) == 0) return 0;
  for (int i = 0; i < ir->nout; i++)
    if (owner(ir, ir->outputs[i]) == v) return 0;
  return 1;
}

/* Lifetime of v, [lo, hi]: its definition to the last instruction reading it or a view of it; a write
 * keeps it to step ninst. Quadratic and plain on purpose: it is the reference. */
static void lifetime(const grace_ir *ir, int32_t v, int *lo, int *hi) {
  *lo = *hi = ir->vals[v].inst;
  for (int k = 0; k < ir->ninst; k++)
    for (int j = 0; j < ir->insts[k].nin; j++) {
      int32_t a = ir->args[ir->insts[k].first_arg + j];
      if (a >= 0 && owner(ir, a) == v && k > *hi) *hi = k;
    }
  for (int i = 0; i < ir->nwrite; i++)
    if (owner(ir, ir->writes[i].value) == v) *hi = ir->ninst;
}

/* Bytes live at step k: slots of arena values whose lifetime covers k; a value taking its input's slot in
 * place at k shares it, so that pair counts once. */
static int64_t live_at(const grace_ir *ir, const ir_memplan *p, int k) {
  int64_t sum = 0;
  for (int32_t v = 0; v < ir->nval; v++) {
    int lo, hi;
    if (!needs_arena(ir, v)) continue;
    lifetime(ir, v, &lo, &hi);
    if (lo > k || hi < k) continue;
    if (p->reuse[v] >= 0 && lo == k) continue;   /* its bytes are its input's, counted already */
    sum += (raw_bytes(ir, v) + 255) / 256 * 256;
  }
  return sum;
}

/* Checks a plan against the model; returns 1 when legal. */
static int check_plan(const grace_ir *ir, const ir_memplan *p, const char *what) {
  int bad = 0, nplanned = 0;
  for (int32_t v = 0; v < ir->nval; v++) {
    int need = needs_arena(ir, v);
    nplanned += need;
    if (need != (p->offset[v] >= 0)) { printf("# %s: %%%d: in the arena %d, expected %d\n", what, v, p->offset[v] >= 0, need); bad++; continue; }
    if (!need) continue;
    int lo, hi;
    lifetime(ir, v, &lo, &hi);
    if (p->start[v] != lo || p->end[v] != hi) { printf("# %s: %%%d lives [%d,%d], expected [%d,%d]\n", what, v, p->start[v], p->end[v], lo, hi); bad++; }
    if (p->offset[v] % 256) { printf("# %s: %%%d at %lld, not 256-byte aligned\n", what, v, (long long)p->offset[v]); bad++; }
    if (p->bytes[v] < raw_bytes(ir, v) || p->offset[v] + p->bytes[v] > p->arena_bytes) {
      printf("# %s: %%%d slot [%lld,+%lld) does not hold it in the arena of %lld\n", what, v, (long long)p->offset[v],
             (long long)p->bytes[v], (long long)p->arena_bytes);
      bad++;
    }
    for (int32_t u = 0; u < v; u++) {
      int ulo, uhi;
      if (!needs_arena(ir, u)) continue;
      lifetime(ir, u, &ulo, &uhi);
      if (uhi < lo || hi < ulo) continue;                                   /* never live together */
      if (p->offset[u] + p->bytes[u] <= p->offset[v] || p->offset[v] + p->bytes[v] <= p->offset[u]) continue;
      /* the one allowed sharing: v written over u, elementwise, at the step where u dies */
      if (p->reuse[v] == u && uhi == lo && p->offset[u] == p->offset[v] && raw_bytes(ir, u) == raw_bytes(ir, v)) continue;
      printf("# %s: %%%d [%d,%d] and %%%d [%d,%d] share bytes\n", what, u, ulo, uhi, v, lo, hi);
      bad++;
    }
  }
  int64_t peak = 0;
  for (int k = 0; k <= ir->ninst; k++) {
    int64_t l = live_at(ir, p, k);
    if (l > peak) peak = l;
  }
  if (peak != p->peak_live_bytes) { printf("# %s: peak %lld, expected %lld\n", what, (long long)p->peak_live_bytes, (long long)peak); bad++; }
  if (p->arena_bytes < p->peak_live_bytes) { printf("# %s: arena below the peak\n", what); bad++; }
  if (p->nplanned != nplanned) { printf("# %s: %d planned, expected %d\n", what, p->nplanned, nplanned); bad++; }
  return ok(!bad, "%s: the plan is legal (aligned, disjoint while live, peak %lld <= arena %lld)", what,
            (long long)p->peak_live_bytes, (long long)p->arena_bytes);
}

/* Parses and plans src; the caller frees both. 0 on failure (reported). */
static int plan(const char *src, grace_ir **ir, ir_memplan *p, const char *what) {
  *ir = NULL;
  memset(p, 0, sizeof *p);
  if (!ok(grace_ir_parse(vm, src, ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return 0; }
  if (!ok(ir_memplan_build(*ir, p) == GRACE_OK, "%s: plans", what)) { printf("# %s\n", grace_last_error(vm)); return 0; }
  check_plan(*ir, p, what);
  return 1;
}

static void done(grace_ir *ir, ir_memplan *p) {
  if (ir) ir_memplan_free(vm, p);
  grace_ir_free(ir);
}

/* Offsets of values first..first+n-1 as "a,b,c" (-1 outside), for one compact assertion. */
static const char *offsets(const ir_memplan *p, int first, int n, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < n && k < len; i++) k += (size_t)snprintf(buf + k, len - k, i ? ",%lld" : "%lld", (long long)p->offset[first + i]);
  return buf;
}

static void test_chain(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* a -> b -> c -> d, none elementwise (cumsum), each dying at the next: %1 [1,2], %2 [2,3], %3 [3,4]; %4 is
   * returned. %1 at 0, %2 overlaps it at step 2: on top at 256; %3 overlaps only %2, so the gap [0,256) where
   * %1 was fits it exactly: 0. Two slots: arena 512 = peak (steps 2 and 3). */
  if (plan("func @chain {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
           "  %2 = cumsum %1 {dims=[0]} : f32[64]\n"
           "  %3 = cumsum %2 {dims=[0]} : f32[64]\n"
           "  %4 = cumsum %3 {dims=[0]} : f32[64]\n"
           "  return %4\n}\n", &ir, &p, "chain")) {
    is_int(p.arena_bytes, 512, "chain: two slots, no reuse possible");
    is_int(p.peak_live_bytes, 512, "chain: peak is an input and its result");
    is_str(offsets(&p, 0, 5, b, sizeof b), "-1,0,256,0,-1", "chain: slots alternate");
    is_int(p.nreused, 0, "chain: cumsum does not work in place");
  }
  done(ir, &p);
  /* The same chain elementwise (exp): %2 takes %1's slot as %1 dies at 2, %3 takes %2's: one slot [1,4]. */
  if (plan("func @chain_inplace {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = exp %0 : f32[64]\n"
           "  %2 = exp %1 : f32[64]\n"
           "  %3 = exp %2 : f32[64]\n"
           "  %4 = exp %3 : f32[64]\n"
           "  return %4\n}\n", &ir, &p, "chain in place")) {
    is_int(p.arena_bytes, 256, "chain in place: one slot");
    is_int(p.peak_live_bytes, 256, "chain in place: peak one slot");
    is_str(offsets(&p, 0, 5, b, sizeof b), "-1,0,0,0,-1", "chain in place: all in slot 0");
    is_int(p.nreused, 2, "chain in place: %%2 and %%3 reuse (the input %%0 and output %%4 are not the arena's)");
    ok(p.reuse[2] == 1 && p.reuse[3] == 2 && p.reuse[1] == -1, "chain in place: who reuses whom");
  }
  done(ir, &p);
}

static void test_diamond(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* %1 [1,3] feeds %2 [2,4] and %3 [3,4]; add %2, %3 at 4 takes %2's slot (the first dying input):
   * chain {%2,%4} [2,5]. Sorted (all 256, by start): %1 -> 0, chain -> 256 (overlaps %1), %3 overlaps both
   * -> 512. Peak at step 3: %1, %2, %3 = 768 = arena. */
  if (plan("func @diamond {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
           "  %2 = softmax %1 {dims=[0]} : f32[64]\n"
           "  %3 = cumsum %1 {dims=[0]} : f32[64]\n"
           "  %4 = add %2, %3 : f32[64]\n"
           "  %5 = sum %4 : f32[]\n"
           "  return %5\n}\n", &ir, &p, "diamond")) {
    is_int(p.arena_bytes, 768, "diamond: three slots");
    is_int(p.peak_live_bytes, 768, "diamond: peak three live at step 3");
    is_str(offsets(&p, 0, 6, b, sizeof b), "-1,0,256,512,256,-1", "diamond: offsets");
    is_int(p.reuse[4], 2, "diamond: the add writes over %%2");
    is_int(p.nreused, 1, "diamond: one reuse");
    ok(p.start[1] == 1 && p.end[1] == 3, "diamond: %%1 lives to its second use");
  }
  done(ir, &p);
}

static void test_late_use(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* %1 is used only by the last instruction: [1,5], so the softmax chain %2 [2,3], %3 [3,4], %4 [4,5] packs
   * around it: %1 -> 0, %2 -> 256, %3 -> 512, %4 overlaps %1 and %3 but not %2: the gap at 256. Arena 768
   * (512 if %1 died early), peak at step 3: %1, %2, %3. */
  if (plan("func @late {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
           "  %2 = softmax %0 {dims=[0]} : f32[64]\n"
           "  %3 = softmax %2 {dims=[0]} : f32[64]\n"
           "  %4 = softmax %3 {dims=[0]} : f32[64]\n"
           "  %5 = add %1, %4 : f32[64]\n"
           "  return %5\n}\n", &ir, &p, "late use")) {
    is_int(p.end[1], 5, "late use: %%1 lives to instruction 5");
    is_int(p.arena_bytes, 768, "late use: arena");
    is_int(p.peak_live_bytes, 768, "late use: peak");
    is_str(offsets(&p, 0, 6, b, sizeof b), "-1,0,256,512,256,-1", "late use: %%4 fills %%2's gap");
  }
  done(ir, &p);
  /* An elementwise op over an input that is still needed later must not write over it: exp %1 at 2 while
   * add reads %1 at 3. The add then takes %1's slot (both inputs die there; %1 comes first): chain {%1,%3}
   * [1,4] -> 0, %2 [2,3] -> 256. Arena 512. */
  if (plan("func @still_live {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
           "  %2 = exp %1 : f32[64]\n"
           "  %3 = add %1, %2 : f32[64]\n"
           "  %4 = sum %3 : f32[]\n"
           "  return %4\n}\n", &ir, &p, "still live")) {
    ok(p.reuse[2] == -1 && p.reuse[3] == 1, "still live: only the add, where %%1 dies, writes over it");
    is_str(offsets(&p, 0, 5, b, sizeof b), "-1,0,256,0,-1", "still live: offsets");
    is_int(p.arena_bytes, 512, "still live: arena");
  }
  done(ir, &p);
}

static void test_views(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* %1 is viewed by %2 (transpose) and %3 (narrow of that): %3's use at 6 keeps %1 to [1,6]. The add at 6
   * reads %3 (a view: never reused, and %1 has views) and %5 (dies at 6, 32 f32 like the result): it takes
   * %5's slot. %1 -> 0, chain {%5,%6} [5,7] overlaps it -> 256. Arena 512 = peak (steps 5, 6). Views and the
   * view of the input (%4) take no arena. */
  if (plan("func @views {\n"
           "  %0 = input #0 : f32[8,8]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[8,8]\n"
           "  %2 = transpose %1 {dims=[0,1]} : f32[8,8]\n"
           "  %3 = narrow %2 {dims=[0], i1=4} : f32[4,8]\n"
           "  %4 = narrow %0 {dims=[0], i1=4} : f32[4,8]\n"
           "  %5 = softmax %4 {dims=[1]} : f32[4,8]\n"
           "  %6 = add %3, %5 : f32[4,8]\n"
           "  %7 = sum %6 : f32[]\n"
           "  return %7\n}\n", &ir, &p, "views")) {
    is_int(p.end[1], 6, "views: the base lives to the last use of its view's view");
    ok(p.base[3] == 1 && p.base[2] == 1 && p.base[4] == 0, "views: chains resolve to their storage");
    is_str(offsets(&p, 0, 8, b, sizeof b), "-1,0,-1,-1,-1,256,256,-1", "views: offsets");
    is_int(p.reuse[6], 5, "views: the add reuses the softmax's slot, not the viewed base");
    is_int(p.arena_bytes, 512, "views: arena");
  }
  done(ir, &p);
  /* A base read through a view and directly at its last use: add %1, transpose(%1) must not write over %1
   * (element [i,j] is still to be read as [j,i]), so the add gets its own slot: %1 [1,3] -> 0, %3 [3,4] ->
   * 256. Arena 512. */
  if (plan("func @self_view {\n"
           "  %0 = input #0 : f32[8,8]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[8,8]\n"
           "  %2 = transpose %1 {dims=[0,1]} : f32[8,8]\n"
           "  %3 = add %1, %2 : f32[8,8]\n"
           "  %4 = sum %3 : f32[]\n"
           "  return %4\n}\n", &ir, &p, "self view")) {
    is_int(p.reuse[3], -1, "self view: no in-place write over a base read through a view");
    is_int(p.arena_bytes, 512, "self view: two slots");
  }
  done(ir, &p);
}

static void test_outputs(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* %2 is returned and views %1: both outside. %3 is returned: outside, so %4 (exp of it) cannot take its
   * slot. %5 returned. Only %4 is planned: [4,5] at 0, arena 256. */
  if (plan("func @outs {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
           "  %2 = reshape %1 {shape=[8,8]} : f32[8,8]\n"
           "  %3 = softmax %0 {dims=[0]} : f32[64]\n"
           "  %4 = exp %3 : f32[64]\n"
           "  %5 = sum %4 : f32[]\n"
           "  return %2, %3, %5\n}\n", &ir, &p, "outputs")) {
    is_str(offsets(&p, 0, 6, b, sizeof b), "-1,-1,-1,-1,0,-1", "outputs: only %%4 is in the arena");
    is_int(p.noutside, 3, "outputs: %%1 (a returned view's base), %%3, %%5 are allocated per call");
    is_int(p.nplanned, 1, "outputs: one planned");
    is_int(p.nreused, 0, "outputs: an output's bytes are never reused");
    is_int(p.arena_bytes, 256, "outputs: arena");
  }
  done(ir, &p);
  /* A tensor with no elements needs no bytes: it stays out of the arena (any address will do). */
  if (plan("func @empty_tensor {\n"
           "  %0 = input #0 : f32[0,4]\n"
           "  %1 = exp %0 : f32[0,4]\n"
           "  %2 = sum %1 : f32[]\n"
           "  return %2\n}\n", &ir, &p, "empty tensor")) {
    ok(p.offset[1] == -1 && p.nplanned == 0 && p.arena_bytes == 0, "empty tensor: nothing planned");
  }
  done(ir, &p);
}

static void test_writes(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* %2 is written back to %0 at the end: [2,6] (step 6 = ninst, the write-back). %3 [3,4], %4 [4,5].
   * %2 -> 0, %3 -> 256, %4 overlaps both -> 512: arena 768 (512 without the write), peak at step 4. The
   * write-back step itself has only %2 live. */
  if (plan("func @writes {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = input #1 : f32[64]\n"
           "  %2 = mul %0, %1 : f32[64]\n"
           "  %3 = softmax %2 {dims=[0]} : f32[64]\n"
           "  %4 = cumsum %3 {dims=[0]} : f32[64]\n"
           "  %5 = sum %4 : f32[]\n"
           "  write %0, %2\n"
           "  return %5\n}\n", &ir, &p, "writes")) {
    is_int(p.end[2], 6, "writes: the written value lives through the write-back step");
    is_str(offsets(&p, 0, 6, b, sizeof b), "-1,-1,0,256,512,-1", "writes: offsets");
    is_int(p.arena_bytes, 768, "writes: arena");
    is_int(p.peak_live_bytes, 768, "writes: peak");
    is_int(live_at(ir, &p, 6), 256, "writes: at the write-back step one slot is live");
  }
  done(ir, &p);
  /* A functional in-place op (fill_) gives a new value; written back through a view of it, it still lives
   * to the end, and the exp it feeds does not write over it: %1 [1,4] -> 0, %3 [3,4] -> 256. */
  if (plan("func @write_view {\n"
           "  %0 = input #0 : f32[64]\n"
           "  %1 = fill_ %0 {a=1} : f32[64]\n"
           "  %2 = reshape %1 {shape=[64]} : f32[64]\n"
           "  %3 = exp %1 : f32[64]\n"
           "  %4 = sum %3 : f32[]\n"
           "  write %0, %2\n"
           "  return %4\n}\n", &ir, &p, "write through a view")) {
    is_int(p.end[1], 5, "write through a view: the base lives to the write-back");
    is_int(p.reuse[3], -1, "write through a view: no reuse of a value still to be written");
    is_int(p.arena_bytes, 512, "write through a view: arena");
  }
  done(ir, &p);
}

static void test_reduction(void) {
  grace_ir *ir;
  ir_memplan p;
  char b[128];
  /* Softmax by hand over f32[64,63] (16128 bytes, 63 slots of 256). %1 = exp [1,3]; %2 = row sums f32[64,1]
   * (256) [2,3]; %3 = mul %2, %1 at 3: %2 dies there but is 64 elements, not 4032, so it is passed over and
   * %1 (same size) is taken: chain {%1,%3} [1,4]. %4 = column sums f32[63]: 252 bytes, a 256 slot, [4,5].
   * Chain -> 0 (largest), %2 -> 16128 (overlaps chain), %4 overlaps only the chain -> 16128. Arena 16384 =
   * peak (16128 + 256 at steps 2..4). */
  if (plan("func @reduce {\n"
           "  %0 = input #0 : f32[64,63]\n"
           "  %1 = exp %0 : f32[64,63]\n"
           "  %2 = sum %1 {dims=[1], keepdim=1} : f32[64,1]\n"
           "  %3 = mul %2, %1 : f32[64,63]\n"
           "  %4 = sum %3 {dims=[0]} : f32[63]\n"
           "  %5 = neg %4 : f32[63]\n"
           "  return %5\n}\n", &ir, &p, "reduction")) {
    is_str(offsets(&p, 0, 6, b, sizeof b), "-1,0,16128,0,16128,-1", "reduction: offsets");
    is_int(p.reuse[3], 1, "reduction: the broadcast mul reuses the full-size input, not the reduced one");
    is_int(p.bytes[4], 256, "reduction: 252 bytes round up to a 256-byte slot");
    is_int(p.arena_bytes, 16384, "reduction: arena");
    is_int(p.peak_live_bytes, 16384, "reduction: peak");
  }
  done(ir, &p);
  /* Slots hide sizes: a reduced f32[4,1] (16 bytes) and f32[4,8] (128) both take 256, but writing the
   * broadcast result over the 4 sums would overwrite sums still to be read, so %2 does not reuse %1 (slots
   * %1 [1,2] -> 0, %2 [2,4] -> 256). Nor does the cast to f16 (%3 [3,4]) write over %2 though %2 dies there
   * with as many elements: 2-byte results over 4-byte inputs race on a GPU. %3 [3,4] overlaps only %2, so
   * it takes %1's old place at 0. Arena 512. */
  if (plan("func @bcast {\n"
           "  %0 = input #0 : f32[4,8]\n"
           "  %1 = sum %0 {dims=[1], keepdim=1} : f32[4,1]\n"
           "  %2 = sub %1, %0 : f32[4,8]\n"
           "  %3 = cast %2 {dtype=f16} : f16[4,8]\n"
           "  %4 = sum %3 : f16[]\n"
           "  return %4\n}\n", &ir, &p, "broadcast")) {
    ok(p.reuse[2] == -1 && p.reuse[3] == -1 && p.nreused == 0, "broadcast: no reuse across element counts or sizes");
    is_str(offsets(&p, 0, 5, b, sizeof b), "-1,0,256,0,-1", "broadcast: offsets");
    is_int(p.arena_bytes, 512, "broadcast: arena");
  }
  done(ir, &p);
}

static void test_transformer(void) {
  grace_ir *ir;
  ir_memplan p;
  /* A pre-norm block over 16 tokens of width 64: attention with one head (q, k, v as views of one qkv
   * matmul), then a 4x MLP with gelu. */
  static const char *src =
      "func @block {\n"
      "  %0 = input #0 : f32[16,64]\n"
      "  %1 = const #0 : f32[64]\n"
      "  %2 = const #1 : f32[64]\n"
      "  %3 = const #2 : f32[64,192]\n"
      "  %4 = const #3 : f32[64,64]\n"
      "  %5 = const #4 : f32[64]\n"
      "  %6 = const #5 : f32[64]\n"
      "  %7 = const #6 : f32[64,256]\n"
      "  %8 = const #7 : f32[256,64]\n"
      "  %9 = layer_norm %0, %1, %2 {a=1e-05} : f32[16,64]\n"
      "  %10 = matmul %9, %3 : f32[16,192]\n"
      "  %11 = narrow %10 {dims=[1], i1=64} : f32[16,64]\n"
      "  %12 = narrow %10 {dims=[1], i0=64, i1=64} : f32[16,64]\n"
      "  %13 = narrow %10 {dims=[1], i0=128, i1=64} : f32[16,64]\n"
      "  %14 = transpose %12 {dims=[0,1]} : f32[64,16]\n"
      "  %15 = matmul %11, %14 : f32[16,16]\n"
      "  %16 = literal 0.125 : f32[]\n"
      "  %17 = mul %15, %16 : f32[16,16]\n"
      "  %18 = softmax %17 {dims=[1]} : f32[16,16]\n"
      "  %19 = matmul %18, %13 : f32[16,64]\n"
      "  %20 = matmul %19, %4 : f32[16,64]\n"
      "  %21 = add %0, %20 : f32[16,64]\n"
      "  %22 = layer_norm %21, %5, %6 {a=1e-05} : f32[16,64]\n"
      "  %23 = matmul %22, %7 : f32[16,256]\n"
      "  %24 = gelu %23 : f32[16,256]\n"
      "  %25 = matmul %24, %8 : f32[16,64]\n"
      "  %26 = add %21, %25 : f32[16,64]\n"
      "  return %26\n}\n";
  if (!plan(src, &ir, &p, "transformer block")) { done(ir, &p); return; }
  /* the live sets per step (an in-place pair counted once, as it shares one slot) */
  int64_t first = 0, second = 0;
  for (int k = 0; k <= ir->ninst; k++) {
    int64_t l = live_at(ir, &p, k);
    if (l > first) { second = first; first = l; }
    else if (l > second) second = l;
  }
  ok(p.arena_bytes <= first + second, "transformer block: arena %lld <= largest live set %lld + second %lld",
     (long long)p.arena_bytes, (long long)first, (long long)second);
  /* qkv (%10, 12288 bytes) is read through the v view by the matmul at 19: it lives [10,19] */
  is_int(p.end[10], 19, "transformer block: qkv lives to the last use of its v view");
  /* in place: mul over the scores (%17 over %15), the residual add over the projection (%21 over %20; %0 is
   * an input), gelu over the up projection (%24 over %23) */
  ok(p.reuse[17] == 15 && p.reuse[21] == 20 && p.reuse[24] == 23, "transformer block: the three in-place ops");
  is_int(p.nreused, 3, "transformer block: three values reuse");
  /* the peak: at step 23 the residual %21 (4096), ln2 %22 (4096) and the up projection %23 (16384) = 24576;
   * at 25 %21, %24 (in %23's slot) and %25 = 24576 again; step 19 holds qkv 12288 + probabilities 1024 +
   * attention 4096 = 17408, less */
  is_int(p.peak_live_bytes, 24576, "transformer block: peak at the down projection");
  ok(p.arena_bytes >= p.peak_live_bytes && p.arena_bytes <= p.peak_live_bytes + p.peak_live_bytes / 4,
     "transformer block: arena within 25%% of the lower bound");
  char rep[512];
  ir_memplan_report(ir, &p, rep, sizeof rep);
  ok(strstr(rep, "arena ") && strstr(rep, "peak live ") && strstr(rep, "3 reused"), "transformer block: the report names the numbers");
  printf("# transformer block: arena %lld bytes, peak live %lld, %d planned, %d reused; live sets %lld + %lld\n",
         (long long)p.arena_bytes, (long long)p.peak_live_bytes, p.nplanned, p.nreused, (long long)first, (long long)second);
  done(ir, &p);
}

static void test_public_api(void) {
  grace_ir *ir = NULL;
  /* grace_ir_memplan on the diamond: the same offsets as the plan above, and a report */
  if (!ok(grace_ir_parse(vm, "func @d {\n  %0 = input #0 : f32[64]\n  %1 = cumsum %0 {dims=[0]} : f32[64]\n"
                             "  %2 = softmax %1 {dims=[0]} : f32[64]\n  %3 = cumsum %1 {dims=[0]} : f32[64]\n"
                             "  %4 = add %2, %3 : f32[64]\n  %5 = sum %4 : f32[]\n  return %5\n}\n", &ir) == GRACE_OK,
          "api: parses"))
    return;
  int64_t off[6], arena = -1, peak = -1;
  char rep[512];
  ok(grace_ir_memplan(ir, off, &arena, &peak, rep, sizeof rep) == GRACE_OK, "api: plans");
  ok(off[0] == -1 && off[1] == 0 && off[2] == 256 && off[3] == 512 && off[4] == 256 && off[5] == -1, "api: offsets");
  ok(arena == 768 && peak == 768, "api: arena %lld, peak %lld", (long long)arena, (long long)peak);
  ok(strstr(rep, "arena 768 bytes") && strstr(rep, "peak live 768 bytes") && strstr(rep, "4 values planned") &&
     strstr(rep, "1 reused"), "api: report");
  for (char *line = strtok(rep, "\n"); line; line = strtok(NULL, "\n")) printf("# %s\n", line);
  ok(grace_ir_memplan(ir, NULL, NULL, NULL, NULL, 0) == GRACE_OK, "api: every result is optional");
  /* a corrupt argument (a use before definition) is an error, not a crash */
  int32_t saved = ir->args[ir->insts[3].first_arg];
  ir->args[ir->insts[3].first_arg] = 5;
  ok(grace_ir_memplan(ir, off, &arena, &peak, rep, sizeof rep) == GRACE_EARG && strstr(grace_last_error(vm), "memplan"),
     "api: a use before the definition is GRACE_EARG: %s", grace_last_error(vm));
  ir->args[ir->insts[3].first_arg] = saved;
  ok(grace_ir_memplan(NULL, off, &arena, &peak, rep, sizeof rep) == GRACE_EARG, "api: no IR is GRACE_EARG");
  grace_ir_free(ir);
  /* an empty function plans to nothing */
  if (ok(grace_ir_parse(vm, "func @e {\n  return\n}\n", &ir) == GRACE_OK, "api: empty parses")) {
    ok(grace_ir_memplan(ir, NULL, &arena, &peak, NULL, 0) == GRACE_OK && arena == 0 && peak == 0, "api: empty plan");
    grace_ir_free(ir);
  }
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu", .alloc = counting_alloc}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_chain();
  test_diamond();
  test_late_use();
  test_views();
  test_outputs();
  test_writes();
  test_reduction();
  test_transformer();
  test_public_api();
  grace_vm_free(vm);
  is_int(live_blocks, 0, "every host allocation was freed");
  return tap_done();
}
