#!/bin/bash
# device.sh: one call on the GPU machine: unpack the Debian packages carried in .deps, build grace against
# them, run the stages asked for, and leave logs under $OUT.
# Usage (from the repo root): bench/device.sh [stage ...]   (OUT defaults to bench/out)
#   build   always first
#   gpu     the GPU tests alone, verbose (tests/c/test_cuda, test_cg_*, test_fuse_random, tests/lua/test_gpu_*)
#   test    the whole suite under prove (GPU tests run there instead of skipping)
#   memcheck  the GPU tests under compute-sanitizer memcheck (racecheck, synccheck: under that tool instead)
#   bench   bench/gpu_kernels, bench/cg_fused_bench (kernel bandwidth, GEMM and attention figures;
#           KERNELS="lmhead rows decode attention gemm": only those sections of gpu_kernels, and no cg_fused_bench)
#   fused   bench/cg_fused_bench alone
#   gemv    bench/gemv_explore.cu (nvcc): GEMV design variants beside grace's own kernels
#   wgmma   bench/gemm_wgmma.cu (nvcc, sm_90a): a TMA + wgmma GEMM against cuBLAS
#   workloads  bench/workloads/run.lua on CUDA (issue 8, grace side)
#   parallel   gpu tests and workloads at once, each under a timeout (one short device call)
#   graphs     bench/graph_replay.lua (host time per graph replay)
#   profile    each kernel of a compiled call under Nsight Compute (bench/profile_step.lua, PROFILE=variants), and
#              the idle time between kernels of the call as a graph under Nsight Systems (else CUPTI through
#              bench/kernel_trace.c), per kernel family
#   ab         this tree against the one in $BASE: a compiled call as a graph, alternating (AB=variants)
#   envab      this tree under two environments ENV_A and ENV_B (e.g. GRACE_PDL=0), the same way
#   generate   gpt2_generate: GPT-2 small generating 256 tokens, PyTorch (gpt-fast's loop) then grace, side by side
#   genprofile grace's gpt2_generate alone (GEN_ARGS) with its launch report, then its kernels under Nsight Compute
#   suite      issue 8: PyTorch and grace workloads on shared weights, alone on the device, and the report
# With no stage: suite (the benchmark suite against PyTorch: report.md, bench.json, report.png under $OUT).
set -u
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
root=$PWD/.deps/root
# (again when a package was added since: tools/fetch-debs.sh downloads the set, Jansson and zlib included)
if [ ! -d "$root/usr/include/lua5.4" ] || [ ! -f "$root/usr/include/jansson.h" ]; then
  mkdir -p "$root"
  for f in .deps/debs/*.deb; do dpkg -x "$f" "$root"; done
  # -dev packages may link absolutely (zlib1g-dev: libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13), a file this
  # machine may not have: point such links into the prefix, where the runtime package was unpacked
  find "$root" -type l | while read -r l; do
    t=$(readlink "$l"); case $t in /*) [ -e "$root$t" ] && ln -sfn "$root$t" "$l" ;; esac
  done
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GRACE_CACHE_DIR=${GRACE_CACHE_DIR:-$PWD/.grace-cache}
jobs=$(nproc)
stages=${*:-suite}
B=build
if ! make DEPS_PREFIX="$root" -j"$jobs" all $(ls tests/c/*.c | sed 's|tests/c/\(.*\)\.c|build/tests/\1|') > "$OUT/build.log" 2>&1; then
  echo "build failed:"; grep -E 'error|Error' "$OUT/build.log" | head -30; tail -5 "$OUT/build.log"; exit 1
fi
echo "build ok"
status=0
gpu_tests=""   # GPU_TESTS="name ...": only the GPU test files whose name holds one of them (gpu, memcheck, parallel)
for t in $(ls $B/tests/test_cuda $B/tests/test_cg_* $B/tests/test_fuse_random 2>/dev/null | grep -v "\.d$") $(ls tests/lua/test_gpu_*.lua 2>/dev/null); do
  for pat in ${GPU_TESTS:-""}; do
    case "$(basename "$t")" in *$pat*) gpu_tests="$gpu_tests $t"; break ;; esac
  done
done
run_one() {   # a test file, its TAP to a log, a one-line summary
  local t=$1 log=$2; shift 2
  case "$t" in *.lua) "$@" $B/grace "$t" ;; *) "$@" "$t" ;; esac > "$log" 2>&1
  local rc=$?
  printf '%-40s rc=%d ok=%d not_ok=%d skip=%d\n' "$(basename "$t")" $rc "$(grep -c '^ok' "$log")" \
    "$(grep -c '^not ok' "$log")" "$(grep -ci '# skip' "$log")"
  grep -m 12 -A3 '^not ok' "$log" | sed 's/^/    /'
  [ $rc -eq 0 ] || status=1
}
link_tool() {   # a C program of bench/ against build/libgrace.a and the carried mimalloc: link_tool src.c out
  gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -I. -o "$2" "$1" $B/libgrace.a \
    -L"$root/usr/lib/x86_64-linux-gnu" -Wl,-rpath,"$root/usr/lib/x86_64-linux-gnu" -lmimalloc -ljansson -lz -lm -ldl -lpthread
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
  memcheck|racecheck|synccheck)   # the GPU tests (GPU_TESTS) under compute-sanitizer's tool of that name
    echo "== compute-sanitizer $s"
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    extra=""; [ "$s" = memcheck ] && extra="--leak-check full"
    pids=""
    for t in $gpu_tests; do   # all at once, each under a timeout: the tools slow kernels 10-100x
      n=$(basename "$t")
      ( run_one "$t" "$OUT/${s}_$n.log" timeout ${T_TIMEOUT:-300} "$cs" --tool "$s" $extra --report-api-errors no \
          --error-exitcode 9 > "$OUT/msum_${s}_$n.txt"
        grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY' "$OUT/${s}_$n.log" | sed 's/^/    /' >> "$OUT/msum_${s}_$n.txt" ) &
      pids="$pids $!"
    done
    wait $pids
    cat "$OUT"/msum_${s}_*.txt
    grep -q 'not_ok=[1-9]\|rc=[1-9]' "$OUT"/msum_${s}_*.txt && status=1 ;;
  bench)
    echo "== bench"
    if [ -f bench/gpu_kernels.c ]; then
      link_tool bench/gpu_kernels.c $B/gpu_kernels > "$OUT/bench_build.log" 2>&1 ||
        { echo "bench build failed"; tail -20 "$OUT/bench_build.log"; }
      [ -x $B/gpu_kernels ] && timeout 120 $B/gpu_kernels ${KERNELS:-} 2>&1 | tee "$OUT/gpu_kernels.txt"
    fi
    if [ -f bench/cg_fused_bench.c ] && [ -z "${KERNELS:-}" ]; then
      link_tool bench/cg_fused_bench.c $B/cg_fused_bench >> "$OUT/bench_build.log" 2>&1 &&
        timeout 60 $B/cg_fused_bench 2>&1 | tee "$OUT/cg_fused_bench.txt"
    fi
    for f in bench/gpu_*.lua; do [ -f "$f" ] && $B/grace "$f" 2>&1 | tee "$OUT/$(basename "$f" .lua).txt"; done ;;
  fused)       # bench/cg_fused_bench alone (fused pointwise and row kernels)
    echo "== fused kernels"
    link_tool bench/cg_fused_bench.c $B/cg_fused_bench > "$OUT/bench_build.log" 2>&1 &&
      timeout 60 $B/cg_fused_bench 2>&1 | tee "$OUT/cg_fused_bench.txt" || status=1 ;;
  gemv)        # the GEMV design experiment: hand-written variants beside grace's generated kernels
    echo "== gemv explore"
    link_tool bench/gemv_grace_gen.c $B/gemv_grace_gen && $B/gemv_grace_gen > bench/gemv_grace_gen.cuh &&
      /usr/local/cuda/bin/nvcc -arch=sm_90 -O3 -std=c++17 -o $B/gemv_explore bench/gemv_explore.cu &&
      timeout 200 $B/gemv_explore 2>&1 | tee "$OUT/gemv_explore.txt" || status=1
    # where ptxas put the weight loads against griddepcontrol.wait (ACQBULK) in the register-resident variants
    # (SASS_FN: a regular expression for other kernels' mangled names; GEMV_ONLY: the variants to run, see gemv_explore.cu)
    fn=${SASS_FN:-gemv_rIfLi2ELi6}
    /usr/local/cuda/bin/cuobjdump -sass $B/gemv_explore 2>/dev/null | awk -v fn="$fn" '/Function : / {p = $0 ~ fn; if (p) print; next} p && /LDG|ACQ|PREEXIT|DEPBAR|FFMA|EXIT|CCTL|WARPSYNC|SYNC|STG|TIMER|CS2R|S2UR/' > "$OUT/gemv_sass.txt" ;;
  wgmma)       # the sm_90a tensor-core GEMM experiment against cuBLAS
    echo "== wgmma GEMM"
    /usr/local/cuda/bin/nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o $B/gemm_wgmma bench/gemm_wgmma.cu \
      -lcublas > "$OUT/wgmma_build.log" 2>&1 && timeout 60 $B/gemm_wgmma 2>&1 | tee "$OUT/gemm_wgmma.txt" ||
      { status=1; tail -5 "$OUT/wgmma_build.log"; } ;;
  workloads)   # issue 8, grace side (random seeded weights unless WEIGHTS_DIR holds PyTorch's files)
    echo "== workloads (grace)"
    timeout ${WL_TIMEOUT:-240} $B/grace bench/workloads/run.lua --device cuda --iters ${WL_ITERS:-50} \
      ${WEIGHTS_DIR:+--weights $WEIGHTS_DIR} --json "$OUT/grace.json" > "$OUT/grace_workloads.txt" 2>&1 || status=1
    tail -40 "$OUT/grace_workloads.txt" ;;
  generate)    # gpt2_generate: PyTorch (writes the weights, prompts and its greedy tokens), then grace on them
    echo "== gpt2_generate: PyTorch"
    gw="$OUT/generate_weights"
    timeout ${GEN_TIMEOUT:-900} python3 bench/torch/gpt2_generate.py --device cuda --weights "$gw" ${GEN_ARGS:-} \
      --json "$OUT/torch_generate.json" > "$OUT/torch_generate.txt" 2>&1 || { echo "torch side failed"; status=1; }
    tail -20 "$OUT/torch_generate.txt"
    echo "== gpt2_generate: grace"
    timeout ${GEN_TIMEOUT:-900} $B/grace bench/workloads/gpt2_generate.lua --device cuda --weights "$gw" ${GEN_ARGS:-} \
      --cache ${GEN_CACHE:-static,growing} --json "$OUT/grace_generate.json" > "$OUT/grace_generate.txt" 2>&1 || status=1
    tail -20 "$OUT/grace_generate.txt"
    python3 bench/torch/gpt2_generate.py --from-json "$OUT/torch_generate.json" \
      --compare "$OUT/grace_generate.json" 2>&1 | tee "$OUT/generate_compare.txt"
    rm -rf "$gw" ;;
  genprofile)  # grace's side of gpt2_generate alone (GEN_ARGS), with --report (how each step's programs launch),
               # then a short generation (4 tokens, graphs off) under Nsight Compute: its kernels by family
    echo "== gpt2_generate: launch report, then its kernels under Nsight Compute"
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout ${GEN_TIMEOUT:-200} $B/grace bench/workloads/gpt2_generate.lua --device cuda ${GEN_ARGS:-} --report \
      > "$OUT/genprofile.txt" 2>&1 || status=1
    cat "$OUT/genprofile.txt"
    timeout ${GEN_TIMEOUT:-200} "$ncu" --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size \
      $B/grace bench/workloads/gpt2_generate.lua --device cuda ${GEN_ARGS:-} --graphs off --new 4 --reps 1 \
      --warmup 0 > "$OUT/genprofile.csv" 2> "$OUT/genprofile.err"
    python3 bench/profile_summary.py "$OUT/genprofile.csv" | sed -n '/^total/,$p' | head -40 | tee "$OUT/genprofile_kernels.txt" ;;
  suite)       # issue 8 in one go, alone on the device: PyTorch (writes the shared weights and its outputs),
               # grace on the same weights (checked against PyTorch), then the report (markdown, JSON, chart).
               # Each side ends with first calls in fresh processes, cold and warm compile cache, inside its own
               # timeout: grace's compiled modes for every workload, PyTorch's for TORCH_FRESH (torch.compile's
               # cold compile takes tens of seconds a workload; TORCH_FRESH= skips it), each within a budget;
               # before them PyTorch counts kernels with its profiler (compiling each mode again, within
               # TORCH_PROFILE_BUDGET). Both sides write their JSON before these extras, so a timeout keeps it.
    echo "== benchmark suite: PyTorch"
    W=$PWD/.bench-weights
    rm -rf "$W"; mkdir -p "$W"
    timeout ${TORCH_TIMEOUT:-300} python3 bench/torch/workloads.py --device cuda --iters ${WL_ITERS:-100} ${ONLY:+--only $ONLY} \
      --weights "$W" --json "$OUT/torch.json" --profile-budget ${TORCH_PROFILE_BUDGET:-45} \
      --fresh "${TORCH_FRESH-gpt2_decode_fp32}" --fresh-budget ${TORCH_FRESH_BUDGET:-60} > "$OUT/torch_workloads.txt" 2>&1 || { echo "torch side failed or timed out"; status=1; }
    tail -40 "$OUT/torch_workloads.txt"
    echo "== benchmark suite: grace"
    timeout ${WL_TIMEOUT:-240} $B/grace bench/workloads/run.lua --device cuda --iters ${WL_ITERS:-100} ${ONLY:+--only $ONLY} \
      --weights "$W" --json "$OUT/grace.json" --fresh ${WL_FRESH:-compiled,full} \
      --fresh-budget ${WL_FRESH_BUDGET:-90} > "$OUT/grace_workloads.txt" 2>&1 || status=1
    tail -60 "$OUT/grace_workloads.txt"
    echo "== report"
    python3 bench/report.py --grace "$OUT/grace.json" --torch "$OUT/torch.json" --md "$OUT/report.md" \
      --png "$OUT/report.png" --json "$OUT/bench.json" 2>&1 | tail -5
    cat "$OUT/report.md" 2>/dev/null | head -60 ;;
  profile)     # each kernel of one compiled call under Nsight Compute (PROFILE: the variants; graphs off, kernels
               # serialised: a kernel's time alone), summed by kernel beside the call's time as a graph; then the
               # call replayed as a graph under Nsight Systems: the idle time before each kernel family (boundaries)
    echo "== profile"
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    for v in ${PROFILE:-gpt2_decode_bf16 gpt2_decode_fp32}; do
      : > "$OUT/profile_$v.txt"
      if [ "${PROFILE_NCU:-1}" != 0 ]; then   # PROFILE_NCU=0: the boundaries alone
        timeout ${PROFILE_TIMEOUT:-240} "$ncu" --clock-control none --csv --print-units base \
          --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size \
          $B/grace bench/profile_step.lua "$v" > "$OUT/profile_$v.csv" 2> "$OUT/profile_$v.err"
        python3 bench/profile_summary.py "$OUT/profile_$v.csv" | tee "$OUT/profile_$v.txt"
      fi
      $B/grace bench/profile_step.lua "$v" 3 graph | tee -a "$OUT/profile_$v.txt"
      # the boundaries: the same call replayed as a graph under Nsight Systems, the idle time before each kernel
      if [ -n "$nsys" ]; then
        timeout ${PROFILE_TIMEOUT:-240} "$nsys" profile -o "$OUT/nsys_$v" --force-overwrite true --trace cuda \
          --cuda-graph-trace node $B/grace bench/profile_step.lua "$v" 3 graph > "$OUT/nsys_$v.log" 2>&1
        "$nsys" stats --report cuda_gpu_trace --format csv --output "$OUT/trace_$v" "$OUT/nsys_$v.nsys-rep" \
          >> "$OUT/nsys_$v.log" 2>&1
        k=$(awk '/^PROFILE_GRAPH_KERNELS/ {print $2}' "$OUT/nsys_$v.log" | tail -1)
        python3 bench/profile_summary.py --gaps "$OUT/trace_${v}_cuda_gpu_trace.csv" "${k:-1}" 10 | tee -a "$OUT/profile_$v.txt"
      else   # no Nsight Systems: the same trace from CUPTI, through bench/kernel_trace.c injected into the process
        cupti=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib 2>/dev/null |
                while read -r d; do [ -e "$d/libcupti.so" ] && echo "$d"; done | head -1)
        if [ -n "$cupti" ] && gcc -std=c11 -D_GNU_SOURCE -shared -fPIC -O2 -I/usr/local/cuda/include \
             -o $B/libkernel_trace.so bench/kernel_trace.c -L"$cupti" -lcupti -Wl,-rpath,"$cupti" > "$OUT/kernel_trace_build.log" 2>&1; then
          CUDA_INJECTION64_PATH=$PWD/$B/libkernel_trace.so GRACE_KERNEL_TRACE="$OUT/trace_$v.csv" \
            timeout ${PROFILE_TIMEOUT:-240} $B/grace bench/profile_step.lua "$v" 3 graph > "$OUT/cupti_$v.log" 2>&1
          k=$(awk '/^PROFILE_GRAPH_KERNELS/ {print $2}' "$OUT/cupti_$v.log" | tail -1)
          echo "boundaries from CUPTI's kernel records (no nsys): $(grep PROFILE_GRAPH_CALL_US "$OUT/cupti_$v.log")" | tee -a "$OUT/profile_$v.txt"
          python3 bench/profile_summary.py --gaps "$OUT/trace_$v.csv" "${k:-1}" 10 | tee -a "$OUT/profile_$v.txt"
        else echo "no nsys and no CUPTI: the boundaries between kernels are not measured" | tee -a "$OUT/profile_$v.txt"; fi
      fi
    done ;;
  ab)          # this tree against another one (BASE: a folder holding an earlier tree, e.g. `git archive` of a
               # commit, carried along): each built here, the compiled call as a graph (bench/profile_step.lua) of
               # each AB variant timed by both, alternating, AB_ROUNDS rounds
    echo "== A/B against $BASE"
    make -C "$BASE" DEPS_PREFIX="$root" -j"$jobs" build/grace > "$OUT/ab_build.log" 2>&1 || { echo "base build failed"; tail -5 "$OUT/ab_build.log"; }
    for v in ${AB:-gpt2_decode_bf16 gpt2_decode_fp32}; do
      for r in $(seq ${AB_ROUNDS:-3}); do
        for side in base new; do
          g=$B/grace; [ $side = base ] && g=$BASE/build/grace
          GRACE_CACHE_DIR=$PWD/.grace-cache-$side timeout 120 $g bench/profile_step.lua "$v" 3 graph 2>&1 |
            sed "s/^/$v $side round $r: /" | tee -a "$OUT/ab.txt"
        done
      done
    done ;;
  envab)       # this build under two environments (ENV_A, ENV_B: assignments such as "GRACE_PDL=0", or empty),
               # the compiled call as a graph of each AB variant timed under both, alternating, AB_ROUNDS rounds
    echo "== A/B: [${ENV_A:-}] against [${ENV_B:-}]"
    for v in ${AB:-gpt2_decode_bf16 gpt2_decode_fp32}; do
      for r in $(seq ${AB_ROUNDS:-3}); do
        for side in A B; do
          e=${ENV_A:-}; [ $side = B ] && e=${ENV_B:-}
          env $e timeout 120 $B/grace bench/profile_step.lua "$v" 3 graph 2>&1 |
            sed "s/^/$v $side round $r: /" | tee -a "$OUT/envab.txt"
        done
      done
    done ;;
  graphs)      # CUDA graph replay: host time per call by strategy (alone on the device: it is a timing)
    echo "== graph replay"
    timeout 120 $B/grace bench/graph_replay.lua 2>&1 | tee "$OUT/graph_replay.txt" ;;
  parallel)    # the GPU tests and the workloads at once (each under a timeout), after the kernel benchmarks
    echo "== gpu tests and workloads, in parallel"
    pids=""
    for t in $gpu_tests; do
      ( run_one "$t" "$OUT/gpu_$(basename "$t").log" timeout ${T_TIMEOUT:-200} > "$OUT/sum_$(basename "$t").txt" ) &
      pids="$pids $!"
    done
    ( timeout ${WL_TIMEOUT:-200} $B/grace bench/workloads/run.lua --device cuda --iters ${WL_ITERS:-50} \
        --json "$OUT/grace.json" > "$OUT/grace_workloads.txt" 2>&1 ) &
    pids="$pids $!"
    wait $pids
    cat "$OUT"/sum_*.txt
    grep -q 'not_ok=[1-9]\|rc=[1-9]' "$OUT"/sum_*.txt && status=1
    tail -40 "$OUT/grace_workloads.txt" ;;
  asan)   # the GPU Lua tests and the workloads under ASan/UBSan: a crash prints its stack
    echo "== asan"
    if make DEPS_PREFIX="$root" BUILD=build-asan OPT=-O1 -j"$jobs" \
         SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" build-asan/grace > "$OUT/asan_build.log" 2>&1; then
      export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0
      for t in tests/lua/test_gpu_*.lua; do
        timeout ${T_TIMEOUT:-200} build-asan/grace "$t" > "$OUT/asan_$(basename "$t").log" 2>&1 &
      done
      timeout ${WL_TIMEOUT:-200} build-asan/grace bench/workloads/run.lua --device cuda --iters 5 \
        > "$OUT/asan_workloads.log" 2>&1 &
      wait
      for f in "$OUT"/asan_*.log; do
        echo "-- $f: ok=$(grep -c '^ok' "$f") not_ok=$(grep -c '^not ok' "$f")"
        grep -m1 -A25 'ERROR: AddressSanitizer\|runtime error' "$f"
      done
      unset ASAN_OPTIONS
    else echo "asan build failed"; grep 'error:' "$OUT/asan_build.log" | head; fi ;;
  *) echo "unknown stage $s" ;;
  esac
done
$B/grace -e 'print("backend: " .. grace.backend())' 2>&1 | tee -a "$OUT/machine.txt"
# The run tool brings back a few files only: everything goes into logs.tgz, and only the JSON stays beside it.
tar czf "$OUT/../logs.tgz.$$" -C "$OUT" . 2>/dev/null &&
  find "$OUT" -mindepth 1 ! -name bench.json ! -name report.md ! -name report.png ! -name grace.json -delete &&
  mv "$OUT/../logs.tgz.$$" "$OUT/logs.tgz"
exit $status
