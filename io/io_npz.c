/* io_npz.c: NumPy's .npz, a zip archive of NAME.npy members. np.savez stores them, np.savez_compressed deflates
 * them; both are read (deflate through zlib, Debian zlib1g-dev), and grace writes stored members. The central
 * directory is the authority for sizes and offsets (np.savez streams members with zip64 local headers whose sizes
 * are placeholders); zip64 records are followed for reading. Every offset and size is checked against the mapping,
 * a deflated member's claimed size is bounded by deflate's best ratio before anything is allocated, and each member's
 * CRC-32 is checked, so a truncated or lying archive is an error rather than a read past the file. */
#include <string.h>
#include <zlib.h>
#include "io/io.h"

static uint32_t le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const unsigned char *p) { return le16(p) | le16(p + 2) << 16; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

typedef struct zip_dir {
  uint64_t count, size, offset;   /* of the central directory */
} zip_dir;

/* The end-of-central-directory record (and its zip64 twin when a field is saturated). */
static grace_status zip_find_dir(grace_vm *vm, const char *path, const io_map *m, zip_dir *z) {
  if (m->n < 22) return grace_set_error(vm, GRACE_EARG, "load: '%s' is not an .npz (zip) file: too short", path);
  /* the record is the last 22 bytes plus a comment of at most 65535: search backwards from the end */
  size_t lo = m->n - 22 > 65535 ? m->n - 22 - 65535 : 0, at = m->n - 22 + 1;
  int found = 0;
  while (!found && at-- > lo) found = memcmp(m->p + at, "PK\5\6", 4) == 0;
  if (!found)
    return grace_set_error(vm, GRACE_EARG, "load: '%s' is not an .npz (zip) file: no end of central directory", path);
  const unsigned char *e = m->p + at;
  z->count = le16(e + 10);
  z->size = le32(e + 12);
  z->offset = le32(e + 16);
  if (z->count == 0xffff || z->size == 0xffffffffu || z->offset == 0xffffffffu) {
    if (at < 20 || memcmp(e - 20, "PK\6\7", 4) != 0)
      return grace_set_error(vm, GRACE_EARG, "load: '%s': a saturated zip directory without a zip64 locator", path);
    uint64_t z64 = le64(e - 20 + 8);
    if (z64 > m->n || m->n - z64 < 56 || memcmp(m->p + z64, "PK\6\6", 4) != 0)
      return grace_set_error(vm, GRACE_EARG, "load: '%s': the zip64 directory record is missing or truncated", path);
    z->count = le64(m->p + z64 + 32);
    z->size = le64(m->p + z64 + 40);
    z->offset = le64(m->p + z64 + 48);
  }
  if (z->offset > m->n || z->size > m->n - z->offset)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the zip directory lies past the end of the file", path);
  return GRACE_OK;
}

typedef struct zip_entry {
  const unsigned char *name;
  size_t namelen;
  unsigned method, flags;
  uint32_t crc;
  uint64_t csize, usize, local;
} zip_entry;

/* Sizes and the local header's offset that read 0xffffffff come from the zip64 extra field (id 1), in this order. */
static int zip64_extra(const unsigned char *x, size_t n, zip_entry *e) {
  while (n >= 4) {
    size_t id = le16(x), len = le16(x + 2);
    if (len > n - 4) return 0;
    if (id == 1) {
      const unsigned char *q = x + 4, *end = x + 4 + len;
      uint64_t *f[3] = {&e->usize, &e->csize, &e->local};
      for (int i = 0; i < 3; i++) {
        if (*f[i] != 0xffffffffu) continue;
        if (end - q < 8) return 0;
        *f[i] = le64(q);
        q += 8;
      }
      return 1;
    }
    x += 4 + len;
    n -= 4 + len;
  }
  return 1;
}

/* One central directory entry at *at (advanced past it). */
static grace_status zip_entry_read(grace_vm *vm, const char *path, const io_map *m, uint64_t *at, uint64_t end,
                                   zip_entry *e) {
  const unsigned char *c = m->p + *at;
  if (end - *at < 46 || memcmp(c, "PK\1\2", 4) != 0)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a zip directory entry is truncated or corrupt", path);
  size_t nl = le16(c + 28), xl = le16(c + 30), cl = le16(c + 32);
  if (end - *at - 46 < (uint64_t)nl + xl + cl)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a zip directory entry runs past the directory", path);
  *e = (zip_entry){.name = c + 46, .namelen = nl, .flags = le16(c + 8), .method = le16(c + 10), .crc = le32(c + 16),
                   .csize = le32(c + 20), .usize = le32(c + 24), .local = le32(c + 42)};
  if (!zip64_extra(c + 46 + nl, xl, e))
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a zip64 extra field is truncated", path);
  *at += 46 + nl + xl + cl;
  return GRACE_OK;
}

/* The member's bytes in the mapping, after its local header (whose own name and extra lengths may differ). */
static grace_status zip_member_data(grace_vm *vm, const char *path, const io_map *m, const zip_entry *e,
                                    const unsigned char **data) {
  if (e->flags & 1) return grace_set_error(vm, GRACE_EUNSUPPORTED, "load: '%s': encrypted zip members are not read", path);
  if (e->local > m->n || m->n - e->local < 30 || memcmp(m->p + e->local, "PK\3\4", 4) != 0)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a zip member's local header is missing or truncated", path);
  uint64_t start = e->local + 30 + le16(m->p + e->local + 26) + le16(m->p + e->local + 28);
  if (start > m->n || e->csize > m->n - start)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the member '%.*s' runs past the end of the file (truncated?)",
                           path, (int)e->namelen, e->name);
  *data = m->p + start;
  return GRACE_OK;
}

static uint32_t crc_of(const unsigned char *p, uint64_t n) {
  return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), p, (z_size_t)n);
}

/* A deflated member into a new buffer of exactly usize bytes (checked: deflate's best ratio is about 1032:1). */
static grace_status zip_inflate(grace_vm *vm, const char *what, const zip_entry *e, const unsigned char *src,
                                unsigned char **out) {
  if (e->usize / 1032 > e->csize + 1 || e->usize > SIZE_MAX)
    return grace_set_error(vm, GRACE_EARG, "load: '%s': %llu bytes cannot inflate to the claimed %llu", what,
                           (unsigned long long)e->csize, (unsigned long long)e->usize);
  unsigned char *buf = io_alloc_data(vm, "load", (size_t)e->usize);
  if (!buf) return GRACE_ENOMEM;
  z_stream z = {0};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {   /* raw deflate: zip members have no zlib header */
    io_free(vm, buf, (size_t)e->usize);
    return grace_set_error(vm, GRACE_ENOMEM, "load: zlib could not start inflating");
  }
  uint64_t in_left = e->csize, out_left = e->usize;
  int r = Z_OK;
  z.next_in = (unsigned char *)src;
  z.next_out = buf;
  while (r == Z_OK) {   /* avail_in/out are 32-bit: feed members over 4 GiB in slices */
    if (z.avail_in == 0) { z.avail_in = in_left > (1u << 30) ? 1u << 30 : (uInt)in_left; in_left -= z.avail_in; }
    if (z.avail_out == 0) { z.avail_out = out_left > (1u << 30) ? 1u << 30 : (uInt)out_left; out_left -= z.avail_out; }
    r = inflate(&z, Z_NO_FLUSH);
    if (r == Z_BUF_ERROR && (in_left || out_left)) r = Z_OK;   /* a slice ran out: refill */
  }
  uint64_t got = e->usize - out_left - z.avail_out;
  const char *msg = z.msg ? z.msg : r == Z_STREAM_END ? "size mismatch" : "truncated";   /* static strings */
  inflateEnd(&z);
  if (r != Z_STREAM_END || got != e->usize) {
    io_free(vm, buf, (size_t)e->usize);
    return grace_set_error(vm, GRACE_EARG, "load: '%s': the deflated data is corrupt or not the claimed %llu bytes "
                           "(zlib: %s)", what, (unsigned long long)e->usize, msg);
  }
  *out = buf;
  return GRACE_OK;
}

static grace_status zip_member(grace_vm *vm, const char *path, const io_map *m, const zip_entry *e, grace_device dev,
                               grace_tensor_file *f) {
  char what[512];
  snprintf(what, sizeof what, "%s: %.*s", path, (int)e->namelen, e->name);
  const unsigned char *data = NULL;
  grace_status st = zip_member_data(vm, path, m, e, &data);
  if (st != GRACE_OK) return st;
  unsigned char *owned = NULL;
  if (e->method == 8) {
    st = zip_inflate(vm, what, e, data, &owned);
    if (st != GRACE_OK) return st;
    data = owned;
  } else if (e->method != 0) {
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "load: '%s': zip compression method %u (grace reads stored and "
                           "deflated members, as np.savez and np.savez_compressed write)", what, e->method);
  } else if (e->usize != e->csize) {
    return grace_set_error(vm, GRACE_EARG, "load: '%s': a stored member whose sizes differ", what);
  }
  grace_tensor *t = NULL;
  if (crc_of(data, e->usize) != e->crc)
    st = grace_set_error(vm, GRACE_EARG, "load: '%s': CRC-32 mismatch (the archive is corrupt)", what);
  else
    st = io_npy_parse(vm, what, data, (size_t)e->usize, dev, &t);
  if (owned) io_free(vm, owned, (size_t)e->usize);
  if (st != GRACE_OK) return st;
  size_t nl = e->namelen;
  if (nl > 4 && memcmp(e->name + nl - 4, ".npy", 4) == 0) nl -= 4;   /* np.load's keys drop the suffix too */
  for (int i = 0; i < f->count; i++) {
    if (strlen(f->names[i]) == nl && memcmp(f->names[i], e->name, nl) == 0) {
      grace_tensor_release(t);
      return grace_set_error(vm, GRACE_EARG, "load: '%s': the name '%.*s' appears twice", path, (int)nl, e->name);
    }
  }
  return io_file_add(vm, f, (const char *)e->name, nl, t);
}

grace_status io_load_npz(grace_vm *vm, const char *path, const io_map *m, grace_device dev, grace_tensor_file *f) {
  zip_dir z = {0};
  grace_status st = zip_find_dir(vm, path, m, &z);
  uint64_t at = z.offset, end = z.offset + z.size;
  for (uint64_t i = 0; st == GRACE_OK && i < z.count; i++) {
    zip_entry e;
    st = zip_entry_read(vm, path, m, &at, end, &e);
    if (st == GRACE_OK && !(e.namelen && e.name[e.namelen - 1] == '/')) st = zip_member(vm, path, m, &e, dev, f);
  }
  return st;
}

/* ---- writing: stored members, no zip64 (over 4 GiB .safetensors is the format to use) ---- */
static void put16(unsigned char *p, uint32_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xffff); put16(p + 2, v >> 16); }

typedef struct npz_rec {
  uint32_t crc, size, offset;
} npz_rec;

/* 1980-01-01 00:00, the earliest DOS date: files do not depend on when they were written */
#define NPZ_DOS_DATE 0x21

static grace_status npz_member(grace_vm *vm, io_writer *w, const char *name, grace_tensor *t, npz_rec *r) {
  char hdr[512];
  size_t hl, nb, nl = strlen(name) + 4;
  const void *p;
  void *buf;
  grace_status st = io_npy_header(vm, name, t, hdr, sizeof hdr, &hl);
  if (st == GRACE_OK) st = io_tensor_bytes(vm, t, &p, &buf, &nb);
  if (st != GRACE_OK) return st;
  if (nb > 0xfffffffeu - hl || w->pos > 0xfffffffeu || nl > 0xffff) {
    io_free(vm, buf, nb);
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "save: '%s': .npz files over 4 GiB (zip64) are not written; use "
                           ".safetensors", name);
  }
  r->offset = (uint32_t)w->pos;
  r->size = (uint32_t)(hl + nb);
  r->crc = (uint32_t)crc32_z(crc32_z(crc32_z(0, Z_NULL, 0), (const unsigned char *)hdr, hl), p, nb);
  unsigned char lh[30] = {'P', 'K', 3, 4};
  put16(lh + 4, 20);
  put16(lh + 12, NPZ_DOS_DATE);
  put32(lh + 14, r->crc);
  put32(lh + 18, r->size);
  put32(lh + 22, r->size);
  put16(lh + 26, (uint32_t)nl);
  io_write(w, lh, sizeof lh);
  io_write(w, name, nl - 4);
  io_write(w, ".npy", 4);
  io_write(w, hdr, hl);
  io_write(w, p, nb);
  io_free(vm, buf, nb);
  return GRACE_OK;
}

static void npz_directory(io_writer *w, int n, const char *const *names, const npz_rec *rs) {
  uint64_t start = w->pos;
  for (int i = 0; i < n; i++) {
    size_t nl = strlen(names[i]) + 4;
    unsigned char c[46] = {'P', 'K', 1, 2};
    put16(c + 4, 3 << 8 | 20);   /* made by: Unix, zip 2.0 (so unzip shows the mode bits below) */
    put16(c + 6, 20);
    put16(c + 14, NPZ_DOS_DATE);
    put32(c + 16, rs[i].crc);
    put32(c + 20, rs[i].size);
    put32(c + 24, rs[i].size);
    put16(c + 28, (uint32_t)nl);
    put32(c + 38, 0100644u << 16);   /* a regular file, rw-r--r-- */
    put32(c + 42, rs[i].offset);
    io_write(w, c, sizeof c);
    io_write(w, names[i], nl - 4);
    io_write(w, ".npy", 4);
  }
  unsigned char e[22] = {'P', 'K', 5, 6};
  put16(e + 8, (uint32_t)n);
  put16(e + 10, (uint32_t)n);
  put32(e + 12, (uint32_t)(w->pos - start));
  put32(e + 16, (uint32_t)start);
  io_write(w, e, sizeof e);
}

grace_status io_save_npz(grace_vm *vm, io_writer *w, int n, const char *const *names, grace_tensor *const *ts) {
  if (n > 0xffff) return grace_set_error(vm, GRACE_EUNSUPPORTED, "save: .npz of over 65535 tensors needs zip64");
  npz_rec *rs = io_alloc(vm, (size_t)(n ? n : 1) * sizeof *rs);
  if (!rs) return grace_set_error(vm, GRACE_ENOMEM, "save: out of host memory");
  grace_status st = GRACE_OK;
  for (int i = 0; i < n && st == GRACE_OK; i++) st = npz_member(vm, w, names[i], ts[i], &rs[i]);
  /* the directory's own offset and size must fit 32 bits too */
  if (st == GRACE_OK && w->pos > 0xffffffffu - 65536u * 64)
    st = grace_set_error(vm, GRACE_EUNSUPPORTED, "save: .npz files over 4 GiB (zip64) are not written; use .safetensors");
  if (st == GRACE_OK) npz_directory(w, n, names, rs);
  io_free(vm, rs, (size_t)(n ? n : 1) * sizeof *rs);
  return st;
}
