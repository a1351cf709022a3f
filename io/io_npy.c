/* io_npy.c: NumPy's .npy format (numpy/lib/format.py): "\x93NUMPY", a version byte pair, the header length (2 bytes
 * in version 1, 4 in versions 2 and 3), a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}
 * padded with spaces to a multiple of 64 and ended by a newline, then the elements. The dict is a Python literal, not
 * JSON, so it is read here by a small parser that accepts exactly the three keys and value forms NumPy writes, and
 * refuses anything else by name. Big-endian elements ('>f4') are byte-swapped on load; Fortran-order arrays are
 * loaded as their transpose and made row-major. NumPy has no bfloat16: saving one is refused (cast to float32). */
#include <stdio.h>
#include <string.h>
#include "io/io.h"

static const struct {
  const char *code;   /* the descr without its byte-order character */
  grace_dtype dt;
} npy_dtypes[] = {
  {"f4", GRACE_FLOAT32}, {"f8", GRACE_FLOAT64}, {"f2", GRACE_FLOAT16}, {"i4", GRACE_INT32},
  {"i8", GRACE_INT64},   {"u1", GRACE_UINT8},   {"b1", GRACE_BOOL},
};

typedef struct npy_parser {
  const char *s, *end;
} npy_parser;

static void ws(npy_parser *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

static int eat(npy_parser *p, char c) {
  ws(p);
  if (p->s < p->end && *p->s == c) {
    p->s++;
    return 1;
  }
  return 0;
}

/* A quoted string (' or ", no escapes: NumPy's keys and descrs have none) into out (cap bytes). */
static int str(npy_parser *p, char *out, size_t cap) {
  ws(p);
  if (p->s >= p->end || (*p->s != '\'' && *p->s != '"')) return 0;
  char q = *p->s++;
  size_t n = 0;
  while (p->s < p->end && *p->s != q) {
    if (*p->s == '\\' || n + 1 >= cap) return 0;
    out[n++] = *p->s++;
  }
  if (p->s >= p->end) return 0;
  p->s++;
  out[n] = 0;
  return 1;
}

static int word(npy_parser *p, const char *w) {
  ws(p);
  size_t n = strlen(w);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n) != 0) return 0;
  p->s += n;
  return 1;
}

/* (d0, d1, ...): a tuple of non-negative integers, maybe with a trailing comma (and "L" suffixes of Python 2). */
static int shape(npy_parser *p, int *ndim, int64_t *sizes) {
  if (!eat(p, '(')) return 0;
  *ndim = 0;
  for (;;) {
    if (eat(p, ')')) return 1;
    ws(p);
    if (p->s >= p->end || *p->s < '0' || *p->s > '9' || *ndim == GRACE_MAX_DIMS) return 0;
    int64_t v = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p->s - '0', &v)) return 0;
      p->s++;
    }
    if (p->s < p->end && *p->s == 'L') p->s++;
    sizes[(*ndim)++] = v;
    if (!eat(p, ',')) return eat(p, ')');
  }
}

typedef struct npy_info {
  grace_dtype dt;
  int swap, fortran, ndim;
  int64_t sizes[GRACE_MAX_DIMS];
} npy_info;

static grace_status npy_descr(grace_vm *vm, const char *what, const char *d, npy_info *h) {
  /* '|' (no order: one byte), '<' little, '=' native (little: io.h refuses big-endian hosts), '>' big */
  if (d[0] == '<' || d[0] == '|' || d[0] == '=' || d[0] == '>') {
    h->swap = d[0] == '>';
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof *npy_dtypes; i++) {
      if (strcmp(d + 1, npy_dtypes[i].code) == 0) {
        h->dt = npy_dtypes[i].dt;
        return GRACE_OK;
      }
    }
  }
  return grace_set_error(vm, GRACE_EDTYPE, "load: '%s': NumPy dtype '%s' is not one grace has (it reads float32, "
                         "float64, float16, int32, int64, uint8, bool)", what, d);
}

static grace_status npy_dict(grace_vm *vm, const char *what, const char *s, size_t n, npy_info *h) {
  npy_parser p = {s, s + n};
  int seen = 0;   /* bits: descr, fortran_order, shape */
  char key[32], descr[32];
  if (!eat(&p, '{')) goto bad;
  while (!eat(&p, '}')) {
    if (!str(&p, key, sizeof key) || !eat(&p, ':')) goto bad;
    if (strcmp(key, "descr") == 0) {
      if (!str(&p, descr, sizeof descr)) {
        return grace_set_error(vm, GRACE_EDTYPE, "load: '%s': the array has a structured or unknown dtype (its descr is "
                               "not a plain type string); grace reads plain numeric arrays", what);
      }
      grace_status st = npy_descr(vm, what, descr, h);
      if (st != GRACE_OK) return st;
      seen |= 1;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (word(&p, "True")) h->fortran = 1;
      else if (word(&p, "False")) h->fortran = 0;
      else goto bad;
      seen |= 2;
    } else if (strcmp(key, "shape") == 0) {
      if (!shape(&p, &h->ndim, h->sizes))
        return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': the shape is not a tuple of at most %d non-negative "
                               "integers", what, GRACE_MAX_DIMS);
      seen |= 4;
    } else {
      return grace_set_error(vm, GRACE_EARG, "load: '%s': unexpected key '%s' in the .npy header", what, key);
    }
    if (!eat(&p, ',')) {
      if (!eat(&p, '}')) goto bad;
      break;
    }
  }
  ws(&p);
  if (p.s != p.end || seen != 7) goto bad;
  return GRACE_OK;
bad:
  return grace_set_error(vm, GRACE_EARG, "load: '%s': the .npy header is not the dict NumPy writes ('descr', "
                         "'fortran_order' and 'shape', once each)", what);
}

/* A Fortran-order array's bytes are the row-major bytes of its transpose: load that, permute back, copy. */
static grace_status npy_fortran(grace_vm *vm, const npy_info *h, const unsigned char *data, grace_device dev,
                                grace_tensor **out) {
  int64_t rev[GRACE_MAX_DIMS];
  grace_attrs a = {0};
  for (int d = 0; d < h->ndim; d++) {
    rev[d] = h->sizes[h->ndim - 1 - d];
    a.dims[d] = h->ndim - 1 - d;
  }
  a.ndims = h->ndim;
  grace_tensor *t = NULL, *v = NULL, *c = NULL;
  grace_status st = io_tensor(vm, h->dt, h->ndim, rev, data, h->swap, GRACE_CPU, &t);
  if (st == GRACE_OK && h->ndim > 1) st = grace_run(vm, GRACE_OP_PERMUTE, 1, &t, &a, 1, &v);
  if (st == GRACE_OK && v) st = grace_run(vm, GRACE_OP_CLONE, 1, &v, NULL, 1, &c);
  grace_tensor_release(v);
  if (c) {
    grace_tensor_release(t);
    t = c;
  }
  if (st == GRACE_OK && dev != GRACE_CPU) {
    grace_attrs m = {0};
    m.device = dev;
    c = NULL;
    st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &t, &m, 1, &c);
    grace_tensor_release(t);
    t = c;
  }
  if (st != GRACE_OK) {
    grace_tensor_release(t);
    return st;
  }
  *out = t;
  return GRACE_OK;
}

grace_status io_npy_parse(grace_vm *vm, const char *what, const unsigned char *p, size_t n, grace_device dev,
                          grace_tensor **out) {
  *out = NULL;
  if (n < 10 || memcmp(p, "\x93NUMPY", 6) != 0)
    return grace_set_error(vm, GRACE_EARG, "load: '%s' is not a .npy file (no \\x93NUMPY magic)", what);
  size_t start, hlen;
  if (p[6] == 1) {
    hlen = (size_t)p[8] | (size_t)p[9] << 8;
    start = 10;
  } else if ((p[6] == 2 || p[6] == 3) && n >= 12) {
    hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    start = 12;
  } else {
    return grace_set_error(vm, GRACE_EARG, "load: '%s': .npy format version %d.%d is not one grace reads (1, 2, 3)",
                           what, p[6], p[7]);
  }
  if (hlen > n - start)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the header length %zu is past the end of the %zu-byte file",
                           what, hlen, n);
  npy_info h = {0};
  grace_status st = npy_dict(vm, what, (const char *)p + start, hlen, &h);
  if (st != GRACE_OK) return st;
  uint64_t need;
  if (!io_nbytes(h.ndim, h.sizes, h.dt, &need))
    return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': the shape has too many elements", what);
  size_t have = n - start - hlen;
  if (need > have)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the shape needs %llu bytes of data, the file holds %zu "
                           "(truncated?)", what, (unsigned long long)need, have);
  if (h.fortran) return npy_fortran(vm, &h, p + start + hlen, dev, out);
  return io_tensor(vm, h.dt, h.ndim, h.sizes, p + start + hlen, h.swap, dev, out);
}

grace_status io_npy_header(grace_vm *vm, const char *what, const grace_tensor *t, char *buf, size_t cap, size_t *len) {
  grace_dtype dt = grace_tensor_dtype(t);
  const char *code = NULL;
  for (size_t i = 0; i < sizeof npy_dtypes / sizeof *npy_dtypes; i++)
    if (npy_dtypes[i].dt == dt) code = npy_dtypes[i].code;
  if (!code)
    return grace_set_error(vm, GRACE_EDTYPE, "save: '%s': NumPy has no %s; cast it first (x:float()) or save to "
                           ".safetensors", what, grace_dtype_name(dt));
  /* exactly numpy.lib.format's text, so a file grace writes is byte for byte the one np.save would */
  char dict[320];
  int k = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                   code[1] == '1' ? '|' : '<', code);
  int nd = grace_tensor_ndim(t);
  for (int d = 0; d < nd; d++)
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%s%lld", d ? ", " : "", (long long)grace_tensor_sizes(t)[d]);
  k += snprintf(dict + k, sizeof dict - (size_t)k, "%s), }", nd == 1 ? "," : "");
  if (nd > 0) {   /* NumPy >= 1.23 leaves room for the first dim to grow to 21 digits (GROWTH_AXIS_MAX_DIGITS) */
    int digits = snprintf(NULL, 0, "%lld", (long long)grace_tensor_sizes(t)[0]);
    k += snprintf(dict + k, sizeof dict - (size_t)k, "%*s", 21 - digits, "");
  }
  size_t hl = (size_t)k + 1, pad = 64 - (10 + hl) % 64;   /* NumPy pads 64 when already aligned too */
  if (10 + hl + pad > cap) return grace_set_error(vm, GRACE_EINTERNAL, "save: .npy header buffer too small");
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)((hl + pad) & 0xff);
  buf[9] = (char)((hl + pad) >> 8);
  memcpy(buf + 10, dict, (size_t)k);
  memset(buf + 10 + k, ' ', pad);
  buf[10 + hl + pad - 1] = '\n';
  *len = 10 + hl + pad;
  return GRACE_OK;
}
