/* cuda_link.c: nvJitLink, loaded with dlopen like NVRTC, and the device runtime library it links against. A kernel
 * that calls into the device runtime (cudaGraphSetConditional, which sets a conditional graph node's handle from
 * the device) cannot be a plain NVRTC cubin: it is compiled relocatable (-rdc=true) and linked with libcudadevrt.a,
 * a static library of the CUDA toolkit found where the toolkit's other files are ($CUDA_HOME, /usr/local/cuda).
 * Both are optional: without them the features that need such kernels are off, and cuda_link_why says why. The
 * link needs no GPU. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cuda/cuda_internal.h"

typedef struct nvJitLink *nvJitLinkHandle;
typedef int nvJitLinkResult;
enum { NVJITLINK_INPUT_CUBIN = 1, NVJITLINK_INPUT_LIBRARY = 6 };

struct cuda_link_fns {
  nvJitLinkResult (*nvJitLinkCreate)(nvJitLinkHandle *, uint32_t, const char **);
  nvJitLinkResult (*nvJitLinkDestroy)(nvJitLinkHandle *);
  nvJitLinkResult (*nvJitLinkAddData)(nvJitLinkHandle, int, const void *, size_t, const char *);
  nvJitLinkResult (*nvJitLinkAddFile)(nvJitLinkHandle, int, const char *);
  nvJitLinkResult (*nvJitLinkComplete)(nvJitLinkHandle);
  nvJitLinkResult (*nvJitLinkGetLinkedCubinSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*nvJitLinkGetLinkedCubin)(nvJitLinkHandle, void *);
  nvJitLinkResult (*nvJitLinkGetErrorLogSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*nvJitLinkGetErrorLog)(nvJitLinkHandle, char *);
};

/* The toolkit folders to look in: $CUDA_HOME, then /usr/local/cuda. */
static int toolkit_dirs(const char **dirs) {
  const char *home = getenv("CUDA_HOME");
  int n = 0;
  if (home && *home) dirs[n++] = home;
  dirs[n++] = "/usr/local/cuda";
  return n;
}

static void *open_lib(void) {
  static const char *names[] = {"libnvJitLink.so", "libnvJitLink.so.13", "libnvJitLink.so.12"};
  const char *dirs[2];
  int nd = toolkit_dirs(dirs);
  for (size_t i = 0; i < 3; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  for (int d = 0; d < nd; d++)
    for (size_t i = 0; i < 3; i++) {
      char path[4096];
      void *h = NULL;
      if (snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]) < (int)sizeof path)
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
  return NULL;
}

/* libcudadevrt.a in the toolkit's library folders; 0 when none is there. */
static int find_devrt(cuda_ctx *c) {
  static const char *subs[] = {"lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"};
  const char *dirs[2];
  int nd = toolkit_dirs(dirs);
  for (int d = 0; d < nd; d++)
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
      if (snprintf(c->devrt_path, sizeof c->devrt_path, "%s/%s/libcudadevrt.a", dirs[d], subs[i]) <
              (int)sizeof c->devrt_path &&
          access(c->devrt_path, R_OK) == 0)
        return 1;
  c->devrt_path[0] = 0;
  return 0;
}

static int link_load(cuda_ctx *c) {
  if (c->link_probed) return c->link_ok;
  c->link_probed = 1;
  if (!(c->link_lib = open_lib())) {
    snprintf(c->link_why, sizeof c->link_why,
             "nvJitLink not found (libnvJitLink.so on the loader path, in $CUDA_HOME/lib64 or /usr/local/cuda/lib64)");
    return 0;
  }
  if (!c->lk && !(c->lk = vm_calloc(c->vm, sizeof *c->lk))) {
    snprintf(c->link_why, sizeof c->link_why, "out of host memory");
    return 0;
  }
  struct cuda_link_fns *f = c->lk;
#define REQ(name)                                                                                       \
  if (!(*(void **)&f->name = dlsym(c->link_lib, #name))) {                                              \
    snprintf(c->link_why, sizeof c->link_why, "libnvJitLink lacks %s", #name);                          \
    return 0;                                                                                           \
  }
  REQ(nvJitLinkCreate) REQ(nvJitLinkDestroy) REQ(nvJitLinkAddData) REQ(nvJitLinkAddFile) REQ(nvJitLinkComplete)
  REQ(nvJitLinkGetLinkedCubinSize) REQ(nvJitLinkGetLinkedCubin) REQ(nvJitLinkGetErrorLogSize) REQ(nvJitLinkGetErrorLog)
#undef REQ
  if (!find_devrt(c)) {
    snprintf(c->link_why, sizeof c->link_why,
             "the device runtime library libcudadevrt.a is not in $CUDA_HOME or /usr/local/cuda (lib64, lib)");
    return 0;
  }
  c->link_ok = 1;
  return 1;
}

const char *cuda_link_why(cuda_ctx *c) { return link_load(c) ? NULL : c->link_why; }

/* The failed link call as an error, with the first line of nvJitLink's log. */
static grace_status link_error(cuda_ctx *c, nvJitLinkHandle h, nvJitLinkResult r, const char *call) {
  char log[512] = "";
  size_t n = 0;
  if (h && c->lk->nvJitLinkGetErrorLogSize(h, &n) == 0 && n > 0 && n <= sizeof log) c->lk->nvJitLinkGetErrorLog(h, log);
  char *nl = strchr(log, '\n');
  if (nl) *nl = 0;
  return vm_err(c->vm, GRACE_EINTERNAL, "%s: nvJitLinkResult %d%s%s", call, r, *log ? ": " : "", log);
}

grace_status cuda_link_devrt(cuda_ctx *c, const char *image, size_t n, int arch, char **out, size_t *nout) {
  *out = NULL;
  *nout = 0;
  if (!link_load(c)) return vm_err(c->vm, GRACE_EUNSUPPORTED, "cuda: %s", c->link_why);
  char archopt[32];
  snprintf(archopt, sizeof archopt, "-arch=sm_%d", arch);
  const char *opts[] = {archopt};
  nvJitLinkHandle h = NULL;
  nvJitLinkResult r = c->lk->nvJitLinkCreate(&h, 1, opts);
  if (r) return link_error(c, NULL, r, "nvJitLinkCreate");
  grace_status st = GRACE_OK;
  size_t size = 0;
  char *buf = NULL;
  if ((r = c->lk->nvJitLinkAddData(h, NVJITLINK_INPUT_CUBIN, image, n, "grace.cubin"))) st = link_error(c, h, r, "nvJitLinkAddData");
  else if ((r = c->lk->nvJitLinkAddFile(h, NVJITLINK_INPUT_LIBRARY, c->devrt_path)))
    st = link_error(c, h, r, "nvJitLinkAddFile(libcudadevrt.a)");
  else if ((r = c->lk->nvJitLinkComplete(h))) st = link_error(c, h, r, "nvJitLinkComplete");
  else if ((r = c->lk->nvJitLinkGetLinkedCubinSize(h, &size)) || size == 0)
    st = link_error(c, h, r, "nvJitLinkGetLinkedCubinSize");
  else if (!(buf = grace_realloc(c->vm, NULL, 0, size)))
    st = vm_err(c->vm, GRACE_ENOMEM, "cuda: out of host memory for a %zu-byte linked image", size);
  else if ((r = c->lk->nvJitLinkGetLinkedCubin(h, buf))) st = link_error(c, h, r, "nvJitLinkGetLinkedCubin");
  c->lk->nvJitLinkDestroy(&h);
  if (st != GRACE_OK) {
    if (buf) grace_realloc(c->vm, buf, size, 0);
    return st;
  }
  *out = buf;
  *nout = size;
  return GRACE_OK;
}

void cuda_link_free(cuda_ctx *c) {
  if (c->lk) vm_free(c->vm, c->lk, sizeof *c->lk);
  c->lk = NULL;
  c->link_lib = NULL;   /* kept mapped, as NVRTC: the next VM's dlopen is free */
  c->link_probed = c->link_ok = 0;
}
