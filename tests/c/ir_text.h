/* ir_text.h: the C tests' helpers for IR text: parse a program (the parser's error printed as a TAP comment when it
 * fails) and find a part in a printed text (the text printed when the part is missing, for the failure's report). */
#ifndef GRACE_TEST_IR_TEXT_H
#define GRACE_TEST_IR_TEXT_H

#include <stdio.h>
#include <string.h>
#include "grace.h"

/* The program `text` describes, or NULL. */
static inline grace_ir *parse_ir(grace_vm *vm, const char *text) {
  grace_ir *ir = NULL;
  if (grace_ir_parse(vm, text, &ir) != GRACE_OK) printf("# parse: %s\n", grace_last_error(vm));
  return ir;
}

/* Whether text (possibly NULL) holds what. */
static inline int text_has(const char *text, const char *what) {
  int found = text && strstr(text, what) != NULL;
  if (!found) printf("# lacks '%s' in:\n%s", what, text ? text : "(null)");
  return found;
}

#endif
