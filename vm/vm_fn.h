/* vm_fn.h: internals of compiled functions (grace_fn, include/grace.h), shared by vm_fn.c (the cache of entries,
 * argument guards, tracing, replay and promotion of numbers to dynamic scalars) and vm_fn_explain.c (the text of
 * grace_fn_explain and the $GRACE_LOG reports). */
#ifndef GRACE_VM_FN_H
#define GRACE_VM_FN_H

#include "grace.h"

#define FN_MAXARGS GRACE_FN_MAXARGS
#define FN_MAXPATHS 16
/* The whole-program passes: the canonical ones keep results bit for bit as eager; attention (a fusion, whose
 * kernel is judged by tolerance) goes first, before anything could split the softmax it looks for. */
#define FN_CANON_PASSES "fold,simplify,cse,views,hoist,dce"
#define FN_COMPILE_PASSES "attention," FN_CANON_PASSES

/* What an entry requires of one argument. SCALAR: a number promoted to a dynamic scalar (only its subtype). */
typedef enum { FG_NIL, FG_BOOL, FG_INT, FG_FLOAT, FG_HOST, FG_TENSOR, FG_SCALAR } fn_gkind;

typedef struct fn_guard {
  fn_gkind kind;
  grace_dtype dt;
  grace_device dev;
  int ndim, contiguous;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
  int64_t i;
  double f;
  uint64_t host;                        /* FG_HOST: a kept handle */
  int scalar_int;                       /* FG_SCALAR: the number's subtype */
  int32_t sym[GRACE_MAX_DIMS];          /* FG_TENSOR: the program's symbol for each dim's size (0: guarded by value) */
} fn_guard;

/* An entry runs in one of three ways: ir (the whole function as one program; the host function does not run),
 * tree (a function with graph breaks: the host function runs and is replayed against these recorded paths), or
 * neither (eagerly; why says why). */
typedef struct fn_entry {
  grace_ir *ir;
  grace_ir *tree[FN_MAXPATHS];
  int ntree;
  struct vm_parts *parts;               /* tree: the partitions between breaks as programs (vm/vm_part.c) */
  struct fn_moves *moves;               /* ir: host tensors it moves to the device, placed ahead (vm/vm_place.c) */
  int nargs;
  fn_guard args[FN_MAXARGS];
  int input_arg[FN_MAXARGS], ninput;    /* IR tensor input k is argument input_arg[k] */
  int scalar_arg[FN_MAXARGS], nscalar;  /* IR scalar input k is argument scalar_arg[k] */
  int nret;
  int ret_output[FN_MAXARGS];           /* >= 0: IR output index; -1: constant ret_const[j];
                                           <= -2: argument -2 - k itself (the same object, as eager) */
  grace_arg ret_const[FN_MAXARGS];      /* HOST handles kept */
  int alias[FN_MAXARGS];                /* tensor argument i shares storage with argument alias[i] (-1: none) */
  struct fn_auto *autos;                /* tree: what each path returns, the merged program (vm/vm_auto.c) */
  uint64_t guard;                       /* the host's guard (0: none) */
  uint64_t guard2;                      /* a merged program's: the host's guard of the other branch's call (0: none) */
  int nguarded;                         /* values the host's guard checks */
  long hits;
  char why[1024];                       /* why it runs eagerly ("" when it does not) */
} fn_entry;

struct grace_fn {
  grace_vm *vm;
  grace_host host;
  void *ud;
  int cache_limit, dynamic;
  unsigned char allow_arg[FN_MAXARGS];  /* with allow_listed: only these may be promoted */
  int allow_listed;
  unsigned char dynamic_arg[FN_MAXARGS];
  int static_shapes;                    /* sizes never become symbolic */
  unsigned sym_dims[FN_MAXARGS];        /* dims traced symbolic: asked for up front, or whose size changed */
  unsigned pinned_dims[FN_MAXARGS];     /* dims a trace had to specialise: not made symbolic again */
  int eager_forever, warned;
  int no_auto;                          /* paths that part at a branch stay replayed (grace_fn_options.no_auto_regions) */
  long calls, hits, traces, eager_calls, recaptures, replays;
  int aheads;                           /* paths recorded ahead (vm_auto.c) */
  char name[96];
  char irname[64];
  char last_miss[400];
  char eager_reason[1100];
  fn_entry **entries;
  int nentries, capentries;
};

/* vm_fn.c: traces the host function once into a new entry (*out; not cached, not counted). Results as for
 * grace_fn_call (at most maxres written, *nres the count); on failure nothing is left to release. */
grace_status fn_trace(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres,
                      fn_entry **out);
/* The dims the next trace makes symbolic, bit d of out[i] for dim d of argument i (none of size 0 or 1); whether
 * there is any. */
int fn_symbolic_dims(const grace_fn *fn, int nargs, const grace_arg *args, unsigned *out);
void fn_entry_free(grace_fn *fn, fn_entry *e);
void fn_release_results(grace_fn *fn, int nres, grace_arg *res);
/* "float32 [2, 3]" (and " (strided)") */
const char *fn_tensor_desc(const fn_guard *g, char *buf, size_t n);

/* Two constant results alike (numbers by value, host values by identity). */
int fn_same_const(grace_fn *fn, const grace_arg *a, const grace_arg *b);

/* vm_fn.c: starts a replay of e's paths on the call's arguments (its tensor inputs declared). */
grace_status fn_replay_begin(grace_fn *fn, fn_entry *e, const grace_arg *args);

/* vm_auto.c: paths that part at a branch on a value read on the host become one program with a cond region. */
/* After a replayed call's host function returned, its trace still active: a call that ended at a branch where the
 * recorded paths go on is recorded as a path of its own (the other outcome of an early return), and a path being
 * recorded gets the call's results as its outputs. Failures leave the paths as they are. */
void fn_auto_call_end(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args, int nres, const grace_arg *res);
/* After a path recorded by the call joined e->tree (the last one): merges it with a path of the other outcome. */
void fn_auto_path_added(grace_fn *fn, fn_entry *e);
/* Before a replayed call of an entry that may still merge: the host's trace_begin (1: it ran). */
int fn_auto_guard_begin(grace_fn *fn, fn_entry *e);
/* After that call (ok: it ran cleanly): the host's trace_end, which blocks the merge where the call changed Lua
 * state a compiled call would not repeat, or gives the guards of a merged program waiting (the entry runs it from
 * now on). */
void fn_auto_guard_end(grace_fn *fn, fn_entry *e, int ok);
/* After a replayed call that stayed on the recorded paths, its results made: where the calls so far all took the
 * same outcome of the branch and the host says the other outcome's code is an early return, records that path
 * ahead by calling the function once more (results dropped, nothing visible; see vm_auto.c), once per entry. */
void fn_auto_ahead(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args);
/* Why instructions 0..after of path p may not run a second time for one call (NULL: they may): an in-place write to
 * an argument or a captured tensor, or a random draw; buf (n bytes) holds the reason. */
const char *fn_auto_prefix_effects(const grace_ir *p, int after, char *buf, size_t n);
int fn_auto_merged(const fn_entry *e);        /* the entry runs a merged program */
const char *fn_auto_why(const fn_entry *e);   /* why its paths stay replayed ("" none known) */
void fn_auto_free(grace_fn *fn, fn_entry *e);

/* vm_place.c: placement rewrites of e->ir (host tensors it only moves to the device: arguments staged ahead of the
 * program per call, captured tensors made device constants); fn_place_inputs: before a run, in[0..e->ninput) with the
 * staged ones replaced by their device copies (new references in staged[], NULL where none) and the device constants
 * of captured tensors written since made again. */
typedef struct fn_moves fn_moves;
grace_status fn_place_rewrite(grace_vm *vm, fn_entry *e);
/* A function with breaks (e->tree): why each round trip of its first path stays on the host, in e's decisions. */
void fn_place_explain(grace_vm *vm, fn_entry *e);
grace_status fn_place_inputs(grace_vm *vm, fn_entry *e, grace_tensor **in, grace_tensor **staged);
void fn_moves_free(grace_vm *vm, fn_moves *m);
const char *fn_moves_text(const fn_moves *m);   /* the decisions, one line each ("" none) */
size_t fn_moves_bytes(const fn_moves *m);       /* bytes staged so far */

/* vm_fn_explain.c */
int fn_log_topic(const char *topic);
/* For GRACE_LOG=ir: the kernels the program runs as, from the fusion grouping the executors use (stderr). */
void fn_log_plan(grace_vm *vm, grace_ir *ir);
/* How each region of ir runs on its device and why, one line each (for GRACE_LOG=regions, stderr). */
void fn_log_regions(grace_vm *vm, const char *name, grace_ir *ir);
/* ir's placement report, each line after prefix, to stderr (for GRACE_LOG=placement). */
void fn_log_placement(grace_vm *vm, grace_ir *ir, const char *prefix);

#endif
