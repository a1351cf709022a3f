#!/bin/sh
# fetch-debs.sh: run in the project root on a machine with network (the CPU machine). Downloads into .deps/debs
# (a folder git ignores) every Debian package the GPU machine needs to build grace and lacks: it has CUDA, gcc,
# make and perl's prove, but no network, no Lua, mimalloc or Jansson (zlib's headers are fetched too, in case).
# Each library comes with its runtime package: the -dev package's libX.so is only a link to the runtime's file.
# bench/device.sh unpacks them on the GPU machine:
#   mkdir -p .deps/root && for f in .deps/debs/*.deb; do dpkg -x "$f" .deps/root; done
# and builds with make DEPS_PREFIX=$PWD/.deps/root (tools/deps.sh checks that prefix).
set -e
root=$(git rev-parse --show-toplevel)
cd "$root"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.deps/' .gitignore 2>/dev/null || grep -qx '/.deps/' "$exclude" 2>/dev/null || echo '/.deps/' >> "$exclude"
mkdir -p .deps/debs && cd .deps/debs
[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update -qq
apt-get download liblua5.4-dev liblua5.4-0 lua5.4 libmimalloc-dev libmimalloc2.0 \
  libjansson-dev libjansson4 zlib1g-dev zlib1g 2>&1 | grep -v "unsandboxed" || true
for p in liblua5.4-dev libmimalloc-dev libjansson-dev libjansson4 zlib1g-dev; do
  ls ${p}_*.deb >/dev/null 2>&1 || { echo "fetch-debs: $p was not downloaded" >&2; exit 1; }
done
ls -1 "$root/.deps/debs"
