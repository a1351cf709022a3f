/* cg.c: what every kernel generator shares (codegen/cg.h): the growable string builder sources are written
 * into, the C type names of dtypes in generated code, and the prelude of device helpers (f16/bf16 bit
 * conversions with the CPU backend's rounding, float->int conversion as the CPU does it, Philox, warp and
 * block reductions, codegen/cg_prelude.cuh) that every generated source starts with. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg.h"
#include "codegen/cg_templates.h"

void cg_buf_init(cg_buf *b, grace_vm *vm) {
  b->vm = vm;
  b->s = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}

/* Room for n more characters plus the terminator; sets oom (sticky) when the allocator fails. */
static int cg_reserve(cg_buf *b, size_t n) {
  if (b->oom) return 0;
  if (b->len + n + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + n + 1) cap *= 2;
  char *s = grace_realloc(b->vm, b->s, b->cap, cap);
  if (!s) { b->oom = 1; return 0; }
  b->s = s;
  b->cap = cap;
  return 1;
}

void cg_puts(cg_buf *b, const char *s) {
  size_t n = strlen(s);
  if (!cg_reserve(b, n)) return;
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

void cg_printf(cg_buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) { b->oom = 1; return; }
  if ((size_t)n < sizeof small) { cg_puts(b, small); return; }
  if (!cg_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *cg_buf_take(cg_buf *b, size_t *n) {
  if (b->oom || !cg_reserve(b, 0)) { cg_buf_free(b); if (n) *n = 0; return NULL; }
  /* shrink to len + 1 so the caller can free with the size it knows */
  char *s = grace_realloc(b->vm, b->s, b->cap, b->len + 1);
  if (!s) { cg_buf_free(b); if (n) *n = 0; return NULL; }
  if (n) *n = b->len;
  b->s = NULL;
  b->len = b->cap = 0;
  return s;
}

void cg_buf_free(cg_buf *b) {
  if (b->s) grace_realloc(b->vm, b->s, b->cap, 0);
  b->s = NULL;
  b->len = b->cap = 0;
}

const char *cg_ctype(grace_dtype dt) {
  switch (dt) {
  case GRACE_FLOAT32: return "float";
  case GRACE_FLOAT64: return "double";
  case GRACE_FLOAT16: case GRACE_BFLOAT16: return "unsigned short";
  case GRACE_INT32: return "int";
  case GRACE_INT64: return "long long";
  case GRACE_UINT8: case GRACE_BOOL: return "unsigned char";
  default: return "void";
  }
}

void cg_prelude(cg_buf *b) { cg_puts(b, cg_src_prelude); }

void cg_pdl_enter(cg_buf *b) {
  cg_puts(b, "#if __CUDA_ARCH__ >= 900\n"
             "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
             "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");   /* grace: enter */\n"
             "#endif\n");
}

const char *cg_pred_params(int pred) {
  return pred ? ", const unsigned *grace_pred, const unsigned grace_want" : "";
}

void cg_pred_enter(cg_buf *b, int pred) {
  if (!pred) return;
  /* dependents launched first: a kernel that returns here must not hold back the chain after it */
  cg_puts(b, "  {   /* grace: predicated */\n"
             "#if __CUDA_ARCH__ >= 900\n"
             "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
             "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
             "#endif\n"
             "    if (*(const volatile unsigned *)grace_pred != grace_want) return;\n"
             "  }\n");
}

int cg_pw_expand(char *out, size_t n, const char *tmpl, const char *const *args, int nargs, int f32, const char *T) {
  size_t k = 0;
  for (const char *p = tmpl; *p; p++) {
    const char *ins = NULL;
    char one[2] = {*p, 0};
    if (p[0] == '$' && p[1] >= '0' && p[1] - '0' < nargs) ins = args[p[1] - '0'];
    else if (p[0] == '$' && p[1] == 'f') ins = f32 ? "f" : "";
    else if (p[0] == '$' && p[1] == 'T') ins = T;
    if (ins) p++;
    else ins = one;
    size_t l = strlen(ins);
    if (k + l >= n) return 0;
    memcpy(out + k, ins, l);
    k += l;
  }
  out[k] = 0;
  return 1;
}

void cg_kernel_free(grace_vm *vm, cg_kernel *k) {
  if (!k) return;
  if (k->src) grace_realloc(vm, k->src, k->src_len + 1, 0);
  k->src = NULL;
  k->src_len = 0;
}
