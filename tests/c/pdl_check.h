/* pdl_check.h: whether a generated kernel source starts, before anything it reads, with the entry of a programmatic
 * dependent launch (codegen's cg_pdl_enter: let the next kernel launch, then wait for the earlier ones). A kernel
 * launched that way that read first would race with the kernel before it. */
#ifndef GRACE_TEST_PDL_CHECK_H
#define GRACE_TEST_PDL_CHECK_H
#include <string.h>

static int pdl_enters_first(const char *src) {
  static const char enter[] = "{\n#if __CUDA_ARCH__ >= 900\n"
                              "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
                              "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");";
  const char *g = src ? strstr(src, "__global__") : NULL;
  const char *body = g ? strstr(g, "{\n") : NULL;
  return body && !strncmp(body, enter, sizeof enter - 1) && !strstr(body, "__global__");
}
#endif
