/* io_file.c: the public face of io/ (grace_load_file, grace_save_file, grace_tensor_file_free) and what the formats
 * share: the read-only mapping of a file being loaded, tensors from and to little-endian row-major bytes, the table
 * of a loaded file's tensors, and the writer that renames a finished temporary file over the destination. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/io.h"

void *io_alloc(grace_vm *vm, size_t n) { return grace_realloc(vm, NULL, 0, n ? n : 1); }
void io_free(grace_vm *vm, void *p, size_t n) {
  if (p) grace_realloc(vm, p, n ? n : 1, 0);
}

void *io_alloc_data(grace_vm *vm, const char *op, size_t n) {
  size_t cap = grace_memory_limit(vm);
  if (cap && n > cap) {
    grace_set_error(vm, GRACE_ENOMEM, "%s: working memory of %zu bytes is past the memory limit of %zu bytes", op, n, cap);
    return NULL;
  }
  void *p = io_alloc(vm, n);
  if (!p) grace_set_error(vm, GRACE_ENOMEM, "%s: out of host memory for %zu bytes of working memory", op, n);
  return p;
}

static char *io_strndup(grace_vm *vm, const char *s, size_t n) {
  char *d = io_alloc(vm, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

/* ---- mapping ---- */
grace_status io_map_open(grace_vm *vm, const char *path, io_map *m) {
  *m = (io_map){0};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return grace_set_error(vm, GRACE_EARG, "load: cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    close(fd);
    return grace_set_error(vm, GRACE_EARG, "load: '%s' is not a regular file%s%s", path, e ? ": " : "",
                           e ? strerror(e) : "");
  }
#if defined(__SANITIZE_ADDRESS__)
  /* Under AddressSanitizer the file is read into a malloc'd buffer of exactly its size instead: ASan does not watch
   * mapped pages (a read past the end lands in the zero-filled rest of the last page), but it does catch any read
   * past a heap block, so the sanitizer build checks the loaders' bounds byte for byte. */
  if (st.st_size > 0) {
    unsigned char *b = malloc((size_t)st.st_size);
    size_t got = 0;
    while (b && got < (size_t)st.st_size) {
      ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (!b || got != (size_t)st.st_size) {
      free(b);
      close(fd);
      return grace_set_error(vm, GRACE_EARG, "load: cannot read '%s'", path);
    }
    m->p = b;
    m->n = got;
    m->heap = 1;
  }
#else
  if (st.st_size > 0) {
    /* MAP_PRIVATE and PROT_READ: the copies read the pages straight from the page cache, no second buffer. A file
     * that shrinks under us would fault (SIGBUS) as any mmap reader would; grace does not guard against that. */
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return grace_set_error(vm, e == ENOMEM ? GRACE_ENOMEM : GRACE_EARG, "load: cannot map '%s': %s", path,
                             strerror(e));
    }
    madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);   /* read-ahead: every tensor is read once, in order */
    m->p = p;
    m->n = (size_t)st.st_size;
  }
#endif
  close(fd);   /* the mapping holds the file */
  return GRACE_OK;
}

void io_map_close(io_map *m) {
  if (m->heap) free((void *)m->p);
  else if (m->p) munmap((void *)m->p, m->n);
  *m = (io_map){0};
}

/* ---- tensors and bytes ---- */
int io_nbytes(int ndim, const int64_t *sizes, grace_dtype dt, uint64_t *out) {
  uint64_t n = grace_dtype_size(dt);
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0 || __builtin_mul_overflow(n, (uint64_t)sizes[d], &n)) return 0;
  }
  if (n > (UINT64_C(1) << 62)) return 0;
  *out = n;
  return 1;
}

grace_status io_tensor(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes, const unsigned char *p, int swap,
                       grace_device dev, grace_tensor **out) {
  *out = NULL;
  grace_tensor *t = NULL;
  grace_status st = grace_tensor_empty(vm, dt, GRACE_CPU, ndim, sizes, &t);
  if (st != GRACE_OK) return st;
  unsigned char *d = grace_tensor_data(t);
  size_t es = grace_dtype_size(dt), n = (size_t)grace_tensor_numel(t);
  if (n) memcpy(d, p, n * es);   /* memcpy: p need not be aligned (npz members, safetensors offsets) */
  if (swap && es > 1) {
    for (size_t i = 0; i < n; i++) {
      unsigned char *e = d + i * es;
      for (size_t a = 0, b = es - 1; a < b; a++, b--) {
        unsigned char c = e[a];
        e[a] = e[b];
        e[b] = c;
      }
    }
  }
  if (dt == GRACE_BOOL) {   /* kernels assume 0/1 bytes */
    for (size_t i = 0; i < n; i++) d[i] = d[i] != 0;
  }
  if (dev != GRACE_CPU) {
    grace_attrs a = {0};
    a.device = dev;
    grace_tensor *moved = NULL;
    st = grace_run(vm, GRACE_OP_TO_DEVICE, 1, &t, &a, 1, &moved);
    grace_tensor_release(t);
    t = moved;
    if (st != GRACE_OK) return st;
  }
  *out = t;
  return GRACE_OK;
}

grace_status io_tensor_bytes(grace_vm *vm, grace_tensor *t, const void **p, void **buf, size_t *n) {
  *p = NULL;
  *buf = NULL;
  uint64_t nb = 0;
  if (!io_nbytes(grace_tensor_ndim(t), grace_tensor_sizes(t), grace_tensor_dtype(t), &nb) || nb > SIZE_MAX)
    return grace_set_error(vm, GRACE_EARG, "save: tensor too large");
  *n = (size_t)nb;
  if (grace_tensor_device(t) == GRACE_CPU && grace_tensor_is_contiguous(t)) {
    *p = grace_tensor_data(t);
    return GRACE_OK;
  }
  void *b = io_alloc_data(vm, "save", *n);   /* an expanded view is copied to its full size */
  if (!b) return GRACE_ENOMEM;
  grace_status st = grace_tensor_read(vm, t, grace_tensor_dtype(t), b);
  if (st != GRACE_OK) {
    io_free(vm, b, *n);
    return st;
  }
  *p = *buf = b;
  return GRACE_OK;
}

/* ---- the loaded file's table ---- */
/* Two parallel arrays of cap entries each, grown together: fresh arrays, copied, so a failure leaves both as were. */
static int grow2(grace_vm *vm, void **a, void **b, int *cap, int need, size_t es) {
  if (need <= *cap) return 1;
  int nc = *cap ? *cap * 2 : 8;
  while (nc < need) nc *= 2;
  void *na = io_alloc(vm, (size_t)nc * es), *nb = io_alloc(vm, (size_t)nc * es);
  if (!na || !nb) {
    io_free(vm, na, (size_t)nc * es);
    io_free(vm, nb, (size_t)nc * es);
    return 0;
  }
  if (*cap) {
    memcpy(na, *a, (size_t)*cap * es);
    memcpy(nb, *b, (size_t)*cap * es);
    io_free(vm, *a, (size_t)*cap * es);
    io_free(vm, *b, (size_t)*cap * es);
  }
  *a = na;
  *b = nb;
  *cap = nc;
  return 1;
}

grace_status io_file_add(grace_vm *vm, grace_tensor_file *f, const char *name, size_t namelen, grace_tensor *t) {
  char *s = io_strndup(vm, name, namelen);
  if (!s || !grow2(vm, (void **)&f->names, (void **)&f->tensors, &f->cap, f->count + 1, sizeof(void *))) {
    if (s) io_free(vm, s, namelen + 1);
    grace_tensor_release(t);
    return grace_set_error(vm, GRACE_ENOMEM, "load: out of host memory");
  }
  f->names[f->count] = s;
  f->tensors[f->count++] = t;
  return GRACE_OK;
}

grace_status io_file_meta(grace_vm *vm, grace_tensor_file *f, const char *key, const char *value) {
  char *k = io_strndup(vm, key, strlen(key)), *v = io_strndup(vm, value, strlen(value));
  if (!k || !v ||
      !grow2(vm, (void **)&f->meta_keys, (void **)&f->meta_values, &f->metacap, f->nmeta + 1, sizeof(char *))) {
    if (k) io_free(vm, k, strlen(k) + 1);
    if (v) io_free(vm, v, strlen(v) + 1);
    return grace_set_error(vm, GRACE_ENOMEM, "load: out of host memory");
  }
  f->meta_keys[f->nmeta] = k;
  f->meta_values[f->nmeta++] = v;
  return GRACE_OK;
}

void grace_tensor_file_free(grace_tensor_file *f) {
  if (!f) return;
  grace_vm *vm = f->vm;
  for (int i = 0; i < f->count; i++) {
    io_free(vm, f->names[i], strlen(f->names[i]) + 1);
    grace_tensor_release(f->tensors[i]);
  }
  for (int i = 0; i < f->nmeta; i++) {
    io_free(vm, f->meta_keys[i], strlen(f->meta_keys[i]) + 1);
    io_free(vm, f->meta_values[i], strlen(f->meta_values[i]) + 1);
  }
  io_free(vm, f->names, (size_t)f->cap * sizeof *f->names);
  io_free(vm, f->tensors, (size_t)f->cap * sizeof *f->tensors);
  io_free(vm, f->meta_keys, (size_t)f->metacap * sizeof(char *));
  io_free(vm, f->meta_values, (size_t)f->metacap * sizeof(char *));
  io_free(vm, f, sizeof *f);
}

/* ---- the writer ---- */
grace_status io_writer_open(grace_vm *vm, const char *path, io_writer *w) {
  *w = (io_writer){0};
  w->path = path;
  w->tmpn = strlen(path) + 32;
  w->tmp = io_alloc(vm, w->tmpn);
  if (!w->tmp) return grace_set_error(vm, GRACE_ENOMEM, "save: out of host memory");
  snprintf(w->tmp, w->tmpn, "%s.tmp-%ld", path, (long)getpid());
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    grace_status st = grace_set_error(vm, GRACE_EARG, "save: cannot create '%s': %s", w->tmp, strerror(errno));
    io_free(vm, w->tmp, w->tmpn);
    w->tmp = NULL;
    return st;
  }
  return GRACE_OK;
}

void io_write(io_writer *w, const void *p, size_t n) {
  if (w->err || n == 0) return;
  if (fwrite(p, 1, n, w->f) != n) w->err = errno ? errno : EIO;
  w->pos += n;
}

grace_status io_writer_close(grace_vm *vm, io_writer *w, int keep) {
  grace_status st = GRACE_OK;
  if (fclose(w->f) != 0 && !w->err) w->err = errno ? errno : EIO;
  if (keep && w->err) st = grace_set_error(vm, GRACE_EARG, "save: writing '%s' failed: %s", w->path, strerror(w->err));
  if (keep && !w->err && rename(w->tmp, w->path) != 0)
    st = grace_set_error(vm, GRACE_EARG, "save: cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(errno));
  if (!keep || st != GRACE_OK) unlink(w->tmp);
  io_free(vm, w->tmp, w->tmpn);
  *w = (io_writer){0};
  return st;
}

/* ---- the public functions ---- */
grace_file_format grace_file_format_of(const char *path) {
  const char *dot = path ? strrchr(path, '.') : NULL;
  if (!dot || strchr(dot, '/')) return GRACE_FILE_AUTO;
  if (strcasecmp(dot, ".safetensors") == 0) return GRACE_FILE_SAFETENSORS;
  if (strcasecmp(dot, ".npy") == 0) return GRACE_FILE_NPY;
  if (strcasecmp(dot, ".npz") == 0) return GRACE_FILE_NPZ;
  return GRACE_FILE_AUTO;
}

static grace_status pick_format(grace_vm *vm, const char *op, const char *path, grace_file_format *fmt) {
  if (*fmt == GRACE_FILE_AUTO) *fmt = grace_file_format_of(path);
  if (*fmt < GRACE_FILE_SAFETENSORS || *fmt > GRACE_FILE_NPZ)
    return grace_set_error(vm, GRACE_EARG, "%s: cannot tell the format of '%s': name it .safetensors, .npy or .npz",
                           op, path);
  return GRACE_OK;
}

grace_status io_load_mem(grace_vm *vm, const char *path, grace_file_format fmt, const io_map *m, grace_device dev,
                         grace_tensor_file **out) {
  *out = NULL;
  grace_tensor_file *f = io_alloc(vm, sizeof *f);
  if (!f) return grace_set_error(vm, GRACE_ENOMEM, "load: out of host memory");
  *f = (grace_tensor_file){.vm = vm};
  grace_status st;
  if (fmt == GRACE_FILE_SAFETENSORS) st = io_load_safetensors(vm, path, m, dev, f);
  else if (fmt == GRACE_FILE_NPZ) st = io_load_npz(vm, path, m, dev, f);
  else {
    grace_tensor *t = NULL;
    st = io_npy_parse(vm, path, m->p, m->n, dev, &t);
    if (st == GRACE_OK) st = io_file_add(vm, f, "", 0, t);
  }
  if (st != GRACE_OK) {
    grace_tensor_file_free(f);
    return st;
  }
  *out = f;
  return GRACE_OK;
}

grace_status grace_load_file(grace_vm *vm, const char *path, grace_file_format fmt, grace_device dev,
                             grace_tensor_file **out) {
  if (!vm) return GRACE_EARG;
  if (!out) return grace_set_error(vm, GRACE_EARG, "load: a NULL argument");
  *out = NULL;
  if (!path) return grace_set_error(vm, GRACE_EARG, "load: no path");
  grace_status st = pick_format(vm, "load", path, &fmt);
  if (st != GRACE_OK) return st;
  io_map m;
  st = io_map_open(vm, path, &m);
  if (st != GRACE_OK) return st;
  st = io_load_mem(vm, path, fmt, &m, dev, out);
  io_map_close(&m);
  return st;
}

static grace_status check_names(grace_vm *vm, const char *path, grace_file_format fmt, int n, const char *const *names,
                                grace_tensor *const *ts, int nmeta) {
  if (n < 0 || nmeta < 0) return grace_set_error(vm, GRACE_EARG, "save: negative count");
  if (fmt == GRACE_FILE_NPY && n != 1)
    return grace_set_error(vm, GRACE_EARG, "save: '%s': a .npy file holds exactly one tensor, got %d (use .npz or "
                           ".safetensors for several)", path, n);
  if (fmt != GRACE_FILE_SAFETENSORS && nmeta)
    return grace_set_error(vm, GRACE_EARG, "save: '%s': only .safetensors files hold metadata", path);
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return grace_set_error(vm, GRACE_EARG, "save: tensor %d is NULL", i);
    if (fmt == GRACE_FILE_NPY) continue;
    if (!names) return grace_set_error(vm, GRACE_EARG, "save: no names");
    if (!names[i] || !names[i][0]) return grace_set_error(vm, GRACE_EARG, "save: tensor %d has no name", i);
    for (int j = 0; j < i; j++) {   /* quadratic, but files hold hundreds of tensors at most, and only once a save */
      if (strcmp(names[i], names[j]) == 0)
        return grace_set_error(vm, GRACE_EARG, "save: the name '%s' is given twice", names[i]);
    }
  }
  return GRACE_OK;
}

grace_status grace_save_file(grace_vm *vm, const char *path, grace_file_format fmt, int n, const char *const *names,
                             grace_tensor *const *tensors, int nmeta, const char *const *meta_keys,
                             const char *const *meta_values) {
  if (!vm) return GRACE_EARG;
  if ((n > 0 && !tensors) || (nmeta > 0 && (!meta_keys || !meta_values)))
    return grace_set_error(vm, GRACE_EARG, "save: a NULL argument");
  if (!path) return grace_set_error(vm, GRACE_EARG, "save: no path");
  grace_status st = pick_format(vm, "save", path, &fmt);
  if (st == GRACE_OK) st = check_names(vm, path, fmt, n, names, tensors, nmeta);
  if (st != GRACE_OK) return st;
  if (fmt == GRACE_FILE_NPY) {   /* refuse before creating anything */
    char hdr[512];
    size_t len;
    st = io_npy_header(vm, path, tensors[0], hdr, sizeof hdr, &len);
    if (st != GRACE_OK) return st;
  }
  io_writer w;
  st = io_writer_open(vm, path, &w);
  if (st != GRACE_OK) return st;
  if (fmt == GRACE_FILE_SAFETENSORS) {
    st = io_save_safetensors(vm, &w, n, names, tensors, nmeta, meta_keys, meta_values);
  } else if (fmt == GRACE_FILE_NPZ) {
    st = io_save_npz(vm, &w, n, names, tensors);
  } else {
    char hdr[512];
    size_t len, nb;
    const void *p;
    void *buf;
    st = io_npy_header(vm, path, tensors[0], hdr, sizeof hdr, &len);
    if (st == GRACE_OK) st = io_tensor_bytes(vm, tensors[0], &p, &buf, &nb);
    if (st == GRACE_OK) {
      io_write(&w, hdr, len);
      io_write(&w, p, nb);
      io_free(vm, buf, nb);
    }
  }
  grace_status cst = io_writer_close(vm, &w, st == GRACE_OK);
  return st != GRACE_OK ? st : cst;
}
