/* io_safetensors.c: the safetensors format (8-byte little-endian header length N, N bytes of JSON naming each
 * tensor's dtype, shape and [begin, end) byte range in the buffer that follows, then the buffer). The JSON is parsed
 * and written by Jansson (Debian libjansson-dev): its integers are 64-bit (no double rounding of offsets), it keeps
 * objects in file order and rejects duplicate keys. Every header is checked whole before any tensor is made: offsets
 * inside the buffer, ranges contiguous from 0 to the buffer's end without overlap (as the reference implementation
 * demands), sizes equal to what dtype and shape need, with overflow-checked products. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "io/io.h"

/* The reference implementation's limit: no real header comes near it, and it bounds what a lying N costs. */
#define ST_MAX_HEADER 100000000u

static const struct {
  const char *name;
  grace_dtype dt;
} st_dtypes[] = {
  {"F32", GRACE_FLOAT32}, {"F64", GRACE_FLOAT64}, {"F16", GRACE_FLOAT16}, {"BF16", GRACE_BFLOAT16},
  {"I32", GRACE_INT32},   {"I64", GRACE_INT64},   {"U8", GRACE_UINT8},    {"BOOL", GRACE_BOOL},
};

static const char *st_name(grace_dtype dt) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
    if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
  return NULL;
}

typedef struct st_entry {
  const char *name;
  grace_dtype dt;
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];
  uint64_t begin, end;
} st_entry;

static int st_int(json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
  *out = (uint64_t)json_integer_value(v);
  return 1;
}

/* One tensor's entry checked against the buffer of bufn bytes. */
static grace_status st_entry_parse(grace_vm *vm, const char *path, const char *name, json_t *v, uint64_t bufn,
                                   st_entry *e) {
  e->name = name;
  if (!json_is_object(v))
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the entry of '%s' is not an object", path, name);
  json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
  if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(off))
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the entry of '%s' lacks a string \"dtype\", an array \"shape\" "
                           "or an array \"data_offsets\"", path, name);
  size_t k = 0;
  while (k < sizeof st_dtypes / sizeof *st_dtypes && strcmp(st_dtypes[k].name, json_string_value(dt)) != 0) k++;
  if (k == sizeof st_dtypes / sizeof *st_dtypes)
    return grace_set_error(vm, GRACE_EDTYPE, "load: '%s': '%s' has dtype %s, which grace does not have (it reads F32, "
                           "F64, F16, BF16, I32, I64, U8, BOOL)", path, name, json_string_value(dt));
  e->dt = st_dtypes[k].dt;
  if (json_array_size(shape) > GRACE_MAX_DIMS)
    return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': '%s' has %zu dims, grace allows %d", path, name,
                           json_array_size(shape), GRACE_MAX_DIMS);
  e->ndim = (int)json_array_size(shape);
  for (int d = 0; d < e->ndim; d++) {
    uint64_t s;
    if (!st_int(json_array_get(shape, (size_t)d), &s) || s > (uint64_t)INT64_MAX)
      return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': '%s' has a shape entry that is not a non-negative integer",
                             path, name);
    e->sizes[d] = (int64_t)s;
  }
  uint64_t need;
  if (!io_nbytes(e->ndim, e->sizes, e->dt, &need))
    return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': the shape of '%s' has too many elements", path, name);
  if (json_array_size(off) != 2 || !st_int(json_array_get(off, 0), &e->begin) || !st_int(json_array_get(off, 1), &e->end))
    return grace_set_error(vm, GRACE_EARG, "load: '%s': data_offsets of '%s' are not two non-negative integers", path,
                           name);
  if (e->begin > e->end || e->end > bufn)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': data_offsets [%llu, %llu] of '%s' are outside the %llu-byte "
                           "buffer (the file is truncated or its header lies)", path, (unsigned long long)e->begin,
                           (unsigned long long)e->end, name, (unsigned long long)bufn);
  if (e->end - e->begin != need)
    return grace_set_error(vm, GRACE_ESHAPE, "load: '%s': '%s' spans %llu bytes, but %s of %d dims needs %llu", path,
                           name, (unsigned long long)(e->end - e->begin), json_string_value(dt), e->ndim,
                           (unsigned long long)need);
  return GRACE_OK;
}

static int by_offset(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The ranges, in offset order, must tile [0, bufn): a hole or an overlap means the header lies. */
static grace_status st_check_tiling(grace_vm *vm, const char *path, st_entry *es, int n, uint64_t bufn) {
  st_entry **order = io_alloc(vm, (size_t)n * sizeof *order);
  if (!order) return grace_set_error(vm, GRACE_ENOMEM, "load: out of host memory");
  for (int i = 0; i < n; i++) order[i] = &es[i];
  qsort(order, (size_t)n, sizeof *order, by_offset);
  uint64_t at = 0;
  grace_status st = GRACE_OK;
  for (int i = 0; i < n && st == GRACE_OK; i++) {
    if (order[i]->begin < at)
      st = grace_set_error(vm, GRACE_EARG, "load: '%s': the bytes of '%s' and '%s' overlap", path, order[i - 1]->name,
                           order[i]->name);
    else if (order[i]->begin > at)
      st = grace_set_error(vm, GRACE_EARG, "load: '%s': bytes [%llu, %llu) of the buffer belong to no tensor", path,
                           (unsigned long long)at, (unsigned long long)order[i]->begin);
    at = order[i]->end > at ? order[i]->end : at;
  }
  if (st == GRACE_OK && at != bufn)
    st = grace_set_error(vm, GRACE_EARG, "load: '%s': the tensors end at byte %llu of a %llu-byte buffer", path,
                         (unsigned long long)at, (unsigned long long)bufn);
  io_free(vm, order, (size_t)n * sizeof *order);
  return st;
}

static grace_status st_metadata(grace_vm *vm, const char *path, json_t *meta, grace_tensor_file *f) {
  if (!json_is_object(meta))
    return grace_set_error(vm, GRACE_EARG, "load: '%s': \"__metadata__\" is not an object", path);
  const char *k;
  json_t *v;
  json_object_foreach(meta, k, v) {
    if (!json_is_string(v))
      return grace_set_error(vm, GRACE_EARG, "load: '%s': __metadata__ value of '%s' is not a string", path, k);
    grace_status st = io_file_meta(vm, f, k, json_string_value(v));
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

/* The header, checked whole, then the tensors, each copied out of the mapping. */
static grace_status st_load_json(grace_vm *vm, const char *path, json_t *root, const unsigned char *buf, uint64_t bufn,
                                 grace_device dev, grace_tensor_file *f) {
  if (!json_is_object(root)) return grace_set_error(vm, GRACE_EARG, "load: '%s': the header is not a JSON object", path);
  size_t cap = json_object_size(root);
  st_entry *es = io_alloc(vm, (cap ? cap : 1) * sizeof *es);
  if (!es) return grace_set_error(vm, GRACE_ENOMEM, "load: out of host memory");
  int n = 0;
  grace_status st = GRACE_OK;
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (strcmp(k, "__metadata__") == 0) st = st_metadata(vm, path, v, f);
    else st = st_entry_parse(vm, path, k, v, bufn, &es[n++]);
    if (st != GRACE_OK) break;
  }
  if (st == GRACE_OK) st = st_check_tiling(vm, path, es, n, bufn);
  for (int i = 0; i < n && st == GRACE_OK; i++) {
    grace_tensor *t = NULL;
    st = io_tensor(vm, es[i].dt, es[i].ndim, es[i].sizes, buf + es[i].begin, 0, dev, &t);
    if (st == GRACE_OK) st = io_file_add(vm, f, es[i].name, strlen(es[i].name), t);
  }
  io_free(vm, es, (cap ? cap : 1) * sizeof *es);
  return st;
}

grace_status io_load_safetensors(grace_vm *vm, const char *path, const io_map *m, grace_device dev, grace_tensor_file *f) {
  if (m->n < 8)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': %zu bytes is too short for a safetensors file (the header "
                           "length alone takes 8)", path, m->n);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = hn << 8 | m->p[i];
  if (hn > m->n - 8)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the header length %llu is past the end of the %zu-byte file "
                           "(truncated, or not a safetensors file)", path, (unsigned long long)hn, m->n);
  if (hn > ST_MAX_HEADER)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a header of %llu bytes is over safetensors' limit of %u", path,
                           (unsigned long long)hn, ST_MAX_HEADER);
  json_error_t err;
  json_t *root = json_loadb((const char *)m->p + 8, (size_t)hn, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the header is not valid JSON: %s (header line %d, column %d)",
                           path, err.text, err.line, err.column);
  grace_status st = st_load_json(vm, path, root, m->p + 8 + hn, m->n - 8 - hn, dev, f);
  json_decref(root);
  return st;
}

/* ---- writing ---- */
static json_t *st_entry_json(const grace_tensor *t, uint64_t begin, uint64_t end) {
  json_t *o = json_object(), *shape = json_array(), *off = json_array();
  int bad = !o || !shape || !off;
  for (int d = 0; !bad && d < grace_tensor_ndim(t); d++)
    bad = json_array_append_new(shape, json_integer(grace_tensor_sizes(t)[d])) != 0;
  bad = bad || json_array_append_new(off, json_integer((json_int_t)begin)) != 0 ||
        json_array_append_new(off, json_integer((json_int_t)end)) != 0;
  /* set_new takes its value even on failure: build the object in the reference implementation's key order */
  bad = bad || json_object_set_new(o, "dtype", json_string(st_name(grace_tensor_dtype(t)))) != 0;
  if (!bad) {
    bad = json_object_set_new(o, "shape", shape) != 0;
    shape = NULL;
  }
  if (!bad) {
    bad = json_object_set_new(o, "data_offsets", off) != 0;
    off = NULL;
  }
  json_decref(shape);
  json_decref(off);
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* The header as compact JSON: "__metadata__" first, then the tensors in the order given, laid out back to back. */
static grace_status st_header(grace_vm *vm, int n, const char *const *names, grace_tensor *const *ts, int nmeta,
                              const char *const *keys, const char *const *values, char **out) {
  json_t *root = json_object();
  if (!root) return grace_set_error(vm, GRACE_ENOMEM, "save: out of host memory");
  grace_status st = GRACE_OK;
  if (nmeta) {
    json_t *meta = json_object();
    for (int i = 0; meta && i < nmeta && st == GRACE_OK; i++) {
      if (!keys[i] || !values[i] || json_object_set_new(meta, keys[i], json_string(values[i])) != 0)
        st = grace_set_error(vm, GRACE_EARG, "save: metadata entry %d is not a pair of UTF-8 strings", i);
    }
    if (!meta || json_object_set_new(root, "__metadata__", meta) != 0)
      st = grace_set_error(vm, GRACE_ENOMEM, "save: out of host memory");
  }
  uint64_t at = 0;
  for (int i = 0; i < n && st == GRACE_OK; i++) {
    uint64_t nb = 0;
    if (strcmp(names[i], "__metadata__") == 0)
      st = grace_set_error(vm, GRACE_EARG, "save: '__metadata__' is reserved by safetensors; rename that tensor");
    else if (!io_nbytes(grace_tensor_ndim(ts[i]), grace_tensor_sizes(ts[i]), grace_tensor_dtype(ts[i]), &nb) ||
             __builtin_add_overflow(at, nb, &nb))
      st = grace_set_error(vm, GRACE_EARG, "save: the tensors are too large together");
    else if (json_object_set_new(root, names[i], st_entry_json(ts[i], at, nb)) != 0)
      st = grace_set_error(vm, GRACE_EARG, "save: tensor name '%s' is not valid UTF-8 (or out of memory)", names[i]);
    at = nb;
  }
  *out = st == GRACE_OK ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (st == GRACE_OK && !*out) st = grace_set_error(vm, GRACE_ENOMEM, "save: out of host memory");
  return st;
}

grace_status io_save_safetensors(grace_vm *vm, io_writer *w, int n, const char *const *names, grace_tensor *const *ts,
                                 int nmeta, const char *const *keys, const char *const *values) {
  char *hdr = NULL;
  grace_status st = st_header(vm, n, names, ts, nmeta, keys, values, &hdr);
  if (st != GRACE_OK) return st;
  size_t len = strlen(hdr), pad = (8 - len % 8) % 8;   /* the buffer starts 8-aligned in the file */
  uint64_t hn = len + pad;
  unsigned char le[8];
  for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hn >> (8 * i));
  io_write(w, le, 8);
  io_write(w, hdr, len);
  io_write(w, "       ", pad);
  json_malloc_t jm;
  json_free_t jf;
  json_get_alloc_funcs(&jm, &jf);   /* json_dumps allocated it with Jansson's allocator */
  jf(hdr);
  for (int i = 0; i < n && st == GRACE_OK && !w->err; i++) {
    const void *p;
    void *buf;
    size_t nb;
    st = io_tensor_bytes(vm, ts[i], &p, &buf, &nb);
    if (st != GRACE_OK) break;
    io_write(w, p, nb);
    io_free(vm, buf, nb);
  }
  return st;
}
