#!/bin/bash
# device.sh: one call on the GPU machine: unpack the Debian packages carried in .deps, build grace against
# them, run the whole test suite (GPU tests run there instead of skipping), and leave logs under $OUT.
# Usage (from the repo root): bench/device.sh   (OUT defaults to bench/out)
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
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
jobs=$(nproc)
if ! make DEPS_PREFIX="$root" -j"$jobs" all > "$OUT/build.log" 2>&1; then
  echo "build failed:"; tail -30 "$OUT/build.log"; exit 1
fi
echo "build ok"
set -o pipefail
# the log keeps everything; the reply shows the per-file results and the summary (no compiler lines)
make DEPS_PREFIX="$root" -j"$jobs" test > "$OUT/test.log" 2>&1
status=$?
grep -E '\.\.\. |^Files=|^Result|^Failed|not ok' "$OUT/test.log" | tail -60
build/grace -e 'print("backend: " .. grace.backend())' 2>&1 | tee -a "$OUT/test.log"
exit $status
