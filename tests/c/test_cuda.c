/* test_cuda.c: the CUDA runtime layer (cuda/cuda_api.h). Without a GPU: the device is reported unusable with a
 * reason; NVRTC (loaded without a driver) compiles kernels to PTX and cubin for sm_90, a syntax error gives
 * GRACE_EINTERNAL with NVRTC's log and leaks nothing (a counting host allocator checks); the disk cache of compiled
 * kernels stores and loads back the same bytes, detects a flipped payload byte, a truncated file and an entry
 * holding another key, and an unwritable cache directory just turns the cache off; a hostile cache directory (a
 * symlink or a FIFO planted as an entry or as a temporary's name, a directory others may write or another user
 * owns) is never read or written through. With a GPU (skipped
 * otherwise): properties, copies, memset, a kernel launched with a struct parameter (checked on the host against
 * the same arithmetic in C), dynamic shared memory past 48 KB, events, the caching allocator (reuse, statistics,
 * an impossible request giving GRACE_ENOMEM and the allocator working afterwards) and the module caches (memory
 * hit, then a disk hit with no NVRTC call from a fresh VM). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "grace.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

/* A host allocator that counts the bytes outstanding, to show a failed compile leaks nothing. */
static long long live_bytes;
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud;
  if (nsize == 0) {
    if (ptr) live_bytes -= (long long)osize;
    free(ptr);
    return NULL;
  }
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, nsize)) return NULL;
  if (ptr) {
    memcpy(p, ptr, osize < nsize ? osize : nsize);
    free(ptr);
    live_bytes -= (long long)osize;
  }
  live_bytes += (long long)nsize;
  return p;
}

static grace_vm *new_vm(void) {
  grace_config cfg = {0};
  cfg.alloc = counting_alloc;
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) printf("# grace_vm_new: %s\n", err);
  return vm;
}

static char tmpdir[256];

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      remove_tree(sub);
    }
    closedir(d);
    rmdir(path);
  } else
    unlink(path);
}

static int count_files(const char *dir, const char *containing) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && strstr(e->d_name, containing)) n++;
  closedir(d);
  return n;
}

static const char *scale_src =
    "struct scale_p { float *x; long long n; double s; };\n"
    "extern \"C\" __global__ void scale(const scale_p p) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < p.n) p.x[i] = (float)((double)p.x[i] * p.s);\n"
    "}\n"
    "extern __shared__ float smem_buf[];\n"
    "extern \"C\" __global__ void smem_sum(const scale_p p) {\n"
    "  int words = (int)p.n;\n"
    "  for (int i = threadIdx.x; i < words; i += blockDim.x) smem_buf[i] = p.x[i];\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) { float s = 0; for (int i = 0; i < words; i++) s += smem_buf[i]; p.x[0] = s; }\n"
    "}\n";

/* bf16 <-> float by bit operations on unsigned short, as generated kernels do (no headers). */
static const char *bits_src =
    "__device__ __forceinline__ float bf16_to_f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
    "__device__ __forceinline__ unsigned short f_to_bf16(float f) {\n"
    "  unsigned u = __float_as_uint(f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);\n"
    "  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n"
    "struct halve_p { unsigned short *x; long long n; };\n"
    "extern \"C\" __global__ void halve_bf16(const halve_p p) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < p.n) p.x[i] = f_to_bf16(bf16_to_f(p.x[i]) * 0.5f);\n"
    "}\n";

static void test_no_device(grace_vm *vm) {
  if (cuda_usable(vm)) {
    skip("a CUDA device is usable here: the no-device path is not exercised");
    skip("a CUDA device is usable here");
    return;
  }
  const char *why = cuda_why(vm);
  ok(why && *why && strcmp(why, "usable"), "no device: cuda_why gives a reason ('%s')", why ? why : "(null)");
  ok(cuda_get(vm) == NULL && grace_last_error(vm) && strstr(grace_last_error(vm), why),
     "cuda_get is NULL with the reason in the error: %s", grace_last_error(vm));
}

static void test_nvrtc(grace_vm *vm) {
  const char *why = cuda_nvrtc_why(vm);
  if (why) {
    for (int i = 0; i < 9; i++) skip(why);
    return;
  }
  const char *ver = cuda_nvrtc_version(vm);
  int major = 0, minor = -1;
  ok(sscanf(ver, "%d.%d", &major, &minor) == 2 && major >= 11 && minor >= 0, "NVRTC version '%s'", ver);

  char *out = NULL;
  size_t n = 0;
  grace_status st = cuda_nvrtc_compile(vm, scale_src, 90, 1, &out, &n);
  ok(st == GRACE_OK && out && strstr(out, ".entry scale(") && strstr(out, ".target sm_90"),
     "scale kernel compiles to PTX for compute_90 (.entry scale, .target sm_90)%s%s", st ? ": " : "",
     st ? grace_last_error(vm) : "");
  ok(out && strlen(out) + 1 == n, "PTX size counts the text and its NUL");
  if (out) grace_realloc(vm, out, n, 0);

  st = cuda_nvrtc_compile(vm, bits_src, 90, 1, &out, &n);
  ok(st == GRACE_OK && out && strstr(out, ".entry halve_bf16("), "a kernel with unsigned short bit tricks compiles%s%s",
     st ? ": " : "", st ? grace_last_error(vm) : "");
  if (out) grace_realloc(vm, out, n, 0);

  st = cuda_nvrtc_compile(vm, scale_src, 90, 0, &out, &n);
  ok(st == GRACE_OK && out && n > 4 && !memcmp(out, "\x7f" "ELF", 4), "a cubin for sm_90 is an ELF image");
  if (out) grace_realloc(vm, out, n, 0);

  cuda_compile_stats cs;
  cuda_compile_stats_get(cuda_state(vm), &cs);
  ok(cs.nvrtc_calls == 3 && cs.nvrtc_seconds > 0, "3 NVRTC calls counted (%llu), time counted (%.3f s)",
     (unsigned long long)cs.nvrtc_calls, cs.nvrtc_seconds);

  long long before = live_bytes;
  out = (char *)1;
  n = 99;
  st = cuda_nvrtc_compile(vm, "extern \"C\" __global__ void broken(float *x) { x[0] = 1.0f }\n", 90, 1, &out, &n);
  const char *msg = grace_last_error(vm);
  is_int(st, GRACE_EINTERNAL, "a syntax error gives GRACE_EINTERNAL");
  ok(strstr(msg, "nvrtcCompileProgram") && strstr(msg, "error") && strstr(msg, "grace.cu"),
     "the message names the call and holds the log: %s", msg);
  ok(out == NULL && n == 0 && live_bytes == before, "no output and no host memory leaked (%lld bytes)",
     live_bytes - before);
}

static void test_disk_cache(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/a/b/cache", tmpdir);
  setenv("GRACE_CACHE_DIR", dir, 1);
  grace_vm *vm = new_vm();
  cuda_ctx *c = vm ? cuda_state(vm) : NULL;
  if (!c) {
    ok(0, "a VM with CUDA state");
    return;
  }
  const char *d = cuda_cache_dir(c);
  struct stat st;
  ok(d && !strcmp(d, dir) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700,
     "$GRACE_CACHE_DIR is made with its parents, mode 0700");

  cuda_key k1 = cuda_cache_key("src", "-O", 90, "13.0");
  cuda_key ks = cuda_cache_key("src ", "-O", 90, "13.0"), ko = cuda_cache_key("src", "-O3", 90, "13.0");
  cuda_key ka = cuda_cache_key("src", "-O", 80, "13.0"), kv = cuda_cache_key("src", "-O", 90, "12.8");
  cuda_key kb = cuda_cache_key("sr", "c-O", 90, "13.0");
  cuda_key again = cuda_cache_key("src", "-O", 90, "13.0");
  ok(k1.h1 == again.h1 && k1.h2 == again.h2, "the key is a function of its inputs");
  ok(k1.h1 != ks.h1 && k1.h1 != ko.h1 && k1.h1 != ka.h1 && k1.h1 != kv.h1 && k1.h1 != kb.h1 &&
     k1.h2 != ks.h2 && k1.h2 != ko.h2 && k1.h2 != ka.h2 && k1.h2 != kv.h2 && k1.h2 != kb.h2,
     "both hashes change with source, options, arch, NVRTC version and where the parts split");

  unsigned char payload[3000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 7 + 3);
  char *bytes = NULL;
  size_t n = 0;
  is_int(cuda_cache_load(c, k1, &bytes, &n), CUDA_CACHE_MISS, "no entry: a miss");
  ok(cuda_cache_store(c, k1, payload, sizeof payload), "an entry is stored");
  cuda_cache_result r = cuda_cache_load(c, k1, &bytes, &n);
  ok(r == CUDA_CACHE_HIT && n == sizeof payload && bytes && !memcmp(bytes, payload, n),
     "it loads back the same %zu bytes", sizeof payload);
  if (bytes) grace_realloc(vm, bytes, n, 0);
  is_int(count_files(dir, ".tmp"), 0, "no temp file is left behind");

  char path[1024];
  snprintf(path, sizeof path, "%s/%016llx%016llx.cubin", dir, (unsigned long long)k1.h1, (unsigned long long)k1.h2);
  ok(stat(path, &st) == 0 && st.st_size == 40 + (long)sizeof payload, "the file is a 40-byte header and the payload");

  FILE *f = fopen(path, "r+b");
  if (f) {
    fseek(f, 40 + 1234, SEEK_SET);
    fputc(payload[1234] ^ 0x10, f);
    fclose(f);
  }
  cuda_compile_stats cs;
  r = cuda_cache_load(c, k1, &bytes, &n);
  cuda_compile_stats_get(c, &cs);
  ok(r == CUDA_CACHE_CORRUPT && !bytes && n == 0 && cs.corrupt_entries == 1,
     "a flipped payload byte: corrupt, nothing returned, counted");

  ok(cuda_cache_store(c, k1, payload, sizeof payload) && cuda_cache_load(c, k1, &bytes, &n) == CUDA_CACHE_HIT,
     "rewriting the entry repairs it");
  if (bytes) grace_realloc(vm, bytes, n, 0);

  ok(truncate(path, 40 + 100) == 0 && cuda_cache_load(c, k1, &bytes, &n) == CUDA_CACHE_CORRUPT && !bytes,
     "a truncated entry: corrupt");
  ok(truncate(path, 20) == 0 && cuda_cache_load(c, k1, &bytes, &n) == CUDA_CACHE_CORRUPT && !bytes,
     "an entry shorter than its header: corrupt");

  /* An entry whose header holds another key (a file renamed or a hash collision on the name). */
  char other[1024];
  ok(cuda_cache_store(c, ks, payload, sizeof payload), "an entry for another key is stored");
  snprintf(other, sizeof other, "%s/%016llx%016llx.cubin", dir, (unsigned long long)ks.h1, (unsigned long long)ks.h2);
  ok(rename(other, path) == 0 && cuda_cache_load(c, k1, &bytes, &n) == CUDA_CACHE_CORRUPT && !bytes,
     "an entry holding another key: corrupt");
  cuda_compile_stats_get(c, &cs);
  is_int(cs.corrupt_entries, 4, "four corrupt entries counted");

  ok(cuda_cache_store(c, kv, payload, 0) && cuda_cache_load(c, kv, &bytes, &n) == CUDA_CACHE_HIT,
     "an empty payload round-trips");
  if (bytes) grace_realloc(vm, bytes, n, 0);
  grace_vm_free(vm);

  /* A cache directory that cannot exist (a path through a file): no cache, no error, no crash. */
  setenv("GRACE_CACHE_DIR", "/dev/null/grace", 1);
  vm = new_vm();
  c = vm ? cuda_state(vm) : NULL;
  ok(c && cuda_cache_dir(c) == NULL, "an unusable GRACE_CACHE_DIR turns the disk cache off");
  ok(c && !cuda_cache_store(c, k1, payload, sizeof payload) && cuda_cache_load(c, k1, &bytes, &n) == CUDA_CACHE_MISS,
     "then a store does nothing and a load misses");
  if (vm && !cuda_nvrtc_why(vm)) {
    char *out = NULL;
    grace_status s = cuda_nvrtc_compile(vm, scale_src, 90, 1, &out, &n);
    ok(s == GRACE_OK, "NVRTC still works without a disk cache");
    if (out) grace_realloc(vm, out, n, 0);
  } else
    skip("no NVRTC");
  grace_vm_free(vm);

  /* Without GRACE_CACHE_DIR: ~/.cache/grace. */
  unsetenv("GRACE_CACHE_DIR");
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char fake_home[512], expect[600];
  snprintf(fake_home, sizeof fake_home, "%s/home", tmpdir);
  snprintf(expect, sizeof expect, "%s/.cache/grace", fake_home);
  mkdir(fake_home, 0755);
  setenv("HOME", fake_home, 1);
  vm = new_vm();
  c = vm ? cuda_state(vm) : NULL;
  const char *got = c ? cuda_cache_dir(c) : NULL;
  ok(got && !strcmp(got, expect) && stat(expect, &st) == 0, "the default cache directory is ~/.cache/grace");
  grace_vm_free(vm);
  if (home) setenv("HOME", home, 1);
  free(home);
}

/* A VM whose disk cache is dir (resolved once per VM, so a new VM per directory). */
static cuda_ctx *cache_in(const char *dir, grace_vm **vm) {
  setenv("GRACE_CACHE_DIR", dir, 1);
  *vm = new_vm();
  return *vm ? cuda_state(*vm) : NULL;
}

static int file_is(const char *path, const char *want) {
  char buf[64] = "";
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return !strcmp(buf, want);
}

static void test_cache_hostile(void) {
  char dir[512], victim[600], path[1024], link[1100];
  snprintf(dir, sizeof dir, "%s/hostile", tmpdir);
  snprintf(victim, sizeof victim, "%s/victim", tmpdir);
  grace_vm *vm = NULL;
  cuda_ctx *c = cache_in(dir, &vm);
  if (!c || !cuda_cache_dir(c)) { ok(0, "a VM with a disk cache in %s", dir); grace_vm_free(vm); return; }
  cuda_key k = cuda_cache_key("hostile", "-O", 90, "13.0"), kv = cuda_cache_key("victim", "-O", 90, "13.0");
  snprintf(path, sizeof path, "%s/%016llx%016llx.cubin", dir, (unsigned long long)k.h1, (unsigned long long)k.h2);
  const char payload[] = "cubin bytes";
  char *bytes = NULL;
  size_t n = 0;

  /* a temporary's old predictable name (PATH.tmp.PID.0) planted as a symlink to another file */
  FILE *f = fopen(victim, "wb");
  if (f) { fputs("precious", f); fclose(f); }
  snprintf(link, sizeof link, "%s.tmp.%ld.0", path, (long)getpid());
  ok(symlink(victim, link) == 0 && cuda_cache_store(c, k, payload, sizeof payload) && file_is(victim, "precious"),
     "a symlink planted at a temporary's name: the store does not write through it");
  unlink(link);
  ok(cuda_cache_load(c, k, &bytes, &n) == CUDA_CACHE_HIT && n == sizeof payload, "and the entry was stored");
  if (bytes) grace_realloc(vm, bytes, n, 0);

  /* an entry that is a symlink to a file holding a valid entry (of this key): refused, then replaced, not followed */
  char elsewhere[1100];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", tmpdir);
  ok(rename(path, elsewhere) == 0 && symlink(elsewhere, path) == 0, "an entry replaced by a symlink to it");
  cuda_compile_stats cs0, cs1;
  cuda_compile_stats_get(c, &cs0);
  cuda_cache_result r = cuda_cache_load(c, k, &bytes, &n);
  cuda_compile_stats_get(c, &cs1);
  ok(r == CUDA_CACHE_CORRUPT && !bytes && cs1.corrupt_entries == cs0.corrupt_entries + 1,
     "a symlinked entry is not read through: corrupt, counted");
  struct stat st;
  ok(cuda_cache_store(c, k, "new", 4) && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
     stat(elsewhere, &st) == 0 && st.st_size == 40 + (long)sizeof payload,
     "the store replaces the symlink by a file and leaves its target alone");

  /* a FIFO as an entry: an open without O_NONBLOCK would wait for a writer forever (alarm: fail, not hang) */
  char fifo[1100];
  snprintf(fifo, sizeof fifo, "%s/%016llx%016llx.cubin", dir, (unsigned long long)kv.h1, (unsigned long long)kv.h2);
  alarm(20);
  ok(mkfifo(fifo, 0600) == 0 && cuda_cache_load(c, kv, &bytes, &n) == CUDA_CACHE_CORRUPT && !bytes,
     "a FIFO planted as an entry: corrupt at once, no wait");
  alarm(0);
  ok(cuda_cache_store(c, kv, payload, sizeof payload) && cuda_cache_load(c, kv, &bytes, &n) == CUDA_CACHE_HIT,
     "the store replaces the FIFO by an entry");
  if (bytes) grace_realloc(vm, bytes, n, 0);
  ok(truncate(fifo, 39) == 0 && cuda_cache_load(c, kv, &bytes, &n) == CUDA_CACHE_CORRUPT && !bytes,
     "a truncated entry: corrupt (recompiled, never trusted)");
  is_int(count_files(dir, ".tmp"), 0, "no temporary is left behind");
  grace_vm_free(vm);

  /* directories that are not safe: writable by others, by the group, owned by another user */
  static const struct { mode_t mode; const char *what; } modes[] = {{0777, "writable by everyone"},
                                                                    {0770, "writable by its group"}};
  for (int i = 0; i < 2; i++) {
    char d[600];
    snprintf(d, sizeof d, "%s/open%d", tmpdir, i);
    mkdir(d, 0700);
    chmod(d, modes[i].mode);
    c = cache_in(d, &vm);
    ok(c && !cuda_cache_dir(c) && !cuda_cache_store(c, k, payload, sizeof payload) && count_files(d, "") == 0,
       "a cache directory %s is refused: no disk cache, nothing written", modes[i].what);
    grace_vm_free(vm);
  }
  if (geteuid() == 0) {   /* only root can give a directory away */
    char d[600];
    snprintf(d, sizeof d, "%s/foreign", tmpdir);
    mkdir(d, 0700);
    c = chown(d, 65534, 65534) == 0 ? cache_in(d, &vm) : NULL;
    ok(c && !cuda_cache_dir(c) && !cuda_cache_store(c, k, payload, sizeof payload) && count_files(d, "") == 0,
       "a cache directory another user owns is refused");
    grace_vm_free(vm);
  } else {
    skip("not root: cannot make a directory another user owns");
  }
  unsetenv("GRACE_CACHE_DIR");
}

/* ---- with a device ---- */
static void test_device(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/gpu-cache", tmpdir);
  setenv("GRACE_CACHE_DIR", dir, 1);
  grace_vm *vm = new_vm();
  cuda_ctx *c = vm ? cuda_get(vm) : NULL;
  if (!c) {
    printf("# SKIP no CUDA device: %s\n", vm ? cuda_why(vm) : "no VM");
    skip("no CUDA device: device tests not run");
    grace_vm_free(vm);
    return;
  }
  const cuda_props *p = cuda_properties(c);
  printf("# %s; %zu MiB, %d SMs, smem %d/%d/%d, L2 %d, driver %d\n", cuda_describe(vm), p->total_mem >> 20,
         p->sms, p->smem_per_block, p->smem_per_block_optin, p->smem_per_sm, p->l2_bytes, p->driver_version);
  ok(p->sms > 0 && p->major >= 7 && p->warp_size == 32 && p->max_threads_per_block >= 1024 &&
     p->smem_per_block_optin >= p->smem_per_block && p->smem_per_block >= 48 * 1024 && p->l2_bytes > 0 &&
     p->total_mem > ((size_t)1 << 30) && p->driver_version >= 11000 && p->name[0],
     "device properties look sane");
  ok(strstr(cuda_describe(vm), "sm_") != NULL, "cuda_describe: %s", cuda_describe(vm));
  ok(cuda_stream(c) != NULL && cuda_driver_fns(c)->cuLaunchKernel != NULL, "a stream and the driver table");
  const cuda_fns *fns = cuda_driver_fns(c);
  if (p->driver_version >= 12040)
    ok(fns->cuStreamBeginCapture_v2 && fns->cuStreamEndCapture && fns->cuGraphInstantiateWithFlags &&
       fns->cuGraphLaunch && fns->cuGraphExecDestroy && fns->cuGraphDestroy && fns->cuGraphExecKernelNodeSetParams_v2 &&
       fns->cuGraphGetNodes && fns->cuGraphNodeGetType && fns->cuGraphKernelNodeGetParams_v2 && fns->cuFuncGetParamInfo &&
       fns->cuKernelGetParamInfo && fns->cuGraphMemsetNodeGetParams && fns->cuGraphMemcpyNodeGetParams,
       "a driver of CUDA 12.4 or later has every graph entry");
  else
    skip("driver older than 12.4: graph entries may be missing");

  /* copies */
  enum { MB = 1 << 20 };
  unsigned char *h = malloc(MB), *back = malloc(MB);
  for (int i = 0; i < MB; i++) h[i] = (unsigned char)(i * 131 + 7);
  CUdeviceptr d = 0;
  grace_status st = cuda_malloc(c, MB, &d);
  ok(st == GRACE_OK && d && d % 256 == 0, "1 MiB allocated, 256-byte aligned");
  st = cuda_copy_to_device(c, d, h, MB);
  if (!st) st = cuda_copy_to_host(c, back, d, MB);
  ok(st == GRACE_OK && !memcmp(h, back, MB), "1 MiB round trip host -> device -> host%s%s", st ? ": " : "",
     st ? grace_last_error(vm) : "");
  CUdeviceptr d2 = 0;
  st = cuda_malloc(c, MB, &d2);
  if (!st) st = cuda_copy_device(c, d2, d, MB);
  memset(back, 0, MB);
  if (!st) st = cuda_copy_to_host(c, back, d2, MB);
  ok(st == GRACE_OK && !memcmp(h, back, MB), "device -> device copy");
  st = cuda_memset(c, d + 1000, 0xAB, 5000);
  if (!st) st = cuda_copy_to_host(c, back, d, MB);
  int good = st == GRACE_OK;
  for (int i = 0; good && i < MB; i++) good = back[i] == (i >= 1000 && i < 6000 ? 0xAB : h[i]);
  ok(good, "memset of bytes 1000..5999 and nothing else");

  /* a kernel with a struct parameter */
  cuda_module *m = NULL;
  CUfunction fn = NULL, fsm = NULL;
  st = cuda_module_get(c, scale_src, &m);
  if (!st) st = cuda_module_function(c, m, "scale", &fn);
  if (!st) st = cuda_module_function(c, m, "smem_sum", &fsm);
  ok(st == GRACE_OK && fn && fsm, "module compiled and loaded, functions found%s%s", st ? ": " : "",
     st ? grace_last_error(vm) : "");
  CUfunction none = NULL;
  st = m ? cuda_module_function(c, m, "no_such_kernel", &none) : GRACE_EDEVICE;
  ok(st == GRACE_EDEVICE && strstr(grace_last_error(vm), "no_such_kernel") && !none,
     "a missing function is an error naming it: %s", grace_last_error(vm));

  long long n = 250000;
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  for (long long i = 0; i < n; i++) x[i] = (float)i * 0.37f - 1000.0f;
  CUdeviceptr dx = 0;
  st = cuda_malloc(c, sizeof(float) * (size_t)n, &dx);
  if (!st) st = cuda_copy_to_device(c, dx, x, sizeof(float) * (size_t)n);
  struct { CUdeviceptr x; long long n; double s; } params = {dx, n, 1.0 / 3.0};
  unsigned grid[3] = {(unsigned)((n + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
  CUevent e0 = NULL, e1 = NULL;
  if (!st) st = cuda_event_new(c, &e0);
  if (!st) st = cuda_event_new(c, &e1);
  if (!st) st = cuda_event_record(c, e0);
  if (!st && fn) st = cuda_launch(c, fn, grid, block, 0, &params, sizeof params);
  if (!st) st = cuda_event_record(c, e1);
  float ms = -1;
  if (!st) st = cuda_event_elapsed(c, e0, e1, &ms);
  if (!st) st = cuda_copy_to_host(c, y, dx, sizeof(float) * (size_t)n);
  good = st == GRACE_OK;
  for (long long i = 0; good && i < n; i++) good = y[i] == (float)((double)x[i] * (1.0 / 3.0));
  ok(good, "the kernel scaled %lld floats as the host does%s%s", n, st ? ": " : "", st ? grace_last_error(vm) : "");
  ok(st == GRACE_OK && ms >= 0 && ms < 10000, "events time the launch (%.3f ms)", ms);
  cuda_event_free(c, e0);
  cuda_event_free(c, e1);

  /* dynamic shared memory past the 48 KB default */
  int words = p->smem_per_block_optin >= 96 * 1024 ? 96 * 1024 / 4 : 48 * 1024 / 4;
  for (int i = 0; i < words; i++) x[i] = (float)(i % 7);
  double want = 0;
  for (int i = 0; i < words; i++) want += i % 7;
  struct { CUdeviceptr x; long long n; double s; } sp = {dx, words, 0};
  unsigned g1[3] = {1, 1, 1}, b1[3] = {256, 1, 1};
  st = cuda_copy_to_device(c, dx, x, sizeof(float) * (size_t)words);
  if (!st && fsm) st = cuda_launch(c, fsm, g1, b1, (unsigned)(words * 4), &sp, sizeof sp);
  float got = 0;
  if (!st) st = cuda_copy_to_host(c, &got, dx, sizeof got);
  ok(st == GRACE_OK && got == (float)want, "a launch with %d KB of dynamic shared memory (%g, want %g)%s%s",
     words * 4 / 1024, got, want, st ? ": " : "", st ? grace_last_error(vm) : "");

  /* the caching allocator */
  cuda_mem_stats s0, s1;
  cuda_memory_stats(c, &s0);
  cuda_release(c, d2, MB);
  CUdeviceptr d3 = 0;
  st = cuda_malloc(c, MB, &d3);
  cuda_memory_stats(c, &s1);
  ok(st == GRACE_OK && d3 == d2 && s1.ncache_hits == s0.ncache_hits + 1 && s1.ndriver_allocs == s0.ndriver_allocs,
     "a released block is reused by the next allocation of its size");
  ok(s1.reserved >= s1.allocated && s1.allocated >= 2 * (size_t)MB && s1.peak_allocated >= s1.allocated,
     "reserved %zu >= allocated %zu, peak %zu", s1.reserved, s1.allocated, s1.peak_allocated);
  CUdeviceptr z1 = 0, z2 = 0;
  st = cuda_malloc(c, 0, &z1);
  if (!st) st = cuda_malloc(c, 0, &z2);
  ok(st == GRACE_OK && z1 && z2 && z1 != z2, "0-byte allocations give distinct valid pointers");
  cuda_release(c, z1, 0);
  cuda_release(c, z2, 0);

  CUdeviceptr huge = 0;
  st = cuda_malloc(c, p->total_mem * 2, &huge);
  cuda_memory_stats(c, &s1);
  ok(st == GRACE_ENOMEM && huge == 0 && strstr(grace_last_error(vm), "out of memory") &&
     s1.noom_retries == s0.noom_retries + 1,
     "twice the device memory: GRACE_ENOMEM after one retry: %s", grace_last_error(vm));
  CUdeviceptr after = 0;
  st = cuda_malloc(c, 3 * MB, &after);
  if (!st) st = cuda_memset(c, after, 0, 3 * MB);
  if (!st) st = cuda_sync(c);
  ok(st == GRACE_OK && after, "the allocator works after an out-of-memory error");
  cuda_release(c, after, 3 * MB);
  cuda_empty_cache(c);
  cuda_memory_stats(c, &s1);
  ok(s1.reserved == s1.allocated, "empty_cache leaves only live blocks reserved (%zu)", s1.reserved);

  /* module caches */
  cuda_compile_stats cs0, cs1;
  cuda_compile_stats_get(c, &cs0);
  cuda_module *m2 = NULL;
  st = cuda_module_get(c, scale_src, &m2);
  cuda_compile_stats_get(c, &cs1);
  ok(st == GRACE_OK && m2 == m && cs1.memory_hits == cs0.memory_hits + 1 && cs1.nvrtc_calls == cs0.nvrtc_calls,
     "the same source again: a memory hit");
  free(h);
  free(back);
  free(x);
  free(y);
  grace_vm_free(vm);

  vm = new_vm();
  c = vm ? cuda_get(vm) : NULL;
  m = NULL;
  st = c ? cuda_module_get(c, scale_src, &m) : GRACE_EDEVICE;
  if (c) cuda_compile_stats_get(c, &cs1);
  ok(c && st == GRACE_OK && m && cs1.disk_hits == 1 && cs1.nvrtc_calls == 0,
     "a fresh VM loads it from the disk cache with no NVRTC call");
  /* a corrupt entry on disk is recompiled and rewritten */
  grace_vm_free(vm);
  DIR *dd = opendir(dir);
  struct dirent *e;
  while (dd && (e = readdir(dd))) {
    if (!strstr(e->d_name, ".cubin")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r+b");
    if (f) { fseek(f, 100, SEEK_SET); int ch = fgetc(f); fseek(f, 100, SEEK_SET); fputc(ch ^ 1, f); fclose(f); }
  }
  if (dd) closedir(dd);
  vm = new_vm();
  c = vm ? cuda_get(vm) : NULL;
  st = c ? cuda_module_get(c, scale_src, &m) : GRACE_EDEVICE;
  if (c) cuda_compile_stats_get(c, &cs1);
  ok(c && st == GRACE_OK && cs1.corrupt_entries == 1 && cs1.nvrtc_calls == 1 && cs1.disk_hits == 0,
     "a corrupt disk entry is recompiled");
  grace_vm_free(vm);
  vm = new_vm();
  c = vm ? cuda_get(vm) : NULL;
  st = c ? cuda_module_get(c, scale_src, &m) : GRACE_EDEVICE;
  if (c) cuda_compile_stats_get(c, &cs1);
  ok(c && st == GRACE_OK && cs1.disk_hits == 1 && cs1.nvrtc_calls == 0, "and rewritten: the next VM hits the disk");
  grace_vm_free(vm);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/grace-test-cuda-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    printf("1..0 # SKIP cannot make a temp dir\n");
    return 0;
  }
  setenv("GRACE_CACHE_DIR", tmpdir, 1);
  grace_vm *vm = new_vm();
  if (!vm) {
    ok(0, "a VM");
    return tap_done();
  }
  test_no_device(vm);
  test_nvrtc(vm);
  grace_vm_free(vm);
  test_disk_cache();
  test_cache_hostile();
  test_device();
  is_int(live_bytes, 0, "every VM gave back all its host memory");
  remove_tree(tmpdir);
  return tap_done();
}
