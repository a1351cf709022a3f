#!/bin/sh
# headers.sh: the public headers (grace.h, grace_ops.h, grace_lua.h) compile alone as strict C11
# (-std=c11 -Wall -Wextra -pedantic -Werror) and as C++ (g++), and a C++ program links and calls libgrace
# (the extern "C" block). Run by prove through tests/run.sh, which sets $GRACE (the build folder is its folder).
GRACE=${GRACE:-build/grace}
build=$(dirname "$GRACE")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/lib.sh"
echo "1..7"
flags="-Wall -Wextra -pedantic -Werror -Iinclude -I/usr/include/lua5.4 ${GRACE_DEP_CFLAGS:-}"
for h in grace.h grace_ops.h grace_lua.h; do
  printf '#include "%s"\n#include "%s"\nint grace_header_test;\n' "$h" "$h" > "$tmp/h.c"   # twice: the guard
  out=$(cc -std=c11 $flags -c "$tmp/h.c" -o "$tmp/h.o" 2>&1); ok $? "$h compiles alone as C11 with -pedantic" "$out"
  cp "$tmp/h.c" "$tmp/h.cc"
  out=$(g++ -std=c++11 $flags -c "$tmp/h.cc" -o "$tmp/h.o" 2>&1); ok $? "$h compiles as C++11" "$out"
done
cat > "$tmp/use.cc" <<'CC'
#include <cstdio>
#include "grace.h"
int main() {
  char err[256];
  grace_vm *vm = grace_vm_new(nullptr, err, sizeof err);
  if (!vm) { std::printf("%s\n", err); return 1; }
  grace_tensor *t = nullptr, *s = nullptr;
  int64_t sizes[] = {3};
  float data[] = {1, 2, 3}, sum = 0;
  if (grace_tensor_from_data(vm, GRACE_FLOAT32, 1, sizes, GRACE_FLOAT32, data, &t) != GRACE_OK ||
      grace_run(vm, GRACE_OP_SUM, 1, &t, nullptr, 1, &s) != GRACE_OK ||
      grace_tensor_read(vm, s, GRACE_FLOAT32, &sum) != GRACE_OK) { std::printf("%s\n", grace_last_error(vm)); return 1; }
  std::printf("%g\n", sum);
  grace_tensor_release(s); grace_tensor_release(t); grace_vm_free(vm);
  return 0;
}
CC
out=$(g++ -std=c++11 $flags -o "$tmp/use" "$tmp/use.cc" "$build/libgrace.a" ${GRACE_DEP_LIBS:-} -lmimalloc -ljansson -lz -lm -ldl -lpthread \
      ${GRACE_SANITIZED:+-fsanitize=address,undefined} 2>&1 && GRACE_DEVICE=cpu "$tmp/use" 2>&1)
[ "$out" = 6 ]; ok $? "a C++ program links libgrace.a and sums [1, 2, 3]" "$out"
[ $failed -eq 0 ]
