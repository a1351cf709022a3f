/* fuzz_files.c: the tensor file loaders (safetensors, .npy, .npz with stored and deflated members) on untrusted
 * bytes, given from memory (io_load_mem, the part of grace_load_file after the mapping). The first byte picks the
 * format; the rest is the file. Every tensor loaded is read back. */
#include "fuzz.h"
#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const grace_file_format fmts[] = {GRACE_FILE_SAFETENSORS, GRACE_FILE_NPY, GRACE_FILE_NPZ};
  grace_file_format fmt = fmts[data[0] % 3];
  /* an exact-size heap copy, so that AddressSanitizer sees a read one byte past the end */
  unsigned char *img = malloc(size - 1 ? size - 1 : 1);
  if (!img) return 0;
  memcpy(img, data + 1, size - 1);
  grace_vm *vm = fuzz_vm(0);
  io_map m = {.p = size > 1 ? img : NULL, .n = size - 1};
  grace_tensor_file *f = NULL;
  grace_status st = io_load_mem(vm, "fuzz", fmt, &m, GRACE_CPU, &f);
  fuzz_status(vm, st, "load");
  if (st == GRACE_OK) {
    for (int k = 0; k < f->count; k++) {
      if (!f->tensors[k] || !f->names[k]) { fprintf(stderr, "fuzz: entry %d incomplete\n", k); abort(); }
      fuzz_touch(vm, f->tensors[k]);
    }
    for (int k = 0; k < f->nmeta; k++)
      if (!f->meta_keys[k] || !f->meta_values[k]) { fprintf(stderr, "fuzz: metadata %d incomplete\n", k); abort(); }
    grace_tensor_file_free(f);
  } else if (f) {
    fprintf(stderr, "fuzz: a file after an error\n");
    abort();
  }
  free(img);
  fuzz_vm_done(vm);
  return 0;
}
