#!/bin/sh
# Checks the Debian packages grace builds and tests with; installs the missing ones when run as root
# (apt-get update once, then apt-get install -y), otherwise names them in one line and fails.
# With DEPS_PREFIX set (packages unpacked with dpkg -x, e.g. on the GPU machine) it only checks that prefix.
missing=""
if [ -n "$DEPS_PREFIX" ]; then
  [ -f "$DEPS_PREFIX/usr/include/lua5.4/lua.h" ] || missing="$missing liblua5.4-dev"
  [ -f "$DEPS_PREFIX/usr/include/mimalloc.h" ] || missing="$missing libmimalloc-dev"
  # Jansson parses safetensors headers (io/); its runtime package (libjansson4) must be unpacked beside it,
  # or libjansson.so is a dangling link. tools/fetch-debs.sh downloads both.
  [ -f "$DEPS_PREFIX/usr/include/jansson.h" ] && [ -e "$DEPS_PREFIX/usr/lib/x86_64-linux-gnu/libjansson.so" ] ||
    missing="$missing libjansson-dev+libjansson4"
  # zlib inflates np.savez_compressed members (io/): the system's, else one unpacked in the prefix.
  [ -f /usr/include/zlib.h ] || [ -f "$DEPS_PREFIX/usr/include/zlib.h" ] || missing="$missing zlib1g-dev"
  if [ -n "$missing" ]; then
    echo "grace: DEPS_PREFIX=$DEPS_PREFIX lacks:$missing (download them with tools/fetch-debs.sh on a machine with"
    echo "       network, then unpack each .deb there with dpkg -x)"
    exit 1
  fi
  exit 0
fi
[ -f /usr/include/lua5.4/lua.h ] || missing="$missing liblua5.4-dev"
[ -f /usr/include/mimalloc.h ] || missing="$missing libmimalloc-dev"
[ -f /usr/include/jansson.h ] || missing="$missing libjansson-dev"
[ -f /usr/include/zlib.h ] || missing="$missing zlib1g-dev"
[ -f /usr/include/readline/readline.h ] || missing="$missing libreadline-dev"
# The conformance tests compute their reference values with NumPy under Debian's python3.
/usr/bin/python3 -c 'import numpy' 2>/dev/null || missing="$missing python3-numpy"
command -v prove >/dev/null 2>&1 || missing="$missing perl"
command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "grace: installing missing Debian packages:$missing"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >/tmp/grace-deps.log 2>&1 || {
    echo "grace: apt-get install$missing failed (log: /tmp/grace-deps.log)"; exit 1; }
  exit 0
fi
echo "grace: missing Debian packages; install them with: sudo apt-get install$missing"
exit 1
