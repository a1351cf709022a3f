/* lgrace_print.c: tostring(x), following PyTorch's torch/_tensor_str.py (print options precision, threshold,
 * edgeitems, linewidth, sci_mode, set by grace.set_printoptions, defaults 4, 1000, 3, 80, automatic) so that
 * output reads like PyTorch's: one format per tensor (fixed, integer-valued "1.", or scientific), right-aligned,
 * nested brackets, rows wrapped at the line width, "..." summaries, and the dtype/device/size suffixes. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

/* The print options are the process's, as PyTorch's are global. */
typedef struct printopts {
  int precision, edge, linewidth, sci;   /* sci: 1 always, 0 never, -1 as the values ask */
  int64_t threshold;
} printopts;
static const printopts opts_default = {4, 3, 80, -1, 1000};
static printopts opts = {4, 3, 80, -1, 1000};
#define EDGE (opts.edge)
#define THRESHOLD (opts.threshold)
#define LINEWIDTH (opts.linewidth)

typedef struct printer {
  grace_vm *vm;
  const grace_tensor *t;
  int nd;
  const int64_t *sizes;
  int kind;          /* 0 float, 1 integer, 2 bool */
  int summarize;
  int64_t idx[GRACE_MAX_DIMS];
  /* statistics over the shown elements (PyTorch's _Formatter) */
  int have_nz, nonint, w_sci, w_int, w_fix, w_plain;
  double nzmin, nzmax;
  /* the chosen format */
  int sci, int_mode, width;
} printer;

static int summarized(const printer *p, int d) { return p->summarize && p->sizes[d] > 2 * EDGE; }

static double get_f(printer *p) {
  double v = 0;
  grace_tensor_get(p->vm, p->t, p->idx, &v);
  return v;
}

static int64_t get_i(printer *p) {
  int64_t v = 0;
  grace_tensor_get_int(p->vm, p->t, p->idx, &v);
  return v;
}

static int imax(int a, int b) { return a > b ? a : b; }

static void stat_elem(printer *p) {
  if (p->kind == 2) { p->w_plain = imax(p->w_plain, get_i(p) ? 4 : 5); return; }
  if (p->kind == 1) { p->w_plain = imax(p->w_plain, snprintf(NULL, 0, "%lld", (long long)get_i(p))); return; }
  double v = get_f(p);
  if (!isfinite(v) || v == 0) return;
  double a = fabs(v);
  if (!p->have_nz || a < p->nzmin) p->nzmin = a;
  if (!p->have_nz || a > p->nzmax) p->nzmax = a;
  p->have_nz = 1;
  if (v != ceil(v)) p->nonint = 1;
  p->w_sci = imax(p->w_sci, snprintf(NULL, 0, "%.*e", opts.precision, v));
  p->w_int = imax(p->w_int, snprintf(NULL, 0, "%.0f", v) + 1);
  p->w_fix = imax(p->w_fix, snprintf(NULL, 0, "%.*f", opts.precision, v));
}

/* visits the elements that will be shown: all of them, or EDGE from each end of long dims */
static void stat_visit(printer *p, int d) {
  if (d == p->nd) { stat_elem(p); return; }
  int64_t n = p->sizes[d];
  int sum = summarized(p, d);
  for (int64_t i = 0; i < n; i++) {
    if (sum && i == EDGE) i = n - EDGE;
    p->idx[d] = i;
    stat_visit(p, d + 1);
  }
}

static void choose_auto(printer *p);

/* PyTorch's _Formatter: the width is the automatic format's even where sci_mode then overrides the format */
static void choose_format(printer *p) {
  choose_auto(p);
  if (p->kind == 0 && opts.sci >= 0) p->sci = opts.sci;
}

static void choose_auto(printer *p) {
  p->sci = 0;
  p->int_mode = 1;
  p->width = 1;
  if (p->kind != 0) { p->width = imax(1, p->w_plain); return; }
  if (!p->have_nz) return;
  double ratio = p->nzmax / p->nzmin;
  if (!p->nonint) {
    if (ratio > 1000.0 || p->nzmax > 1.0e8) { p->sci = 1; p->width = imax(1, p->w_sci); }
    else p->width = imax(1, p->w_int);
  } else {
    p->int_mode = 0;
    if (ratio > 1000.0 || p->nzmax > 1.0e8 || p->nzmin < 1.0e-4) { p->sci = 1; p->width = imax(1, p->w_sci); }
    else p->width = imax(1, p->w_fix);
  }
}

/* the current element, right-aligned to the common width */
static void add_elem(printer *p, luaL_Buffer *b) {
  char s[96];
  int n;
  if (p->kind == 2) n = snprintf(s, sizeof s, "%s", get_i(p) ? "true" : "false");
  else if (p->kind == 1) n = snprintf(s, sizeof s, "%lld", (long long)get_i(p));
  else {
    double v = get_f(p);
    if (isnan(v)) n = snprintf(s, sizeof s, "nan");
    else if (isinf(v)) n = snprintf(s, sizeof s, v > 0 ? "inf" : "-inf");
    else if (p->sci) n = snprintf(s, sizeof s, "%.*e", opts.precision, v);
    else if (p->int_mode) n = snprintf(s, sizeof s, "%.0f.", v);
    else n = snprintf(s, sizeof s, "%.*f", opts.precision, v);
  }
  if (n < 0) n = 0;
  if (n >= (int)sizeof s) n = (int)sizeof s - 1;
  for (int k = n; k < p->width; k++) luaL_addchar(b, ' ');
  luaL_addlstring(b, s, (size_t)n);
}

static void add_spaces(luaL_Buffer *b, int n) {
  for (int k = 0; k < n; k++) luaL_addchar(b, ' ');
}

static void add_vector(printer *p, luaL_Buffer *b, int indent) {
  int d = p->nd - 1;
  int64_t n = p->sizes[d];
  int sum = summarized(p, d);
  int per_line = imax(1, (LINEWIDTH - indent) / (p->width + 2));
  int k = 0;
  luaL_addchar(b, '[');
  for (int64_t i = 0; i < n; i++, k++) {
    if (k > 0) {
      if (k % per_line == 0) { luaL_addstring(b, ",\n"); add_spaces(b, indent + 1); }
      else luaL_addstring(b, ", ");
    }
    if (sum && i == EDGE) {
      luaL_addstring(b, " ...");
      i = n - EDGE - 1;
      continue;
    }
    p->idx[d] = i;
    add_elem(p, b);
  }
  luaL_addchar(b, ']');
}

static void add_tensor(printer *p, luaL_Buffer *b, int d, int indent) {
  if (d == p->nd - 1) { add_vector(p, b, indent); return; }
  int64_t n = p->sizes[d];
  int sum = summarized(p, d);
  luaL_addchar(b, '[');
  for (int64_t i = 0, k = 0; i < n; i++, k++) {
    if (k > 0) {
      luaL_addchar(b, ',');
      for (int nl = 0; nl < p->nd - d - 1; nl++) luaL_addchar(b, '\n');
      add_spaces(b, indent + 1);
    }
    if (sum && i == EDGE) {
      luaL_addstring(b, "...");
      i = n - EDGE - 1;
      continue;
    }
    p->idx[d] = i;
    add_tensor(p, b, d + 1, indent + 1);
  }
  luaL_addchar(b, ']');
}

/* PyTorch's _add_suffixes: ", suffix", or a new line when it would pass the line width. *last starts as
 * Python's len(s) - s.rfind("\n") + 1 (two more than the last line's length) and is then kept as it does. */
static void add_suffix(luaL_Buffer *b, const char *suffix, int indent, long *last) {
  long slen = (long)strlen(suffix);
  if (*last < 0) {
    const char *s = luaL_buffaddr(b);
    size_t len = luaL_bufflen(b), nl = len;
    while (nl > 0 && s[nl - 1] != '\n') nl--;
    *last = (long)(len - nl) + 2;
  }
  if (*last + slen + 2 > LINEWIDTH) {
    luaL_addstring(b, ",\n");
    add_spaces(b, indent);
    *last = indent + slen;
  } else {
    luaL_addstring(b, ", ");
    *last += slen + 2;
  }
  luaL_addstring(b, suffix);
}

int lg_tostring(lua_State *L) {
  grace_tensor **slot = luaL_checkudata(L, 1, LG_TENSOR);
  if (!*slot) { lua_pushliteral(L, "tensor(<closed>)"); return 1; }
  lg_ctx *c = lg_begin(L);
  grace_tensor *t = *slot;
  if (grace_tensor_device(t) != GRACE_CPU) {
    grace_attrs a = {0};
    a.device = GRACE_CPU;
    t = lg_run_tmp(L, c, GRACE_OP_TO_DEVICE, 1, &t, &a);
  }
  grace_dtype dt = grace_tensor_dtype(t);
  printer p = {0};
  p.vm = c->vm;
  p.t = t;
  p.nd = grace_tensor_ndim(t);
  p.sizes = grace_tensor_sizes(t);
  p.kind = grace_dtype_is_float(dt) ? 0 : dt == GRACE_BOOL ? 2 : 1;
  int64_t numel = grace_tensor_numel(t);
  p.summarize = numel > THRESHOLD;

  const int indent = 7;   /* strlen("tensor(") */
  char suffix[3][96];
  int ns = 0;
  if (grace_tensor_device(*slot) != GRACE_CPU)
    snprintf(suffix[ns++], sizeof suffix[0], "device='%s'", grace_device_name(grace_tensor_device(*slot)));
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "tensor(");
  if (numel == 0) {
    luaL_addstring(&b, "[]");
    if (p.nd != 1) {
      size_t k = (size_t)snprintf(suffix[ns], sizeof suffix[0], "size=(");
      for (int d = 0; d < p.nd && k < sizeof suffix[0]; d++)
        k += (size_t)snprintf(suffix[ns] + k, sizeof suffix[0] - k, d ? ", %lld" : "%lld", (long long)p.sizes[d]);
      if (k < sizeof suffix[0]) snprintf(suffix[ns] + k, sizeof suffix[0] - k, p.nd == 1 ? ",)" : ")");
      ns++;
    }
    if (dt != GRACE_FLOAT32) snprintf(suffix[ns++], sizeof suffix[0], "dtype=%s", grace_dtype_name(dt));
  } else {
    stat_visit(&p, 0);
    choose_format(&p);
    if (p.nd == 0) add_elem(&p, &b);
    else add_tensor(&p, &b, 0, indent);
    if (dt != GRACE_FLOAT32 && dt != GRACE_INT64 && dt != GRACE_BOOL)
      snprintf(suffix[ns++], sizeof suffix[0], "dtype=%s", grace_dtype_name(dt));
  }
  long last = -1;
  for (int i = 0; i < ns; i++) add_suffix(&b, suffix[i], indent, &last);
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  lg_drop(c);
  return 1;
}

/* An option of grace.set_printoptions: a non-negative integer (math.huge: no limit) in *out if the field is set. */
static void opt_count(lua_State *L, const char *field, int64_t max, int64_t *out) {
  lua_getfield(L, 1, field);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER || lua_tonumber(L, -1) < 0 || lua_tonumber(L, -1) != floor(lua_tonumber(L, -1)))
      luaL_error(L, "set_printoptions: %s must be a non-negative integer, got %s", field, luaL_tolstring(L, -1, NULL));
    double v = lua_tonumber(L, -1);
    *out = v >= (double)max ? max : (int64_t)v;
  }
  lua_pop(L, 1);
}

/* grace.set_printoptions{precision=, threshold=, edgeitems=, linewidth=, sci_mode=, profile=}: as
 * torch.set_printoptions; profile ("default", "short", "full") sets the others first, the fields not given
 * keep their values, except sci_mode, which (as in PyTorch) is automatic unless given. */
int lg_set_printoptions(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const known[] = {"precision", "threshold", "edgeitems", "linewidth", "sci_mode", "profile", NULL};
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    int ok = 0;
    for (int i = 0; known[i]; i++) ok |= lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), known[i]);
    if (!ok)
      return luaL_error(L, "set_printoptions: unknown option '%s' (precision, threshold, edgeitems, linewidth, "
                        "sci_mode, profile)", luaL_tolstring(L, -2, NULL));
    lua_pop(L, 1);
  }
  printopts o = opts;
  lua_getfield(L, 1, "profile");
  if (!lua_isnil(L, -1)) {
    const char *pr = lua_tostring(L, -1);
    o = opts_default;
    if (pr && !strcmp(pr, "short")) { o.precision = 2; o.edge = 2; }
    else if (pr && !strcmp(pr, "full")) o.threshold = INT64_MAX;
    else if (!pr || strcmp(pr, "default"))
      return luaL_error(L, "set_printoptions: profile must be \"default\", \"short\" or \"full\"");
  }
  lua_pop(L, 1);
  int64_t v = o.precision;
  opt_count(L, "precision", 30, &v);
  o.precision = (int)v;
  opt_count(L, "threshold", INT64_MAX, &o.threshold);
  v = o.edge;
  opt_count(L, "edgeitems", INT32_MAX / 4, &v);
  o.edge = (int)v;
  v = o.linewidth;
  opt_count(L, "linewidth", INT32_MAX / 4, &v);
  o.linewidth = (int)v;
  lua_getfield(L, 1, "sci_mode");   /* as PyTorch, every call sets it: not given is automatic */
  o.sci = -1;
  if (lua_isboolean(L, -1)) o.sci = lua_toboolean(L, -1);
  else if (!lua_isnil(L, -1)) return luaL_error(L, "set_printoptions: sci_mode must be a boolean or nil");
  lua_pop(L, 1);
  opts = o;
  return 0;
}
