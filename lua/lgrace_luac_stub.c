/* lgrace_luac_stub.c: TEMPORARY stand-in for lgrace_luac.c (the bytecode analysis), for testing until it lands:
 * reads the source line of the caller and accepts `:item() OP number` and `if ...:item() then`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lauxlib.h>
#include "lua/lgrace_luac.h"

int lg_cmp_site(lua_State *L, int level, lg_cmp *out, char *why, size_t nwhy) {
  lua_Debug ar;
  memset(out, 0, sizeof *out);
  if (!lua_getstack(L, level, &ar) || !lua_getinfo(L, "Sl", &ar) || ar.source[0] != '@') {
    snprintf(why, nwhy, "?: no source");
    return 0;
  }
  out->line = ar.currentline;
  FILE *f = fopen(ar.source + 1, "r");
  char line[1024] = "";
  for (int i = 0; f && i < ar.currentline; i++) if (!fgets(line, sizeof line, f)) break;
  if (f) fclose(f);
  const char *p = strstr(line, ":item()");
  if (!p || strstr(p + 1, ":item()")) { snprintf(why, nwhy, "%s:%d: not one item() comparison", ar.short_src, ar.currentline); return 0; }
  p += 7;
  while (*p == ' ' || *p == ')') p++;
  if (!strncmp(p, "then", 4) && strstr(line, "if ")) { out->op = LG_CMP_TRUTH; return 1; }
  static const char *ops[] = {"<=", ">=", "==", "~=", "<", ">"};
  static const lg_cmp_op codes[] = {LG_CMP_LE, LG_CMP_GE, LG_CMP_EQ, LG_CMP_NE, LG_CMP_LT, LG_CMP_GT};
  for (int i = 0; i < 6; i++)
    if (!strncmp(p, ops[i], strlen(ops[i]))) {
      char *end;
      out->k = strtod(p + strlen(ops[i]), &end);
      if (end == p + strlen(ops[i]) || !strstr(end, "then") || !strstr(line, "if ")) break;
      out->op = codes[i];
      return 1;
    }
  snprintf(why, nwhy, "%s:%d: the value is used otherwise", ar.short_src, ar.currentline);
  return 0;
}
