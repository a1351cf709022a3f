/* pdl_check.h: whether a generated kernel source starts, before anything it reads, with the entry of a programmatic
 * dependent launch (codegen's cg_pdl_enter: let the next kernel launch, then wait for the earlier ones). A kernel
 * launched that way that read first would race with the kernel before it. A predicated kernel (gpu/gpu_pred.c) starts
 * instead with the predicate's check, which does the same first and then returns unless its word says to go on. */
#ifndef GRACE_TEST_PDL_CHECK_H
#define GRACE_TEST_PDL_CHECK_H
#include <string.h>

static __attribute__((unused)) int pdl_enters_first(const char *src) {
  static const char enter[] = "{\n#if __CUDA_ARCH__ >= 900\n"
                              "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
                              "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");";
  const char *g = src ? strstr(src, "__global__") : NULL;
  const char *body = g ? strstr(g, "{\n") : NULL;
  return body && !strncmp(body, enter, sizeof enter - 1) && !strstr(body, "__global__");
}
/* Whether src's kernel enters predicated: the check (dependents launched, the wait, the return) is the body's start. */
static __attribute__((unused)) int pred_enters_first(const char *src) {
  static const char enter[] = "{\n  {   /* grace: predicated */\n#if __CUDA_ARCH__ >= 900\n"
                              "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
                              "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n#endif\n"
                              "    if (*(const volatile unsigned *)grace_pred != grace_want) return;\n  }\n";
  const char *g = src ? strstr(src, "__global__") : NULL;
  const char *sig = g ? strstr(g, "const unsigned *grace_pred, const unsigned grace_want) {") : NULL;
  const char *body = g ? strstr(g, "{\n") : NULL;
  return sig && body && !strncmp(body, enter, sizeof enter - 1);
}
#endif
