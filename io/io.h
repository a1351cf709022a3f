/* io.h: what the tensor-file formats of io/ share: a read-only mapping of the file being loaded, the loaded
 * file's table of tensors, tensors made from (and written as) little-endian row-major bytes, and a writer
 * that replaces the destination only once the whole file is written. io/ is a client of the public API
 * (docs/architecture.md: "io: api"), so everything here is built from grace_* functions. */
#ifndef GRACE_IO_H
#define GRACE_IO_H

#include <stdio.h>
#include "grace.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/ reads and writes little-endian files by copying bytes: a big-endian host needs byte swaps here"
#endif

/* The whole file mapped read-only (p is NULL for an empty file); in an AddressSanitizer build, read into a heap
 * block of exactly its size (heap = 1), so that a read past the end is reported. */
typedef struct io_map {
  const unsigned char *p;
  size_t n;
  int heap;
} io_map;
grace_status io_map_open(grace_vm *vm, const char *path, io_map *m);
void io_map_close(io_map *m);

/* Host memory through the VM's allocator (n is needed again to free). */
void *io_alloc(grace_vm *vm, size_t n);
void io_free(grace_vm *vm, void *p, size_t n);
/* A buffer sized by the data (a copy of a tensor being saved, an inflated member): as io_alloc, but under a memory
 * cap (grace_set_memory_limit) one larger than the cap is refused, so a saved expanded view or a file claiming a
 * huge member cannot make a block far past the cap. NULL with the error set (op, size and cap). */
void *io_alloc_data(grace_vm *vm, const char *op, size_t n);

/* numel(sizes) * size of dt in *out; 0 when it overflows 2^62 (a lying header's huge shape). */
int io_nbytes(int ndim, const int64_t *sizes, grace_dtype dt, uint64_t *out);
/* A new tensor of dt holding the n little-endian row-major bytes at p (n checked by the caller), on dev. bool bytes
 * other than 0 are read as true (stored as 1, as every bool tensor). swap: the bytes are big-endian (npy '>f4'). */
grace_status io_tensor(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes, const unsigned char *p, int swap,
                       grace_device dev, grace_tensor **out);
/* t's elements as little-endian row-major bytes: its own data when it is a contiguous CPU tensor, else a host copy
 * in *buf (io_free(vm, *buf, *n) after use; NULL when no copy was made). */
grace_status io_tensor_bytes(grace_vm *vm, grace_tensor *t, const void **p, void **buf, size_t *n);

/* Entries of a grace_tensor_file being loaded: io_file_add takes the reference to t (released on failure). */
grace_status io_file_add(grace_vm *vm, grace_tensor_file *f, const char *name, size_t namelen, grace_tensor *t);
grace_status io_file_meta(grace_vm *vm, grace_tensor_file *f, const char *key, const char *value);

/* Writes to PATH.tmp-PID, renamed over path by io_writer_close(keep=1): an interrupted save leaves the previous
 * file whole (a checkpoint is overwritten in place every epoch). */
typedef struct io_writer {
  FILE *f;
  char *tmp;
  size_t tmpn;
  const char *path;
  uint64_t pos;   /* bytes written so far */
  int err;        /* errno of the first failed write */
} io_writer;
grace_status io_writer_open(grace_vm *vm, const char *path, io_writer *w);
void io_write(io_writer *w, const void *p, size_t n);
grace_status io_writer_close(grace_vm *vm, io_writer *w, int keep);

/* The formats (io_safetensors.c, io_npy.c, io_npz.c). Loaders check every size against the mapping before reading. */
grace_status io_load_safetensors(grace_vm *vm, const char *path, const io_map *m, grace_device dev, grace_tensor_file *f);
grace_status io_save_safetensors(grace_vm *vm, io_writer *w, int n, const char *const *names, grace_tensor *const *ts,
                                 int nmeta, const char *const *keys, const char *const *values);
/* One .npy image (a file, or an npz member named what) of n bytes at p. */
grace_status io_npy_parse(grace_vm *vm, const char *what, const unsigned char *p, size_t n, grace_device dev,
                          grace_tensor **out);
/* The .npy header of t (magic, version, length, dict, padding to 64 bytes) into buf (cap 512 is enough). */
grace_status io_npy_header(grace_vm *vm, const char *what, const grace_tensor *t, char *buf, size_t cap, size_t *len);
/* Loads a file's image already in memory (m) as format fmt (not AUTO); path only names it in messages. The part of
 * grace_load_file after the mapping, so a test or fuzz target can give it bytes directly. */
grace_status io_load_mem(grace_vm *vm, const char *path, grace_file_format fmt, const io_map *m, grace_device dev,
                         grace_tensor_file **out);
grace_status io_load_npz(grace_vm *vm, const char *path, const io_map *m, grace_device dev, grace_tensor_file *f);
grace_status io_save_npz(grace_vm *vm, io_writer *w, int n, const char *const *names, grace_tensor *const *ts);

#endif
