/* cg.h: what every kernel generator shares: the string builder, the dtype names and conversions emitted into
 * sources, and the one calling convention of generated kernels.
 *
 * Calling convention. A generated kernel is `extern "C" __global__ void <name>(const <name>_p p)`: one parameter,
 * a struct made only of 8-byte fields, in this order:
 *   1. tensor pointers, one per cg_arg in args order: `T *` or, when the kernel was generated indirect, `T **`
 *      (the kernel dereferences each once at entry: parameter indirection for CUDA graphs);
 *   2. int64 words (`long long`): sizes, strides, counts; what they are and their order is defined per kind
 *      below and filled by the generator's pack function on the host;
 *   3. scalars: one 8-byte word each (double, or long long for integer scalars), or with indirect, a pointer
 *      to that word.
 * The host packs the same layout as an array of uint64_t (cg_pack) and launches with it as the one parameter.
 * Offsets are applied to the pointers on the host; strides are in elements. */
#ifndef GRACE_CG_H
#define GRACE_CG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "grace.h"

#define CG_MAX_ARGS 32
#define CG_MAX_WORDS 512

/* ---- string builder: errors stick (oom), checked once at the end ---- */
typedef struct cg_buf {
  grace_vm *vm;
  char *s;
  size_t len, cap;
  int oom;
} cg_buf;
void cg_buf_init(cg_buf *b, grace_vm *vm);
void cg_printf(cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_puts(cg_buf *b, const char *s);
/* Hands the text over (caller frees with grace_realloc(vm, s, n + 1, 0)); NULL after an allocation failure. */
char *cg_buf_take(cg_buf *b, size_t *n);
void cg_buf_free(cg_buf *b);

/* ---- dtypes in generated code ---- */
/* Storage type: "float", "double", "unsigned short" (f16, bf16: bits), "int", "long long", "unsigned char". */
const char *cg_ctype(grace_dtype dt);
/* Emits the helpers every source starts with (f16/bf16 <-> float bit conversions, round-half-even, the Philox
 * generator, warp/block reduction helpers), once per source. */
void cg_prelude(cg_buf *b);
/* The first statements of a kernel launched as a programmatic dependent (cuda_launch_overlapped): let the next
 * kernel on the stream be launched now, then wait until every earlier kernel has finished and its writes are
 * visible. Emitted before anything the kernel reads, so it runs as a plain launch would; what it saves is the
 * launch of the next kernel, which overlaps this one. No-ops in a plain launch and before sm_90. */
void cg_pdl_enter(cg_buf *b);
/* Predication (gpu/gpu_pred.c: a cond region whose two bodies are both captured into one graph). A kernel generated
 * with its spec's pred flag takes two more parameters after its struct (cg_pred_params: a pointer to a 32-bit word
 * and the value it must hold) and starts with cg_pred_enter: it lets its dependents launch and waits for the kernels
 * before it (griddepcontrol, as cg_pdl_enter: the word may be written by the kernel just before), then returns,
 * before reading anything else, unless the word holds the value. The flag is off for every kernel outside such a
 * body: those have neither the parameters nor the check. Both emit nothing when pred is 0. */
const char *cg_pred_params(int pred);
void cg_pred_enter(cg_buf *b, int pred);
/* Expands a CUDA template of the pointwise table (ir/ir_pointwise.h) into out (n bytes): $0..$2 become args[0..2],
 * $f "f" when f32 (a float register; "" for a double one), $T the register type T. 0 when it does not fit. */
int cg_pw_expand(char *out, size_t n, const char *tmpl, const char *const *args, int nargs, int f32, const char *T);

/* ---- a generated kernel and how to launch it ---- */
typedef enum cg_kind {
  CG_POINTWISE,      /* one thread per element of an iteration shape (grid-stride) */
  CG_ROW,            /* rows of an iteration shape: reductions over the trailing dims plus pointwise around them */
  CG_MATMUL,         /* GEMV / GEMM with an epilogue */
  CG_OP              /* a single op with a hand-written template (gather, sort, cumsum, creation, ...) */
} cg_kind;

typedef struct cg_arg {
  int32_t value;     /* the IR value it carries (-1 for a buffer internal to a template) */
  grace_dtype dtype;
  int output;        /* written by the kernel */
} cg_arg;

typedef struct cg_kernel {
  char name[64];
  cg_kind kind;
  int indirect;              /* tensor pointers passed as T** and scalars through pointers */
  int narg;
  cg_arg args[CG_MAX_ARGS];
  int nscalar;
  int32_t scalars[8];        /* IR values of dynamic scalars, in word order */
  grace_dtype scalar_dtypes[8];
  int ndim;                  /* rank of the iteration shape */
  int variant;               /* generator specific: layout classes, vector width, rows per block, ... */
  char *src;                 /* the kernel's CUDA source (prelude included), owned */
  size_t src_len;
} cg_kernel;

/* The tensors of one launch, as the host sees them (the pointer has the offset applied). */
typedef struct cg_tensor {
  uint64_t ptr;
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];
  int64_t strides[GRACE_MAX_DIMS];
  grace_dtype dtype;
} cg_tensor;

typedef struct cg_launch {
  unsigned grid[3], block[3], smem;
  int nwords;
  uint64_t words[CG_MAX_WORDS];   /* the parameter struct */
} cg_launch;

void cg_kernel_free(grace_vm *vm, cg_kernel *k);

#endif
