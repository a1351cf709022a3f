/* cuda_nvrtc.c: NVRTC loaded with dlopen (it works without a GPU or driver), kernels compiled to PTX or cubin,
 * and the two caches in front of it: loaded modules in memory (per VM) and cubins on disk (shared by processes,
 * keyed by source, options, architecture and NVRTC version). A disk entry is checked (magic, key, length,
 * checksum) before it is trusted; a bad one is recompiled and replaced through a temp file and a rename, so a
 * concurrent reader never sees half a file.
 * The cache directory may sit where other users can write (GRACE_CACHE_DIR=/tmp/...), so: it is made 0700 and
 * refused (no disk cache) when another user owns it or others may write it; an entry is opened without following
 * a symlink and without blocking (a FIFO planted there), and only a regular file is read; temporaries are made with
 * mkstemp (an unpredictable name, created exclusively). The checksum finds damage, not forgery: only the
 * directory's owner can write an entry, and that user can already run any code as themselves. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cuda/cuda_internal.h"

#define NVRTC_OPTIONS "--std=c++17 -DNDEBUG"
#define CACHE_MAGIC "GRCUBIN1"
enum { CACHE_HEADER = 40, LOG_LINES = 20 };
#define CACHE_MAX_ENTRY ((size_t)1 << 30)

/* ---- loading NVRTC ---- */
static int nvrtc_try(cuda_ctx *c, const char *path) {
  c->nvrtc_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return c->nvrtc_lib != NULL;
}

static int nvrtc_open(cuda_ctx *c) {
  static const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
  const char *home = getenv("CUDA_HOME");
  const char *dirs[] = {home && *home ? home : NULL, "/usr/local/cuda"};
  for (size_t i = 0; i < 3; i++)
    if (nvrtc_try(c, names[i])) return 1;
  for (size_t d = 0; d < 2; d++) {
    if (!dirs[d]) continue;
    for (size_t i = 0; i < 3; i++) {
      char path[4096];
      if (snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]) < (int)sizeof path && nvrtc_try(c, path))
        return 1;
    }
  }
  snprintf(c->nvrtc_why, sizeof c->nvrtc_why,
           "NVRTC not found (libnvrtc.so, .so.13, .so.12 on the loader path, in $CUDA_HOME/lib64 or "
           "/usr/local/cuda/lib64)");
  return 0;
}

static int nvrtc_load(cuda_ctx *c) {
  if (c->nvrtc_probed) return c->nvrtc_ok;
  c->nvrtc_probed = 1;
  if (!nvrtc_open(c)) return 0;
  cuda_nvrtc_fns *f = &c->nv;
#define REQ(name)                                                                                       \
  if (!(*(void **)&f->name = dlsym(c->nvrtc_lib, #name))) {                                             \
    snprintf(c->nvrtc_why, sizeof c->nvrtc_why, "libnvrtc lacks %s", #name);                            \
    return 0;                                                                                           \
  }
  REQ(nvrtcGetErrorString) REQ(nvrtcVersion) REQ(nvrtcCreateProgram) REQ(nvrtcDestroyProgram)
  REQ(nvrtcCompileProgram) REQ(nvrtcGetPTXSize) REQ(nvrtcGetPTX) REQ(nvrtcGetCUBINSize) REQ(nvrtcGetCUBIN)
  REQ(nvrtcGetProgramLogSize) REQ(nvrtcGetProgramLog)
#undef REQ
  int major = 0, minor = 0;
  nvrtcResult r = f->nvrtcVersion(&major, &minor);
  if (r) {
    snprintf(c->nvrtc_why, sizeof c->nvrtc_why, "nvrtcVersion: %s (nvrtcResult %d)", f->nvrtcGetErrorString(r), r);
    return 0;
  }
  snprintf(c->nvrtc_version, sizeof c->nvrtc_version, "%d.%d", major, minor);
  c->nvrtc_ok = 1;
  return 1;
}

const char *cuda_nvrtc_why(grace_vm *vm) {
  cuda_ctx *c = cuda_state(vm);
  if (!c) return "out of host memory";
  return nvrtc_load(c) ? NULL : c->nvrtc_why;
}

const char *cuda_nvrtc_version(grace_vm *vm) {
  cuda_ctx *c = cuda_state(vm);
  return c && nvrtc_load(c) ? c->nvrtc_version : "none";
}

/* ---- compiling ---- */
static double now_s(void) { return grace_clock(); }

static grace_status nvrtc_err(grace_vm *vm, cuda_ctx *c, nvrtcResult r, const char *call) {
  return vm_err(vm, GRACE_EINTERNAL, "%s: %s (nvrtcResult %d)", call, c->nv.nvrtcGetErrorString(r), r);
}

/* The compile error with the first lines of NVRTC's log (the source itself is not repeated). */
static grace_status compile_error(grace_vm *vm, cuda_ctx *c, nvrtcProgram prog, nvrtcResult r) {
  size_t n = 0;
  char *log = NULL;
  if (c->nv.nvrtcGetProgramLogSize(prog, &n) == 0 && n > 0 && (log = grace_realloc(vm, NULL, 0, n + 1))) {
    if (c->nv.nvrtcGetProgramLog(prog, log) != 0) log[0] = 0;
    log[n] = 0;
    char *p = log;
    for (int line = 0; *p && line < LOG_LINES; line++) {
      p = strchr(p, '\n');
      if (!p) break;
      p++;
    }
    if (p && *p) *p = 0;
  }
  vm_err(vm, GRACE_EINTERNAL, "nvrtcCompileProgram: %s (nvrtcResult %d)\n%s", c->nv.nvrtcGetErrorString(r), r,
         log ? log : "(no log)");
  if (log) grace_realloc(vm, log, n + 1, 0);
  return GRACE_EINTERNAL;
}

static grace_status compile(grace_vm *vm, cuda_ctx *c, const char *src, int arch, int ptx, int rdc, char **out,
                            size_t *n) {
  *out = NULL;
  *n = 0;
  if (!nvrtc_load(c)) return vm_err(vm, GRACE_EDEVICE, "cuda: %s", c->nvrtc_why);
  char archopt[64];
  /* wgmma and its kind exist only for the architecture-specific target; the marker is in the source, so the
   * cache key (which hashes the source) tells the two targets apart */
  const char *specific = strstr(src, "#define GRACE_ARCH_SPECIFIC") ? "a" : "";
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s_%d%s", ptx ? "compute" : "sm", arch, specific);
  const char *opts[] = {archopt, "--std=c++17", "-DNDEBUG", "-rdc=true"};   /* the last only when rdc */
  double t0 = now_s();
  c->cstats.nvrtc_calls++;
  vm_progress(vm, "compiling kernel %llu with NVRTC", (unsigned long long)c->cstats.nvrtc_calls);
  nvrtcProgram prog = NULL;
  nvrtcResult r = c->nv.nvrtcCreateProgram(&prog, src, "grace.cu", 0, NULL, NULL);
  if (r) return nvrtc_err(vm, c, r, "nvrtcCreateProgram");
  grace_status st = GRACE_OK;
  r = c->nv.nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts) - !rdc, opts);
  if (r) st = compile_error(vm, c, prog, r);
  size_t size = 0;
  if (!st && (r = (ptx ? c->nv.nvrtcGetPTXSize : c->nv.nvrtcGetCUBINSize)(prog, &size)))
    st = nvrtc_err(vm, c, r, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize");
  char *buf = NULL;
  if (!st && size == 0) st = vm_err(vm, GRACE_EINTERNAL, "cuda: NVRTC produced an empty image");
  if (!st && !(buf = grace_realloc(vm, NULL, 0, size)))
    st = vm_err(vm, GRACE_ENOMEM, "cuda: out of host memory for a %zu-byte kernel image", size);
  if (!st && (r = (ptx ? c->nv.nvrtcGetPTX : c->nv.nvrtcGetCUBIN)(prog, buf)))
    st = nvrtc_err(vm, c, r, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
  c->nv.nvrtcDestroyProgram(&prog);
  c->cstats.nvrtc_seconds += now_s() - t0;
  if (st) {
    if (buf) grace_realloc(vm, buf, size, 0);
    return st;
  }
  /* PTX's size counts its terminating NUL. */
  *out = buf;
  *n = size;
  return GRACE_OK;
}

grace_status cuda_nvrtc_compile(grace_vm *vm, const char *src, int arch, int ptx, char **out, size_t *n) {
  *out = NULL;
  *n = 0;
  cuda_ctx *c = cuda_state(vm);
  if (!c) return vm_err(vm, GRACE_ENOMEM, "cuda: out of host memory");
  if (arch <= 0) {
    cuda_ctx *dev = cuda_get(vm);
    if (!dev) return vm->status;
    arch = dev->props.major * 10 + dev->props.minor;
  }
  return compile(vm, c, src, arch, ptx, 0, out, n);
}

grace_status cuda_nvrtc_compile_image(grace_vm *vm, cuda_ctx *c, const char *src, int arch, int rdc, char **out,
                                      size_t *n) {
  return compile(vm, c, src, arch, 0, rdc, out, n);
}

/* ---- the disk cache ---- */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
  return h;
}

/* A second hash independent of FNV: per 8-byte word, multiply-xorshift mixing (splitmix64's finaliser). */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, s + i, n - i < 8 ? n - i : 8);
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27; h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h ^ n;
}

cuda_key cuda_cache_key(const char *src, const char *options, int arch, const char *nvrtc_version) {
  const char *parts[3] = {src, options, nvrtc_version};
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x6a09e667f3bcc908ull;
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(parts[i]) + 1;   /* the NUL separates the parts */
    h1 = fnv1a(h1, parts[i], n);
    h2 = mix(h2, parts[i], n);
  }
  h1 = fnv1a(h1, &arch, sizeof arch);
  h2 = mix(h2, &arch, sizeof arch);
  return (cuda_key){h1, h2};
}

/* mkdir -p, new folders 0700 (the cache holds code this user will run); 0 on failure. */
static int make_dirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p) continue;
    char saved = *p;
    *p = 0;
    int bad = mkdir(path, 0700) != 0 && errno != EEXIST;
    *p = saved;
    if (bad) return 0;
    if (!saved) break;
  }
  return 1;
}

/* Whether path is a directory this user owns and may write, and no one else may write. */
static int dir_is_private(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         !(st.st_mode & (S_IWGRP | S_IWOTH)) && access(path, W_OK | X_OK) == 0;
}

const char *cuda_cache_dir(cuda_ctx *c) {
  if (c->cache_dir_state == 0) {
    c->cache_dir_state = -1;
    const char *dir = getenv("GRACE_CACHE_DIR"), *home = getenv("HOME");
    int len = -1;
    if (dir && *dir) len = snprintf(c->cache_dir, sizeof c->cache_dir, "%s", dir);
    else if (home && *home) len = snprintf(c->cache_dir, sizeof c->cache_dir, "%s/.cache/grace", home);
    if (len > 0 && len < (int)sizeof c->cache_dir - 64 && make_dirs(c->cache_dir) &&
        dir_is_private(c->cache_dir))
      c->cache_dir_state = 1;
  }
  return c->cache_dir_state == 1 ? c->cache_dir : NULL;
}

static int entry_path(cuda_ctx *c, cuda_key key, char *path, size_t n) {
  const char *dir = cuda_cache_dir(c);
  return dir && snprintf(path, n, "%s/%016llx%016llx.cubin", dir, (unsigned long long)key.h1,
                         (unsigned long long)key.h2) < (int)n;
}

static int read_all(int fd, void *buf, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t k = read(fd, (char *)buf + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    done += (size_t)k;
  }
  return 1;
}

static int write_all(int fd, const void *buf, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t k = write(fd, (const char *)buf + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    done += (size_t)k;
  }
  return 1;
}

cuda_cache_result cuda_cache_load(cuda_ctx *c, cuda_key key, char **bytes, size_t *n) {
  *bytes = NULL;
  *n = 0;
  char path[4200];
  if (!entry_path(c, key, path, sizeof path)) return CUDA_CACHE_MISS;
  /* O_NOFOLLOW: a symlink there is refused (ELOOP), not read through; O_NONBLOCK: opening a FIFO returns at once
   * (then refused as no regular file); cleared again before reading */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return CUDA_CACHE_MISS;
  cuda_cache_result res = CUDA_CACHE_CORRUPT;
  uint64_t hdr[4];
  char magic[8];
  char *buf = NULL;
  struct stat st;
  size_t len = 0;
  int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
  if (fd >= 0 && flags != -1 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 && fstat(fd, &st) == 0 &&
      S_ISREG(st.st_mode) && (size_t)st.st_size >= CACHE_HEADER && read_all(fd, magic, 8) &&
      read_all(fd, hdr, 32) && !memcmp(magic, CACHE_MAGIC, 8) && hdr[0] == key.h1 && hdr[1] == key.h2 &&
      hdr[2] <= CACHE_MAX_ENTRY && (size_t)st.st_size == CACHE_HEADER + hdr[2]) {
    len = (size_t)hdr[2];
    buf = grace_realloc(c->vm, NULL, 0, len ? len : 1);
    if (buf && read_all(fd, buf, len) && fnv1a(0xcbf29ce484222325ull, buf, len) == hdr[3]) res = CUDA_CACHE_HIT;
  }
  if (fd >= 0) close(fd);
  if (res == CUDA_CACHE_HIT) {
    *bytes = buf;
    *n = len ? len : 1;
    return res;
  }
  if (buf) grace_realloc(c->vm, buf, len ? len : 1, 0);
  c->cstats.corrupt_entries++;
  return res;
}

int cuda_cache_store(cuda_ctx *c, cuda_key key, const void *bytes, size_t n) {
  char path[4200], tmp[4300];
  if (!entry_path(c, key, path, sizeof path)) return 0;
  /* mkstemp: a fresh name made with O_EXCL, so nothing planted in the directory is written through */
  if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) return 0;
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t hdr[4] = {key.h1, key.h2, n, fnv1a(0xcbf29ce484222325ull, bytes, n)};
  int good = write_all(fd, CACHE_MAGIC, 8) && write_all(fd, hdr, sizeof hdr) && write_all(fd, bytes, n);
  good = close(fd) == 0 && good;
  if (good && rename(tmp, path) == 0) return 1;
  unlink(tmp);
  return 0;
}

/* ---- modules ---- */
/* The cubin of src for arch: compiled by NVRTC, and for a linked module compiled relocatable and linked with the
 * device runtime (cuda_link.c). */
static grace_status build(cuda_ctx *c, const char *src, int arch, int linked, char **image, size_t *n) {
  if (!linked) return compile(c->vm, c, src, arch, 0, 0, image, n);
  char *rel = NULL;
  size_t nrel = 0;
  grace_status st = compile(c->vm, c, src, arch, 0, 1, &rel, &nrel);
  if (st != GRACE_OK) return st;
  st = cuda_link_devrt(c, rel, nrel, arch, image, n);
  grace_realloc(c->vm, rel, nrel, 0);
  return st;
}

/* GRACE_KERNEL_DIR: each module's CUDA source written there once per process (<key>.cu), to read what ran or to
 * match a kernel a tool names (compute-sanitizer, Nsight) with its code. Best effort: a failed write is ignored. */
static void dump_source(cuda_key key, const char *src) {
  const char *dir = getenv("GRACE_KERNEL_DIR");
  if (!dir || !*dir) return;
  char path[1024];
  if (snprintf(path, sizeof path, "%s/%016llx%016llx.cu", dir, (unsigned long long)key.h1,
               (unsigned long long)key.h2) >= (int)sizeof path) return;
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(src, f);
  fclose(f);
}

static grace_status module_get(cuda_ctx *c, const char *src, int linked, cuda_module **out) {
  grace_vm *vm = c->vm;
  *out = NULL;
  if (!nvrtc_load(c)) return vm_err(vm, GRACE_EDEVICE, "cuda: %s", c->nvrtc_why);
  int arch = c->props.major * 10 + c->props.minor;
  cuda_key key = cuda_cache_key(src, linked ? NVRTC_OPTIONS " -rdc=true +libcudadevrt" : NVRTC_OPTIONS, arch,
                                c->nvrtc_version);
  for (cuda_module *m = c->modules; m; m = m->next)
    if (m->h1 == key.h1 && m->h2 == key.h2) {
      c->cstats.memory_hits++;
      *out = m;
      return GRACE_OK;
    }
  cuda_module *m = vm_calloc(vm, sizeof *m);
  if (!m) return vm_err(vm, GRACE_ENOMEM, "cuda: out of host memory");
  char *image = NULL;
  size_t n = 0;
  CUresult r = 1;
  if (cuda_cache_load(c, key, &image, &n) == CUDA_CACHE_HIT) {
    r = c->fn.cuModuleLoadData(&m->mod, image);
    grace_realloc(vm, image, n, 0);
    if (r == 0) c->cstats.disk_hits++;
    else c->cstats.corrupt_entries++;   /* the checksum held but the driver refused it: recompile over it */
  }
  if (r) {
    grace_status st = build(c, src, arch, linked, &image, &n);
    if (st) {
      vm_free(vm, m, sizeof *m);
      return st;
    }
    cuda_cache_store(c, key, image, n);
    r = c->fn.cuModuleLoadData(&m->mod, image);
    grace_realloc(vm, image, n, 0);
    if (r) {
      vm_free(vm, m, sizeof *m);
      return cuda_check(vm, r, "cuModuleLoadData");
    }
  }
  dump_source(key, src);
  m->h1 = key.h1;
  m->h2 = key.h2;
  m->next = c->modules;
  c->modules = m;
  *out = m;
  return GRACE_OK;
}

grace_status cuda_module_get(cuda_ctx *c, const char *src, cuda_module **out) { return module_get(c, src, 0, out); }

grace_status cuda_module_get_linked(cuda_ctx *c, const char *src, cuda_module **out) {
  return module_get(c, src, 1, out);
}

grace_status cuda_module_function(cuda_ctx *c, cuda_module *m, const char *name, CUfunction *out) {
  *out = NULL;
  CUresult r = c->fn.cuModuleGetFunction(out, m->mod, name);
  if (!r) return GRACE_OK;
  char call[160];
  snprintf(call, sizeof call, "cuModuleGetFunction(\"%.100s\")", name);
  return cuda_check(c->vm, r, call);
}

void cuda_compile_stats_get(cuda_ctx *c, cuda_compile_stats *out) { *out = c->cstats; }

void cuda_nvrtc_free_all(cuda_ctx *c) {
  cuda_module *m = c->modules;
  while (m) {
    cuda_module *next = m->next;
    if (c->usable) c->fn.cuModuleUnload(m->mod);
    vm_free(c->vm, m, sizeof *m);
    m = next;
  }
  c->modules = NULL;
  /* NVRTC is not dlclose'd: unloading it loses the memory its C++ runtime allocated at load (72 KB each time a
   * VM loads it again), and keeping it mapped makes the next VM's dlopen free. */
  c->nvrtc_lib = NULL;
  c->nvrtc_probed = c->nvrtc_ok = 0;
}
