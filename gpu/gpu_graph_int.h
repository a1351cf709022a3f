/* gpu_graph_int.h: the state behind gpu_graph.h, shared by the files that implement it: gpu_graph.c (capture,
 * replay, the measured choice) and gpu_graph_info.c (grace_ir_graph_info: what is reported). Not for other callers. */
#ifndef GRACE_GPU_GRAPH_INT_H
#define GRACE_GPU_GRAPH_INT_H
#include "cuda/cuda_graph.h"
#include "cuda/cuda_graph_update.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"

enum {
  GG_SCALARS = 512,       /* host numbers per graph (an optimizer step reads several a parameter): the table's
                             first words, number k at word GG_SCALARS - 1 - k */
  GG_SLOTS = 4032,        /* pointer and scalar words of indirect kernels */
  GG_WORDS = GG_SCALARS + GG_SLOTS,
  GG_RING = 4,            /* staging buffers: the host writes one while earlier copies may be pending */
  GG_ROUNDS = 9,          /* timed calls per candidate (a median of 3 was not steady enough between runs to choose by:
                             bench/RESULTS.md; of 9, up to 4 outliers leave the median among the steady calls) */
  GG_RECHECK_AFTER = 100, /* calls of a kept decision (this process) before it is re-checked once */
  GG_RECHECK_ROUNDS = 5,  /* timed calls each of the kept candidate and the runner-up in a re-check */
  GG_MARGIN_PCT = 3,      /* medians within this many percent of the best are a tie: the simpler candidate is kept */
  GG_CHECKS = 32,         /* deferred index checks per graph */
  GG_MAX_LIMIT = 64
};

typedef enum { SRC_INPUT, SRC_OUTPUT, SRC_SEED, SRC_RNG } gg_src;
typedef enum { SC_FIXED, SC_INPUT, SC_SCALAR, SC_CONST } gg_sc_kind;

typedef struct gg_dyn { int32_t word, kind, index; int64_t delta; } gg_dyn;   /* a table word rewritten per replay */
typedef struct gg_scalar { gg_sc_kind kind; int32_t inst; grace_dtype dt; uint64_t bits; } gg_scalar;
typedef struct gg_in {
  int host;               /* a host number: read into the table */
  int copy;               /* read directly by some node: copied into the placeholder before each replay */
  int via;                /* this replay, a library node reads it through the placeholder (gg_rng) */
  CUdeviceptr ph;         /* the placeholder's first element */
  size_t bytes;
} gg_in;
/* an output storage; per call all of them are one fresh allocation, this one at offset `at` */
typedef struct gg_grp { CUdeviceptr base; size_t bytes, at; int direct; } gg_grp;
typedef struct gg_out {
  int grp;
  grace_dtype dt;
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS], offset;
} gg_out;
/* a flag read back after each replay, bad when below n: a deferred index check's first bad position, or (loop) a
 * while_loop's iteration count, -1 past its max_iters (size). idx (held during the capture only) and its version let
 * later ops of the capture that check the same index against the same bound skip their own check. reset: the check
 * runs inside a conditional body, which may not run (and clear the flag) on a replay: it is cleared before each
 * replay instead */
typedef struct gg_check {
  CUdeviceptr flag;
  int64_t n, size;
  int dim, reset, loop;
  char op[24];
  grace_tensor *idx;
  uint64_t ver;
} gg_check;
/* an in-place write of the program: into input `input` or capture `cst` (the other -1), advancing its version by
 * `bumps` per replay, as the eager ops would */
typedef struct gg_write { int input, cst, bumps; uint64_t ver; } gg_write;
/* graph+node updates: an input or output library kernels read or write directly, re-pointed per replay. A call
 * whose address is less aligned than the capture's (the library chose its kernels for that alignment, up to 256
 * bytes) keeps the captured address and copies instead, for that call. */
typedef struct gg_rng { gg_src kind; int index; CUdeviceptr base; uint64_t align; size_t bytes; } gg_rng;
typedef struct gg_sig {
  int present, device, dtype, ndim, aligned;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
} gg_sig;

typedef struct gg_graph {
  const grace_ir *ir;     /* the program captured (nested one-op programs run inside it) */
  grace_launch_strategy strat;
  int pred;               /* its cond regions predicated (gpu_pred.c), else conditional nodes (gpu_cond.c) */
  int nin, nout, ngrp, ndyn, nsc, lo, hi, nkernels, nslots;
  gg_sig *sig;
  gg_in *in;
  gg_out *out;
  gg_grp *grp;
  gg_dyn *dyn;
  gg_scalar sc[GG_SCALARS];
  CUgraph g;
  CUgraphExec x;
  cuda_capture *cap;
  grace_tensor *table;
  uint64_t *host[GG_RING];
  CUevent ev[GG_RING];
  int evused[GG_RING], ring;
  size_t copy_bytes, out_bytes;
  uint64_t used;
  double replay_us_sum, replay_us_min;   /* host time of replay() (the table, its copy, the launch) */
  long nreplay;
  uint64_t rng0, rng_total;   /* the VM's generator offset when capture began, and how far one call advances it */
  int ncheck;
  int ncond;              /* conditional nodes (gpu_cond.c), at any depth */
  gg_check chk[GG_CHECKS];
  gg_write *wr;
  int nwr;
  int64_t *chk_host;      /* page-locked, GG_RING rows of GG_CHECKS: the flags read back after a replay */
  CUevent chk_ev[GG_RING];   /* recorded after a row's copies */
  int chk_pend[GG_RING];     /* a row not yet looked at */
  struct gg_graph *pend_next;   /* on vm->graph_pending while a row is pending */
  int on_pending;
  cuda_node_updates *upd; /* graph+node updates: the library nodes re-pointed per replay */
  gg_rng *rng;
  int nrng;
} gg_graph;

/* The launch cache's entry for a program (cuda_graph_decision_load/store). */
/* What is measured: candidate k < GRACE_LAUNCH_NSTRATEGIES is strategy k with its regions as conditional nodes (the
 * eager strategy: as host branches), a later k the graph strategy k - GRACE_LAUNCH_NSTRATEGIES + 1 with its cond
 * regions predicated (a candidate a program without regions leaves out). */
enum { GG_NCAND = 2 * GRACE_LAUNCH_NSTRATEGIES - 1 };
static inline grace_launch_strategy gg_strat(int k) {
  return (grace_launch_strategy)(k < GRACE_LAUNCH_NSTRATEGIES ? k : k - GRACE_LAUNCH_NSTRATEGIES + 1);
}
static inline int gg_pred(int k) { return k >= GRACE_LAUNCH_NSTRATEGIES; }

/* The decision with what it was made from: per candidate its median (0: not measured) and the timed calls behind it,
 * and the re-checks made of it so far (by any process) and how many of them switched. A later process starts decided
 * from it and re-checks it once (gpu_graph_choice.c). */
enum { GG_DECISION_MAGIC = 0x47524c34 };   /* "GRL4" */
typedef struct gg_decision {
  int32_t magic, chosen;
  double us[GG_NCAND];
  int32_t n[GG_NCAND];
  int32_t rechecks, switches;
} gg_decision;

/* gpu_graph.h's shared decision of a program with symbolic sizes: what its specialisations decided (or the launch
 * cache held under the symbolic program's text), and where that came from. */
struct gpu_share {
  grace_ir *symbolic;
  int loaded;             /* the launch cache was read */
  int decided;
  gg_decision dc;
  const char *running;    /* the sizes of the specialisation running now */
  char by[64];            /* the sizes of the specialisation that made or last re-checked it, or "the launch cache" */
};

struct gpu_part {
  long calls, captures;
  int mode;               /* -1 auto, -2 off, else a forced grace_launch_strategy */
  int decided, limit;
  int chosen;             /* a candidate (GG_NCAND) */
  double best[GG_NCAND];  /* the median of the latest measurement's samples (or the cached figure) */
  int nstat[GG_NCAND];    /* timed calls behind best[k] (a cached figure: the earlier process's count) */
  /* the measurement under way (the first one, or a re-check): the candidates in it, the timed calls each takes,
   * and those taken so far */
  int want[GG_NCAND];
  int target;
  double samp[GG_NCAND][GG_ROUNDS];
  int samples[GG_NCAND];
  int checking;           /* decided, and re-checking the decision against the runner-up */
  int checked;            /* this process re-checked the decision (or found nothing to check it against) */
  long decided_at;        /* calls when the decision was made (0 for one read from the launch cache) */
  int rechecks, switches; /* re-checks of the decision (this process and earlier ones), and those that switched */
  long measure_calls;     /* calls spent measuring (timed or not: a capture, a new layout's eager run) */
  char why[GG_NCAND][160];
  int regions;            /* region instructions of the program (gpu_ir_lowerings) */
  char inel[160];
  char pred_fail[160];    /* why the first predicated capture failed ("" when none did) */
  gg_graph *gr[GG_MAX_LIMIT];
  int ngr;
  uint64_t tick;
  int from_cache;         /* the decision was read from the launch cache (measured by an earlier process) */
  gpu_share *share;       /* a specialisation's: the decision shared with its siblings (NULL: none) */
  int shares;             /* it publishes its decisions there (not when the shared one could not run here) */
  int inherited;          /* it started decided with the shared decision, made by `by` */
  char by[64];
  int nwarm;              /* inputs of the last layout run eagerly: a new layout runs so once before capture */
  gg_sig *warm;
};

/* gpu_graph_choice.c: the launch decision (its header says how it measures). */
extern const char *const gg_strategy_names[GRACE_LAUNCH_NSTRATEGIES];   /* as GRACE_GRAPHS and the report say them */
/* Candidate k's name ("graph+copies (regions predicated)"). */
const char *gg_cand_name(int k, char *buf, size_t n);
/* A new program's decision: read from the launch cache (measured by an earlier process), else the first measurement
 * begins (auto mode only; a forced mode is decided by the caller). */
void gg_choice_init(grace_ir *ir, gpu_part *p);
/* After a specialisation's first call: it starts decided with its siblings' shared decision where there is one and
 * it can run here; where it cannot, it measures (and says why under GRACE_LOG=launch). */
void gg_choice_inherit(grace_ir *ir, gpu_part *p);
/* Candidate k failed to capture: when it is an inherited decision, the measurement begins instead (1), else 0. */
int gg_choice_refused(grace_ir *ir, gpu_part *p, int k);
/* The candidate this call times (starting the re-check when it is due), or -1: the call runs p->chosen untimed. */
int gg_choice_next(grace_ir *ir, gpu_part *p);
/* After a measuring call of candidate k: us its time (negative: the call was not timed); decides once all are in. */
void gg_choice_after(grace_ir *ir, gpu_part *p, int k, double us);
/* gpu_graph.c: frees the graphs of every candidate but keep. */
void gg_drop_graphs(grace_vm *vm, gpu_part *p, int keep);

#endif
