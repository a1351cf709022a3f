/* ir_text.c: the IR's text form, printed and parsed, so that tests are written as IR text and
 * `GRACE_LOG=ir` / `--dump-ir` show what was traced. One instruction per line:
 *   func @name {
 *     %0 = input #0 : f32[4,8]
 *     %2, %3 = max %1 {dims=[1], keepdim=1} : f32[4,1], i64[4,1]  @"model.lua:12"
 *     write %0, %4
 *     return %2
 *   }
 * An absent optional input prints as `_`. Attributes print only where they differ from the defaults. A region
 * (cond, while) ends its line with `{`, then its two sub-programs as nested functions two spaces deeper (each with
 * its own value numbering: it captures nothing), then `}` on a line of its own. A graph break prints where the host
 * read, with what it did there when known: `break %3 gt 0 then` (it branched on %3 > 0 and this path took the true
 * side), `break !"why"` (a read that cannot become a predicate), or a bare `break`. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_sym.h"
#include "base/base.h"

typedef struct { grace_ir *ir; char *buf; size_t len, cap; int oom; } sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if (b->buf && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
    size_t nc = b->cap ? b->cap * 2 : 1024;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *p = grace_realloc(b->ir->vm, b->buf, b->cap, nc);
    if (!p) { b->oom = 1; return; }
    b->buf = p;
    b->cap = nc;
  }
}

static void put_list(sbuf *b, const char *key, int n, const int64_t *v) {
  put(b, "%s=[", key);
  for (int i = 0; i < n; i++) put(b, i ? ",%lld" : "%lld", (long long)v[i]);
  put(b, "]");
}

static int shape_always(int op) {
  if (op >= GRACE_NOPS) return 0;
  grace_opkind k = grace_op_kind((grace_op)op);
  return op == GRACE_OP_RESHAPE || op == GRACE_OP_VIEW || op == GRACE_OP_EXPAND || op == GRACE_OP_REPEAT ||
         (k == GRACE_KIND_CREATE && op != GRACE_OP_ARANGE && op != GRACE_OP_LINSPACE);
}

static void put_attrs(sbuf *b, int op, const grace_attrs *a) {
  int n = 0;
#define SEP() put(b, n++ ? ", " : " {")
  if (a->ndims) { SEP(); put_list(b, "dims", a->ndims, a->dims); }
  if (a->nshape || shape_always(op)) { SEP(); put_list(b, "shape", a->nshape, a->shape); }
  /* an exact integer prints as one, so it parses back exact */
  if (a->has_a || a->a != 0 || (a->exact & 1)) { SEP(); if (a->exact & 1) put(b, "a=%lld", (long long)a->ia); else put(b, "a=%.17g", a->a); }
  if (a->has_b || a->b != 0 || (a->exact & 2)) { SEP(); if (a->exact & 2) put(b, "b=%lld", (long long)a->ib); else put(b, "b=%.17g", a->b); }
  if (a->c != 0 || (a->exact & 4)) { SEP(); if (a->exact & 4) put(b, "c=%lld", (long long)a->ic); else put(b, "c=%.17g", a->c); }
  if (a->i0) { SEP(); put(b, "i0=%lld", (long long)a->i0); }
  if (a->i1) { SEP(); put(b, "i1=%lld", (long long)a->i1); }
  if (a->keepdim) { SEP(); put(b, "keepdim=1"); }
  if (a->flag) { SEP(); put(b, "flag=%d", a->flag); }
  if (a->has_dtype) { SEP(); put(b, "dtype=%s", ir_dtype_short(a->dtype)); }
  if (a->device != GRACE_CPU) { SEP(); put(b, "device=%s", grace_device_name(a->device)); }
  if (n) put(b, "}");
#undef SEP
}

/* break [%v cmp k then|else | !"why"]  @"loc": a predicate (the host branched on %v cmp k and this path took the
 * then or else side), or why the read there cannot be one */
static void put_break(sbuf *b, const grace_ir *ir, int nb, int ind) {
  const ir_break *k = &ir->breaks[nb];
  put(b, "%*sbreak", ind, "");
  if (k->kind == IR_BRK_PRED) {
    put(b, " %%%d %s", (int)k->value, ir_cmp_name(k->cmp));
    if (k->cmp != GRACE_CMP_TRUTH) put(b, " %.17g", k->k);
    put(b, " %s", k->taken ? "then" : "else");
  } else if (k->kind == IR_BRK_WHY && k->why >= 0)
    put(b, " !\"%s\"", ir->locs[k->why]);
  if (k->loc >= 0) put(b, "  @\"%s\"", ir->locs[k->loc]);
  put(b, "\n");
}

static void put_func(sbuf *b, const grace_ir *ir, int ind);

static void put_inst(sbuf *b, const grace_ir *ir, int i, int ind) {
  const ir_inst *k = &ir->insts[i];
  char t[192];
  put(b, "%*s", ind, "");
  for (int r = 0; r < k->nout; r++) put(b, r ? ", %%%d" : "%%%d", k->first_result + r);
  put(b, " = %s", ir_op_name(k->op));
  if (k->op == IR_OP_INPUT || k->op == IR_OP_CONST || k->op == IR_OP_SCALAR) put(b, " #%d", k->input_index);
  if (k->op == IR_OP_SCALAR && ir->vals[k->first_result].type.wrapped) put(b, " wrapped");
  else if (k->op == IR_OP_LITERAL && ir->vals[k->first_result].type.dtype == GRACE_INT64) put(b, " %lld", (long long)k->iliteral);
  else if (k->op == IR_OP_LITERAL) put(b, " %.17g", k->literal);
  for (int j = 0; j < k->nin; j++) {
    int32_t v = ir->args[k->first_arg + j];
    put(b, v < 0 ? "%s _" : "%s %%%d", j ? "," : "", v);
  }
  put_attrs(b, k->op, &k->attrs);
  put(b, " :");
  for (int r = 0; r < k->nout; r++) put(b, "%s %s", r ? "," : "", ir_type_str(&ir->vals[k->first_result + r].type, t, sizeof t));
  if (k->loc >= 0) put(b, "  @\"%s\"", ir->locs[k->loc]);
  if (ir_is_region(k->op)) {   /* its two sub-programs, nested, then the closing brace on a line of its own */
    put(b, " {\n");
    put_func(b, ir->subs[k->sub], ind + 2);
    put_func(b, ir->subs[k->sub + 1], ind + 2);
    put(b, "%*s}", ind, "");
  }
  put(b, "\n");
}

/* One function at indent ind (a region's sub-programs two deeper than the region). */
static void put_func(sbuf *b, const grace_ir *ir, int ind) {
  put(b, "%*sfunc @%s {\n", ind, "", ir->name);
  for (int32_t k = 1; k <= ir->nsyms; k++) {   /* the symbols, before anything uses them */
    const ir_sym *s = &ir->syms[k - 1];
    if (s->base) {
      put(b, "%*ssym s%d base=s%d mul=%lld add=%lld\n", ind + 2, "", (int)k, (int)s->base, (long long)s->mul, (long long)s->add);
      continue;
    }
    put(b, "%*ssym s%d hint=%lld min=%lld", ind + 2, "", (int)k, (long long)s->hint, (long long)s->min);
    if (s->same) put(b, " same=s%d", (int)s->same);
    if (s->pinned) put(b, " pinned");
    put(b, "\n");
  }
  int nb = 0;
  for (int i = 0; i < ir->ninst; i++) {
    for (; nb < ir->nbreak && ir->breaks[nb].after < i; nb++) put_break(b, ir, nb, ind + 2);
    put_inst(b, ir, i, ind + 2);
  }
  for (; nb < ir->nbreak; nb++) put_break(b, ir, nb, ind + 2);
  for (int i = 0; i < ir->nwrite; i++) {
    put(b, "%*swrite %%%d, %%%d", ind + 2, "", ir->writes[i].target, ir->writes[i].value);
    if (ir->writes[i].bumps != 1) put(b, " bumps=%d", ir->writes[i].bumps);
    put(b, "\n");
  }
  put(b, "%*sreturn", ind + 2, "");
  for (int i = 0; i < ir->nout; i++) put(b, i ? ", %%%d" : " %%%d", ir->outputs[i]);
  put(b, "\n%*s}\n", ind, "");
}

const char *grace_ir_text(grace_ir *ir) {
  if (!ir) return NULL;
  sbuf b = {.ir = ir};
  put_func(&b, ir, 0);
  if (b.oom) {
    grace_realloc(ir->vm, b.buf, b.cap, 0);
    grace_set_error(ir->vm, GRACE_ENOMEM, "ir: out of host memory printing '%s'", ir->name);
    return NULL;
  }
  if (ir->text) grace_realloc(ir->vm, ir->text, ir->text_len, 0);
  ir->text = b.buf;
  ir->text_len = b.cap;
  return ir->text;
}

/* ---- parser ---- */
typedef struct { const char *s; int line; grace_vm *vm; grace_ir *ir; } lexer;

static void skip_ws(lexer *L) { while (*L->s == ' ' || *L->s == '\t' || *L->s == '\r') L->s++; }
static int accept(lexer *L, const char *tok) {
  skip_ws(L);
  size_t n = strlen(tok);
  if (strncmp(L->s, tok, n)) return 0;
  L->s += n;
  return 1;
}
static grace_status perr(lexer *L, const char *what) {
  const char *e = L->s;
  int n = 0;
  while (e[n] && e[n] != '\n' && n < 30) n++;
  return grace_set_error(L->vm, GRACE_EARG, "ir parse: line %d: expected %s at '%.*s'", L->line, what, n, e);
}
static int word(lexer *L, char *out, size_t n) {
  skip_ws(L);
  size_t k = 0;
  while ((isalnum((unsigned char)*L->s) || *L->s == '_') && k + 1 < n) out[k++] = *L->s++;
  out[k] = 0;
  return k > 0;
}
static int integer(lexer *L, int64_t *v) {
  skip_ws(L);
  char *end;
  long long x = strtoll(L->s, &end, 10);
  if (end == L->s) return 0;
  L->s = end;
  *v = x;
  return 1;
}
static int number(lexer *L, double *v) {
  skip_ws(L);
  char *end;
  double x = strtod(L->s, &end);
  if (end == L->s) return 0;
  L->s = end;
  *v = x;
  return 1;
}
/* A number; *exact set (and *iv the value) when it is written as an integer (one past int64 is no number). */
static int number_exact(lexer *L, double *v, int64_t *iv, int *exact) {
  skip_ws(L);
  const char *start = L->s;
  if (!number(L, v)) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(start, &end, 10);
  *exact = end == L->s;
  if (*exact && errno == ERANGE) return 0;
  *iv = *exact ? x : 0;
  return 1;
}

static int value_ref(lexer *L, int32_t *v) {
  int64_t x;
  if (!accept(L, "%") || !integer(L, &x)) return 0;
  *v = (int32_t)x;
  return 1;
}

static grace_status parse_type(lexer *L, ir_type *t) {
  char w[16];
  memset(t, 0, sizeof *t);
  if (!word(L, w, sizeof w) || !ir_dtype_from_short(w, &t->dtype)) return perr(L, "a dtype (f32, i64, ...)");
  if (!accept(L, "[")) return perr(L, "'['");
  while (!accept(L, "]")) {
    if (t->ndim && !accept(L, ",")) return perr(L, "',' or ']'");
    if (t->ndim >= GRACE_MAX_DIMS) return perr(L, "at most 8 dims");
    int64_t x;
    if (accept(L, "s")) {
      if (!integer(L, &x) || x < 1 || x > 100000 || !accept(L, "=")) return perr(L, "a symbolic size s<k>=<hint>");
      t->sym[t->ndim] = (int32_t)x;
    }
    if (!integer(L, &x)) return perr(L, "a size");
    /* a symbol no sym line declared: a free one, traced at this size */
    while (t->sym[t->ndim] > L->ir->nsyms)
      if (!ir_sym_new(L->ir, x)) return GRACE_ENOMEM;
    t->sizes[t->ndim++] = x;
  }
  if (accept(L, "cuda")) t->device = GRACE_CUDA;
  return GRACE_OK;
}

static grace_status parse_list(lexer *L, int *n, int64_t *v) {
  *n = 0;
  if (!accept(L, "[")) return perr(L, "'['");
  while (!accept(L, "]")) {
    if (*n && !accept(L, ",")) return perr(L, "',' or ']'");
    if (*n >= GRACE_MAX_DIMS || !integer(L, &v[*n])) return perr(L, "an integer");
    (*n)++;
  }
  return GRACE_OK;
}

static grace_status parse_attrs(lexer *L, grace_attrs *a) {
  memset(a, 0, sizeof *a);
  if (!accept(L, "{")) return GRACE_OK;
  while (!accept(L, "}")) {
    char key[16];
    int64_t x;
    grace_status st = GRACE_OK;
    if (!word(L, key, sizeof key) || !accept(L, "=")) return perr(L, "key=value");
    if (!strcmp(key, "dims")) st = parse_list(L, &a->ndims, a->dims);
    else if (!strcmp(key, "shape")) st = parse_list(L, &a->nshape, a->shape);
    else if (!strcmp(key, "a") || !strcmp(key, "b") || !strcmp(key, "c")) {
      int k = key[0] - 'a', ex;
      double *d = k == 0 ? &a->a : k == 1 ? &a->b : &a->c;
      int64_t *i = k == 0 ? &a->ia : k == 1 ? &a->ib : &a->ic;
      if (!number_exact(L, d, i, &ex)) return perr(L, "a number");
      if (ex) a->exact |= 1 << k;
      if (k == 0) a->has_a = 1; else if (k == 1) a->has_b = 1;
    }
    else if (!strcmp(key, "i0")) { if (!integer(L, &a->i0)) return perr(L, "an integer"); }
    else if (!strcmp(key, "i1")) { if (!integer(L, &a->i1)) return perr(L, "an integer"); }
    else if (!strcmp(key, "keepdim")) { if (!integer(L, &x)) return perr(L, "0 or 1"); a->keepdim = (int)x; }
    else if (!strcmp(key, "flag")) { if (!integer(L, &x)) return perr(L, "an integer"); a->flag = (int)x; }
    else if (!strcmp(key, "dtype")) {
      char w[16];
      if (!word(L, w, sizeof w) || !ir_dtype_from_short(w, &a->dtype)) return perr(L, "a dtype");
      a->has_dtype = 1;
    } else if (!strcmp(key, "device")) {
      char w[16];
      if (!word(L, w, sizeof w)) return perr(L, "a device");
      a->device = !strcmp(w, "cuda") ? GRACE_CUDA : GRACE_CPU;
    } else return perr(L, "a known attribute");
    if (st != GRACE_OK) return st;
    accept(L, ",");
  }
  return GRACE_OK;
}

static void skip_lines(lexer *L) { while (isspace((unsigned char)*L->s)) { if (*L->s == '\n') L->line++; L->s++; } }
static grace_status parse_func(lexer *L, grace_ir **out);

/* A region's two sub-programs, `{`, two nested functions, `}`; the instruction just appended owns them. */
static grace_status parse_region(lexer *L) {
  grace_ir *ir = L->ir, *sub[2] = {NULL, NULL};
  if (!accept(L, "{")) return perr(L, "'{' and the region's two sub-programs");
  grace_status st = GRACE_OK;
  for (int j = 0; j < 2 && st == GRACE_OK; j++) { skip_lines(L); st = parse_func(L, &sub[j]); }
  L->ir = ir;
  if (st == GRACE_OK) { skip_lines(L); if (!accept(L, "}")) st = perr(L, "'}' closing the region"); }
  int32_t first = st == GRACE_OK ? ir_add_sub(ir, sub[0]) : -1;
  if (first >= 0 && ir_add_sub(ir, sub[1]) < 0) { ir->nsub--; first = -1; st = GRACE_ENOMEM; }
  if (first < 0) { grace_ir_free(sub[0]); grace_ir_free(sub[1]); return st != GRACE_OK ? st : GRACE_ENOMEM; }
  ir->insts[ir->ninst - 1].sub = first;
  return GRACE_OK;
}

static grace_status parse_inst(lexer *L) {
  grace_ir *ir = L->ir;
  int32_t res[64];
  int nres = 0;
  do {
    if (nres >= 64 || !value_ref(L, &res[nres])) return perr(L, "a result %N");
    if (res[nres] != ir->nval + nres) return perr(L, "results numbered in order");
    nres++;
  } while (accept(L, ","));
  if (!accept(L, "=")) return perr(L, "'='");
  char name[32];
  if (!word(L, name, sizeof name)) return perr(L, "an op name");
  int op = ir_op_from_name(name);
  if (op < 0) return perr(L, "a known op");
  int64_t index = -1, ilit = 0;
  double lit = 0;
  int32_t args[64];
  int nin = 0;
  int wrapped = 0;
  if (op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_SCALAR) {
    if (!accept(L, "#") || !integer(L, &index)) return perr(L, "#index");
    wrapped = op == IR_OP_SCALAR && accept(L, "wrapped");
  } else if (op == IR_OP_LITERAL) {
    int exact = 0;
    if (!number_exact(L, &lit, &ilit, &exact)) return perr(L, "a number (an integer within int64)");
    /* a float written for an integer literal: its value where int64 holds it (the conversion is undefined past) */
    if (!exact) ilit = lit >= -9223372036854775808.0 && lit < 9223372036854775808.0 ? (int64_t)lit : 0;
  } else {
    for (;;) {
      skip_ws(L);
      if (*L->s != '%' && *L->s != '_') break;
      if (nin >= 64) return perr(L, "at most 64 inputs");
      if (accept(L, "_")) args[nin++] = -1;
      else if (!value_ref(L, &args[nin++])) return perr(L, "an input %N");
      if (!accept(L, ",")) break;
    }
  }
  grace_attrs a;
  grace_status st = parse_attrs(L, &a);
  if (st != GRACE_OK) return st;
  if (!accept(L, ":")) return perr(L, "':' and the result types");
  ir_type types[64];
  for (int r = 0; r < nres; r++) {
    if (r && !accept(L, ",")) return perr(L, "','");
    if ((st = parse_type(L, &types[r])) != GRACE_OK) return st;
  }
  if (accept(L, "@\"")) {
    const char *e = strchr(L->s, '"');
    if (!e) return perr(L, "a closing quote");
    char loc[256];
    snprintf(loc, sizeof loc, "%.*s", (int)(e - L->s), L->s);
    L->s = e + 1;
    if ((st = grace_ir_set_location(ir, loc)) != GRACE_OK) return st;
  } else grace_ir_set_location(ir, NULL);
  /* as grace_ir_literal makes them: a number of another type would promote as no traced number does */
  if (op == IR_OP_LITERAL && (nres != 1 || types[0].ndim != 0 || types[0].device != GRACE_CPU ||
                              (types[0].dtype != GRACE_INT64 && types[0].dtype != GRACE_FLOAT64)))
    return perr(L, "a literal typed i64[] or f64[]");
  if (op == IR_OP_LITERAL || wrapped) types[0].wrapped = 1;
  for (int i = 0; i < nin; i++)
    if (args[i] >= ir->nval) return grace_set_error(L->vm, GRACE_EARG, "ir parse: line %d: %%%d used before it is defined", L->line, args[i]);
  if (ir_append(ir, op, nin, args, &a, nres, types) < 0) return GRACE_ENOMEM;
  if (ir_is_region(op)) return parse_region(L);
  ir_inst *k = &ir->insts[ir->ninst - 1];
  k->literal = lit;
  k->iliteral = ilit;
  if (op == IR_OP_INPUT) { k->input_index = (int32_t)index; ir->ninputs++; }
  else if (op == IR_OP_SCALAR) { k->input_index = (int32_t)index; ir->nscalars++; }
  else if (op == IR_OP_CONST) {
    k->input_index = (int32_t)index;
    if (index != ir->nconst) return perr(L, "consts numbered in order");
    if (ir->nconst >= ir->cap_const) {
      int nc = ir->cap_const ? ir->cap_const * 2 : 8;
      ir_const *p = grace_realloc(L->vm, ir->consts, sizeof *p * (size_t)ir->cap_const, sizeof *p * (size_t)nc);
      if (!p) return grace_set_error(L->vm, GRACE_ENOMEM, "ir parse: out of host memory");
      ir->consts = p;
      ir->cap_const = nc;
    }
    ir->consts[ir->nconst++] = (ir_const){NULL, 0, 0};
  }
  return GRACE_OK;
}

/* `sym s<k> hint=<h> min=<m> [same=s<j>] [pinned]` or `sym s<k> base=s<b> mul=<m> add=<a>`, declaring s<k>, the
 * next symbol (a derived one refers to an earlier symbol). */
static grace_status parse_sym(lexer *L) {
  grace_ir *ir = L->ir;
  int64_t k, h, m, j;
  if (!accept(L, "s") || !integer(L, &k) || k != ir->nsyms + 1) return perr(L, "the next symbol s<k>");
  if (accept(L, "base=s")) {
    int64_t mul, add;
    if (!integer(L, &j) || j < 1 || j > ir->nsyms || !accept(L, "mul=") || !integer(L, &mul) || mul < 1 ||
        !accept(L, "add=") || !integer(L, &add))
      return perr(L, "base=s<j> mul=<m> add=<a> (an earlier symbol, m >= 1)");
    if (!ir_sym_new(ir, 2)) return GRACE_ENOMEM;
    ir_sym *s = &ir->syms[k - 1];
    *s = (ir_sym){.hint = mul * ir->syms[j - 1].hint + add, .base = (int32_t)j, .mul = mul, .add = add};
    return GRACE_OK;
  }
  if (!accept(L, "hint=") || !integer(L, &h) || h < 0 || !accept(L, "min=") || !integer(L, &m) || m < 0)
    return perr(L, "hint=<h> min=<m>");
  if (!ir_sym_new(ir, h)) return GRACE_ENOMEM;
  ir->syms[k - 1].min = m;
  if (accept(L, "same=s")) {
    if (!integer(L, &j) || j < 1 || j >= k) return perr(L, "same=s<j> (an earlier symbol)");
    ir->syms[k - 1].same = (int32_t)j;
  }
  if (accept(L, "pinned")) ir->syms[k - 1].pinned = 1;
  return GRACE_OK;
}

/* What follows `break`: a predicate `%v cmp [k] then|else`, or `!"why"` (nothing: a plain read). */
static grace_status parse_break(lexer *L, ir_break *b) {
  if (accept(L, "!\"")) {
    const char *e = strchr(L->s, '"');
    if (!e) return perr(L, "a closing quote");
    char why[512];
    snprintf(why, sizeof why, "%.*s", (int)(e - L->s), L->s);
    L->s = e + 1;
    b->kind = IR_BRK_WHY;
    if ((b->why = ir_intern(L->ir, why)) < 0) return GRACE_ENOMEM;
    return GRACE_OK;
  }
  skip_ws(L);
  if (*L->s != '%') return GRACE_OK;
  char name[16];
  if (!value_ref(L, &b->value) || !word(L, name, sizeof name)) return perr(L, "break %V cmp k then|else");
  b->cmp = -1;
  for (int c = 0; c <= GRACE_CMP_TRUTH; c++) if (!strcmp(name, ir_cmp_name(c))) b->cmp = (int8_t)c;
  if (b->cmp < 0) return perr(L, "a comparison (lt, le, gt, ge, eq, ne, truth)");
  if (b->cmp != GRACE_CMP_TRUTH && !number(L, &b->k)) return perr(L, "the number compared with");
  if (accept(L, "then")) b->taken = 1;
  else if (accept(L, "else")) b->taken = 0;
  else return perr(L, "then or else");
  if (b->value >= L->ir->nval) return perr(L, "a value defined before the break");
  b->kind = IR_BRK_PRED;
  return GRACE_OK;
}

/* `func @name { ... }` at L into a new IR (its regions' sub-programs parsed recursively). */
static grace_status parse_func(lexer *Lp, grace_ir **out) {
  lexer L = *Lp;
  grace_vm *vm = L.vm;
  *out = NULL;
  char name[64];
  if (!accept(&L, "func") || !accept(&L, "@") || !word(&L, name, sizeof name) || !accept(&L, "{"))
    return perr(&L, "'func @name {'");
  grace_ir *ir = L.ir = grace_ir_new(vm, name);
  if (!ir) return GRACE_ENOMEM;
  grace_status st = GRACE_OK;
  for (;;) {
    skip_lines(&L);
    if (accept(&L, "return")) break;
    if (accept(&L, "break")) {
      ir_break pb = {.kind = IR_BRK_READ, .cmp = -1, .value = -1, .why = -1};
      if ((st = parse_break(&L, &pb)) != GRACE_OK) break;
      if (accept(&L, "@\"")) {
        const char *e = strchr(L.s, '"');
        if (!e) { st = perr(&L, "a closing quote"); break; }
        char loc[256];
        snprintf(loc, sizeof loc, "%.*s", (int)(e - L.s), L.s);
        L.s = e + 1;
        grace_ir_set_location(ir, loc);
      } else grace_ir_set_location(ir, NULL);
      if ((st = ir_add_break(ir)) != GRACE_OK) break;
      pb.after = ir->breaks[ir->nbreak - 1].after;
      pb.loc = ir->breaks[ir->nbreak - 1].loc;
      pb.nread = 1;
      ir->breaks[ir->nbreak - 1] = pb;
      continue;
    }
    if (accept(&L, "sym")) {
      if ((st = parse_sym(&L)) != GRACE_OK) break;
      continue;
    }
    if (accept(&L, "write")) {
      int32_t t, v;
      if (!value_ref(&L, &t) || !accept(&L, ",") || !value_ref(&L, &v)) { st = perr(&L, "write %T, %V"); break; }
      if ((st = grace_ir_write(ir, t, v)) != GRACE_OK) break;
      int64_t bumps;
      if (accept(&L, "bumps=")) {
        if (!integer(&L, &bumps) || bumps < 0) { st = perr(&L, "a count"); break; }
        ir->writes[ir->nwrite - 1].bumps = (int32_t)bumps;
      }
      continue;
    }
    if (!*L.s) { st = perr(&L, "'return'"); break; }
    if ((st = parse_inst(&L)) != GRACE_OK) break;
    skip_ws(&L);
    if (*L.s != '\n') { st = perr(&L, "end of line"); break; }
  }
  while (st == GRACE_OK) {
    int32_t v;
    skip_ws(&L);
    if (*L.s != '%') break;
    if (!value_ref(&L, &v)) { st = perr(&L, "an output %N"); break; }
    if ((st = grace_ir_output(ir, v)) != GRACE_OK) break;
    if (!accept(&L, ",")) break;
  }
  if (st == GRACE_OK && !accept(&L, "}")) {
    while (isspace((unsigned char)*L.s)) { if (*L.s == '\n') L.line++; L.s++; }
    if (!accept(&L, "}")) st = perr(&L, "'}'");
  }
  Lp->s = L.s;
  Lp->line = L.line;
  if (st != GRACE_OK) { grace_ir_free(ir); return st; }
  *out = ir;
  return GRACE_OK;
}

grace_status grace_ir_parse(grace_vm *vm, const char *text, grace_ir **out) {
  if (!vm) return GRACE_EARG;
  if (!text || !out) return vm_err(vm, GRACE_EARG, "parse: a NULL argument");
  *out = NULL;
  lexer L = {.s = text, .line = 1, .vm = vm};
  skip_lines(&L);
  grace_status st = parse_func(&L, out);
  if (st != GRACE_OK) return st;
  /* text can say anything: an input index past the inputs, a type inference would not give. Verified here, a
   * parsed program is as safe to run as one the builder made. */
  if ((st = grace_ir_verify(*out)) != GRACE_OK) {
    char msg[VM_ERRLEN];
    snprintf(msg, sizeof msg, "%s", vm->err);
    grace_ir_free(*out);
    *out = NULL;
    return vm_err(vm, GRACE_EARG, "parse: %s", msg);
  }
  return GRACE_OK;
}
