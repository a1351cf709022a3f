#!/bin/sh
# c_api_doc.sh: every ```c block of docs/c_api.md is a complete program: each compiles against include/ and the
# build's libgrace.a (strict C11, warnings as errors) and exits 0 (each checks what it prints about).
# Run by prove through tests/run.sh, which sets $GRACE (the build folder is its folder).
GRACE=${GRACE:-build/grace}
build=$(dirname "$GRACE")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
awk -v dir="$tmp" '/^```c$/ { n++; f = dir "/snippet" n ".c"; next } /^```/ { f = ""; next } f { print > f }' docs/c_api.md
count=$(ls "$tmp"/snippet*.c 2>/dev/null | wc -l)
[ "$count" -gt 0 ] || { echo "1..0 # SKIP no c blocks in docs/c_api.md"; exit 1; }
echo "1..$count"
failed=0
for i in $(seq 1 "$count"); do
  src=$tmp/snippet$i.c
  title=$(awk -v n="$i" '/^## / { h = substr($0, 4) } /^```c$/ && ++k == n { print h }' docs/c_api.md)
  out=$(cc -std=c11 -Wall -Wextra -Werror -Iinclude ${GRACE_DEP_CFLAGS:-} -o "$tmp/s$i" "$src" "$build/libgrace.a" \
        ${GRACE_DEP_LIBS:-} -lmimalloc -ljansson -lz -lm -ldl -lpthread ${GRACE_SANITIZED:+-fsanitize=address,undefined} 2>&1 \
        && GRACE_DEVICE=cpu "$tmp/s$i" 2>&1)
  if [ $? -eq 0 ]; then echo "ok $i - docs/c_api.md: $title"; else
    echo "not ok $i - docs/c_api.md: $title"; printf '%s\n' "$out" | sed 's/^/# /'; failed=1; fi
done
exit $failed
