#!/bin/bash
# device.sh: one call on the GPU machine: unpack the Debian packages carried in .deps, build grace against
# them, run the stages asked for, and leave logs under $OUT.
# Usage (from the repo root): bench/device.sh [stage ...]   (OUT defaults to bench/out)
#   build   always first
#   gpu     the GPU tests alone, verbose (tests/c/test_cuda, test_cg_*, tests/lua/test_gpu_*)
#   test    the whole suite under prove (GPU tests run there instead of skipping)
#   memcheck  the GPU tests under compute-sanitizer memcheck
#   bench   bench/gpu_kernels (kernel bandwidth and GEMM figures)
# With no stage: gpu test bench.
set -u
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
root=$PWD/.deps/root
if [ ! -d "$root/usr/include/lua5.4" ]; then
  mkdir -p "$root"
  for f in .deps/debs/*.deb; do dpkg -x "$f" "$root"; done
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GRACE_CACHE_DIR=${GRACE_CACHE_DIR:-$PWD/.grace-cache}
jobs=$(nproc)
stages=${*:-gpu test bench}
B=build
if ! make DEPS_PREFIX="$root" -j"$jobs" all $(ls tests/c/*.c | sed 's|tests/c/\(.*\)\.c|build/tests/\1|') > "$OUT/build.log" 2>&1; then
  echo "build failed:"; grep -E 'error|Error' "$OUT/build.log" | head -30; tail -5 "$OUT/build.log"; exit 1
fi
echo "build ok"
status=0
gpu_tests="$(ls $B/tests/test_cuda $B/tests/test_cg_* 2>/dev/null) $(ls tests/lua/test_gpu_*.lua 2>/dev/null)"
run_one() {   # a test file, its TAP to a log, a one-line summary
  local t=$1 log=$2; shift 2
  case "$t" in *.lua) "$@" $B/grace "$t" ;; *) "$@" "$t" ;; esac > "$log" 2>&1
  local rc=$?
  printf '%-40s rc=%d ok=%d not_ok=%d skip=%d\n' "$(basename "$t")" $rc "$(grep -c '^ok' "$log")" \
    "$(grep -c '^not ok' "$log")" "$(grep -ci '# skip' "$log")"
  grep -m 12 -A3 '^not ok' "$log" | sed 's/^/    /'
  [ $rc -eq 0 ] || status=1
}
for s in $stages; do
  case $s in
  build) ;;
  gpu)
    echo "== gpu tests"
    for t in $gpu_tests; do run_one "$t" "$OUT/gpu_$(basename "$t").log"; done ;;
  test)
    echo "== make test"
    make DEPS_PREFIX="$root" -j"$jobs" test > "$OUT/test.log" 2>&1 || status=1
    grep -E '\.\.\. |^Files=|^Result|^Failed|not ok' "$OUT/test.log" | grep -v '\.\. ok$' | tail -40
    grep -E '^Files=|^Result' "$OUT/test.log" ;;
  memcheck)
    echo "== compute-sanitizer memcheck"
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for t in $gpu_tests; do
      run_one "$t" "$OUT/memcheck_$(basename "$t").log" "$cs" --tool memcheck --leak-check full --error-exitcode 9
      grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$OUT/memcheck_$(basename "$t").log" | sed 's/^/    /'
    done ;;
  bench)
    echo "== bench"
    if [ -f bench/gpu_kernels.c ]; then
      gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -I. -o $B/gpu_kernels bench/gpu_kernels.c $B/libgrace.a \
        -L"$root/usr/lib/x86_64-linux-gnu" -Wl,-rpath,"$root/usr/lib/x86_64-linux-gnu" -lmimalloc -lm -ldl -lpthread \
        > "$OUT/bench_build.log" 2>&1 || { echo "bench build failed"; tail -20 "$OUT/bench_build.log"; }
      [ -x $B/gpu_kernels ] && $B/gpu_kernels 2>&1 | tee "$OUT/gpu_kernels.txt"
    fi
    for f in bench/gpu_*.lua; do [ -f "$f" ] && $B/grace "$f" 2>&1 | tee "$OUT/$(basename "$f" .lua).txt"; done ;;
  *) echo "unknown stage $s" ;;
  esac
done
$B/grace -e 'print("backend: " .. grace.backend())' 2>&1 | tee -a "$OUT/machine.txt"
exit $status
