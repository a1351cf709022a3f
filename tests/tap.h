/* tap.h: a minimal TAP producer for C tests: plan, ok/is checks with messages, skips, exit status. */
#ifndef GRACE_TAP_H
#define GRACE_TAP_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define tap_plan(n) printf("1..%d\n", (n))
#define tap_done() (printf("1..%d\n", tap_n), tap_failed ? 1 : 0)
#define ok(cond, ...) tap_ok_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) tap_is_int_((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) tap_is_str_((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define is_near(got, want, tol, ...) tap_is_near_((double)(got), (double)(want), (double)(tol), __FILE__, __LINE__, __VA_ARGS__)
#define skip(reason, ...) (printf("ok %d # SKIP %s\n", ++tap_n, (reason)))

static int tap_ok_(int cond, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#include <stdarg.h>
static __attribute__((unused)) int tap_vok_(int cond, const char *file, int line, const char *fmt, va_list ap) {
  printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
  vprintf(fmt, ap);
  printf("\n");
  if (!cond) { tap_failed++; printf("#   failed at %s line %d\n", file, line); }
  fflush(stdout);
  return cond;
}
static __attribute__((unused)) int tap_ok_(int cond, const char *file, int line, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  int r = tap_vok_(cond, file, line, fmt, ap);
  va_end(ap);
  return r;
}
static __attribute__((unused)) int tap_is_int_(long long got, long long want, const char *file, int line, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  int r = tap_vok_(got == want, file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#          got: %lld\n#     expected: %lld\n", got, want);
  return r;
}
static __attribute__((unused)) int tap_is_str_(const char *got, const char *want, const char *file, int line, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  int r = tap_vok_(got && want && !strcmp(got, want), file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#          got: '%s'\n#     expected: '%s'\n", got ? got : "(null)", want ? want : "(null)");
  return r;
}
static __attribute__((unused)) int tap_is_near_(double got, double want, double tol, const char *file, int line, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt);
  int r = tap_vok_(fabs(got - want) <= tol || (isnan(got) && isnan(want)), file, line, fmt, ap);
  va_end(ap);
  if (!r) printf("#          got: %.9g\n#     expected: %.9g (tolerance %g)\n", got, want, tol);
  return r;
}
#endif
