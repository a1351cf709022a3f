/* test_io.c: the C API of io/ (grace_save_file, grace_load_file, grace_tensor_file_free) and its robustness: every
 * prefix of a valid .safetensors, .npy and .npz file must load as an error (never a crash or a read past the file,
 * which the sanitizer build checks), and every single-byte corruption must either load or fail with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grace.h"
#include "tap.h"

static char dir[64];

static const char *path(const char *name) {
  static char buf[4][160];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static size_t slurp(const char *p, unsigned char **out) {
  FILE *f = fopen(p, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n + 1);
  size_t got = fread(*out, 1, (size_t)n, f);
  fclose(f);
  return got;
}

static void spit(const char *p, const unsigned char *b, size_t n) {
  FILE *f = fopen(p, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
}

static void test_api(grace_vm *vm) {
  int64_t s2[2] = {2, 3}, s1[1] = {4};
  float fv[6] = {1, -2, 3.5f, 0, 1e30f, -0.25f};
  int64_t iv[4] = {1, -1, INT64_MAX, INT64_MIN};
  grace_tensor *t[2] = {NULL, NULL};
  grace_tensor_from_data(vm, GRACE_FLOAT32, 2, s2, GRACE_FLOAT32, fv, &t[0]);
  grace_tensor_from_data(vm, GRACE_INT64, 1, s1, GRACE_INT64, iv, &t[1]);
  const char *names[2] = {"w", "layers.0.b"}, *keys[1] = {"format"}, *vals[1] = {"pt"};
  ok(grace_save_file(vm, path("a.safetensors"), GRACE_FILE_AUTO, 2, names, t, 1, keys, vals) == GRACE_OK,
     "save two tensors and metadata: %s", grace_last_error(vm));
  grace_tensor_file *f = NULL;
  ok(grace_load_file(vm, path("a.safetensors"), GRACE_FILE_AUTO, GRACE_CPU, &f) == GRACE_OK, "load them");
  if (f) {
    is_int(f->count, 2, "two tensors");
    is_str(f->names[0], "w", "file order kept: w first");
    is_str(f->names[1], "layers.0.b", "then layers.0.b");
    ok(f->nmeta == 1 && strcmp(f->meta_keys[0], "format") == 0 && strcmp(f->meta_values[0], "pt") == 0, "metadata");
    ok(memcmp(grace_tensor_data(f->tensors[0]), fv, sizeof fv) == 0, "float32 bytes");
    ok(memcmp(grace_tensor_data(f->tensors[1]), iv, sizeof iv) == 0, "int64 bytes");
    grace_tensor *kept = f->tensors[1];
    grace_tensor_retain(kept);
    grace_tensor_file_free(f);
    ok(((int64_t *)grace_tensor_data(kept))[2] == INT64_MAX, "a retained tensor outlives the file");
    grace_tensor_release(kept);
  }
  is_int(grace_file_format_of("x.NPZ"), GRACE_FILE_NPZ, "format of x.NPZ");
  is_int(grace_file_format_of("dir.npy/x"), GRACE_FILE_AUTO, "a dot in a folder name is no extension");
  ok(grace_save_file(vm, path("a.bin"), GRACE_FILE_AUTO, 1, names, t, 0, NULL, NULL) == GRACE_EARG &&
     strstr(grace_last_error(vm), "cannot tell the format"), "unknown extension: %s", grace_last_error(vm));
  ok(grace_save_file(vm, path("a.npy"), GRACE_FILE_AUTO, 2, names, t, 0, NULL, NULL) == GRACE_EARG,
     "two tensors to .npy: %s", grace_last_error(vm));
  const char *dup[2] = {"x", "x"};
  ok(grace_save_file(vm, path("d.npz"), GRACE_FILE_AUTO, 2, dup, t, 0, NULL, NULL) == GRACE_EARG &&
     strstr(grace_last_error(vm), "twice"), "a name given twice: %s", grace_last_error(vm));
  ok(grace_save_file(vm, path("a.npy"), GRACE_FILE_AUTO, 1, names, t, 0, NULL, NULL) == GRACE_OK, "save .npy");
  ok(grace_save_file(vm, path("a.npz"), GRACE_FILE_AUTO, 2, names, t, 0, NULL, NULL) == GRACE_OK, "save .npz");
  grace_tensor_release(t[0]);
  grace_tensor_release(t[1]);
}

/* Every proper prefix must fail; returns how many did not. */
static int prefixes(grace_vm *vm, const char *src, const char *dst) {
  unsigned char *b = NULL;
  size_t n = slurp(src, &b);
  int bad = 0;
  for (size_t len = 0; len < n; len++) {
    spit(dst, b, len);
    grace_tensor_file *f = NULL;
    if (grace_load_file(vm, dst, GRACE_FILE_AUTO, GRACE_CPU, &f) == GRACE_OK || !grace_last_error(vm)[0]) {
      bad++;
      grace_tensor_file_free(f);
    }
  }
  free(b);
  return bad;
}

/* Every byte flipped in turn: a load either works or fails with a message. */
static int flips(grace_vm *vm, const char *src, const char *dst, int *loaded) {
  unsigned char *b = NULL;
  size_t n = slurp(src, &b);
  int bad = 0;
  *loaded = 0;
  for (size_t i = 0; i < n; i++) {
    b[i] ^= 0xa5;
    spit(dst, b, n);
    b[i] ^= 0xa5;
    grace_tensor_file *f = NULL;
    grace_status st = grace_load_file(vm, dst, GRACE_FILE_AUTO, GRACE_CPU, &f);
    if (st == GRACE_OK) (*loaded)++;
    else if (!grace_last_error(vm)[0]) bad++;
    grace_tensor_file_free(f);
  }
  free(b);
  return bad;
}

int main(void) {
  char err[256];
  grace_config cfg = {0};
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 0; }
  snprintf(dir, sizeof dir, "/tmp/grace_test_io_XXXXXX");
  if (!mkdtemp(dir)) { printf("1..0 # SKIP no temporary folder\n"); return 0; }
  test_api(vm);
  const char *fmts[3] = {"safetensors", "npy", "npz"};
  for (int k = 0; k < 3; k++) {
    char src[16], dst[16];
    snprintf(src, sizeof src, "a.%s", fmts[k]);
    snprintf(dst, sizeof dst, "cut.%s", fmts[k]);
    is_int(prefixes(vm, path(src), path(dst)), 0, "%s: every truncation is an error with a message", fmts[k]);
    int loaded = 0, bad = flips(vm, path(src), path(dst), &loaded);
    is_int(bad, 0, "%s: every flipped byte loads or fails with a message (%d loaded: data bytes)", fmts[k], loaded);
  }
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  grace_vm_free(vm);
  return tap_done();
}
