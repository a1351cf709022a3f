#!/bin/sh
# embed.sh: the hosts of examples/embed (built by make examples): c_only (the C API alone), game_loop (a C program
# owning its lua_State through grace_lua.h) and host.py (Python through ctypes on libgrace.so), each checking its
# results against plain C or NumPy. Run by prove through tests/run.sh, which sets $GRACE (the build folder is its folder).
GRACE=${GRACE:-build/grace}
build=$(dirname "$GRACE")
n=0
failed=0
ok() { # ok CONDITION_STATUS NAME [DIAGNOSTIC]
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else
    echo "not ok $n - $2"; failed=$((failed + 1))
    [ -n "$3" ] && printf '%s\n' "$3" | sed 's/^/# /'
  fi
}
has() { # has NAME OUTPUT PATTERN (an extended regular expression one line must match)
  printf '%s\n' "$2" | grep -Eq "$3"; ok $? "$1" "$2"
}

echo "1..10"
out=$("$build/examples/c_only" 2>&1); st=$?
ok $st "c_only exits 0" "$out"
has "c_only: results equal plain C on both shapes" "$out" '^c_only: ok$'
has "c_only: a new shape traces again (2 traces, 4 hits)" "$out" '^calls 6, traces 2, hits 4, entries 2$'
has "c_only: explain names the compiled partition" "$out" 'compiles to 1 partition of 5 ops'

out=$("$build/examples/game_loop" 2>&1); st=$?
ok $st "game_loop exits 0" "$out"
has "game_loop: positions equal plain C every frame (within 1e-3)" "$out" '^game_loop: ok$'
has "game_loop: no trace after warm-up" "$out" '^traces after warm-up: 0 \(in all 1\)$'
has "game_loop: p50 and p99 frame times" "$out" '^frames 600 \(10\.0 s simulated\), frame time p50 [0-9.]+ ms, p99 [0-9.]+ ms$'

if [ -n "${GRACE_SANITIZED:-}" ]; then   # a sanitized libgrace.so cannot load into an unsanitized python3
  echo "ok 9 # SKIP sanitized build"; echo "ok 10 # SKIP sanitized build"; exit $((failed != 0))
fi
out=$("$(sh tests/python.sh)" examples/embed/host.py "$build/libgrace.so" 2>&1); st=$?
ok $st "host.py (ctypes) exits 0" "$out"
has "host.py: results equal NumPy on both shapes" "$out" '^host.py: ok$'
[ $failed -eq 0 ]
