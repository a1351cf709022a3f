#!/bin/sh
# fetch-debs.sh: for building grace on a machine without network (a GPU machine that has gcc, make and the
# NVIDIA driver but not Lua or mimalloc). Run it where apt-get works, in the repository: it downloads the
# Debian packages grace builds against, and the runtime packages they need, into .deps/debs (ignored by git).
# The list comes from tools/deps.sh (`sh tools/deps.sh --debs`), the one list of grace's dependencies.
# Take .deps along with the tree; bench/device.sh unpacks it there (dpkg -x into .deps/root) and builds with
# make DEPS_PREFIX=$PWD/.deps/root.
# Usage: sh tools/fetch-debs.sh   (EXTRA_DEBS="pkg ...": more packages into the same folder)
set -e
cd "$(dirname "$0")/.."
pkgs="$(sh tools/deps.sh --debs) ${EXTRA_DEBS:-}"
mkdir -p .deps/debs
cd .deps/debs
# apt-get download needs the package lists; fetch them once if this machine never has.
[ -n "$(ls /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ] || apt-get update -qq
# (apt-get warns that it downloads "unsandboxed" when run as root into a folder _apt cannot write: harmless)
apt-get download $pkgs 2>&1 | grep -v -i unsandboxed || true
for p in $pkgs; do
  ls "${p}"_*.deb >/dev/null 2>&1 || { echo "fetch-debs: $p was not downloaded" >&2; exit 1; }
done
echo "fetch-debs: $(ls | wc -l) packages in .deps/debs:"
ls -1
