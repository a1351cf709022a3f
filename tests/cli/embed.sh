#!/bin/sh
# embed.sh: the hosts of examples/embed (built by make examples): c_only (the C API alone), game_loop (a C program
# owning its lua_State through grace_lua.h) and host.py (Python through ctypes on libgrace.so), each checking its
# results against plain C or NumPy. Run by prove through tests/run.sh, which sets $GRACE (the build folder is its folder).
GRACE=${GRACE:-build/grace}
build=$(dirname "$GRACE")
. "$(dirname "$0")/lib.sh"

echo "1..10"
out=$("$build/examples/c_only" 2>&1); st=$?
ok $st "c_only exits 0" "$out"
matches "c_only: results equal plain C on both shapes" "$out" '^c_only: ok$'
matches "c_only: a new shape traces again (2 traces, 4 hits)" "$out" '^calls 6, traces 2, hits 4, entries 2$'
matches "c_only: explain names the compiled partition" "$out" 'compiles to 1 partition of 5 ops'

out=$("$build/examples/game_loop" 2>&1); st=$?
ok $st "game_loop exits 0" "$out"
matches "game_loop: positions equal plain C every frame (within 1e-3)" "$out" '^game_loop: ok$'
matches "game_loop: no trace after warm-up" "$out" '^traces after warm-up: 0 \(in all 1\)$'
matches "game_loop: p50 and p99 frame times" "$out" '^frames 600 \(10\.0 s simulated\), frame time p50 [0-9.]+ ms, p99 [0-9.]+ ms$'

if [ -n "${GRACE_SANITIZED:-}" ]; then   # a sanitized libgrace.so cannot load into an unsanitized python3
  echo "ok 9 # SKIP sanitized build"; echo "ok 10 # SKIP sanitized build"; exit $((failed != 0))
fi
out=$("$(sh tests/python.sh)" examples/embed/host.py "$build/libgrace.so" 2>&1); st=$?
ok $st "host.py (ctypes) exits 0" "$out"
matches "host.py: results equal NumPy on both shapes" "$out" '^host.py: ok$'
[ $failed -eq 0 ]
