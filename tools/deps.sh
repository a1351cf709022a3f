#!/bin/sh
# Checks the Debian packages grace builds and tests with; installs the missing ones when run as root
# (apt-get update once, then apt-get install -y), otherwise names them in one line and fails.
# With DEPS_PREFIX set (packages unpacked with dpkg -x, e.g. on the GPU machine) it only checks that prefix.
missing=""
if [ -n "$DEPS_PREFIX" ]; then
  [ -f "$DEPS_PREFIX/usr/include/lua5.4/lua.h" ] || missing="$missing liblua5.4-dev"
  [ -f "$DEPS_PREFIX/usr/include/mimalloc.h" ] || missing="$missing libmimalloc-dev"
  if [ -n "$missing" ]; then
    echo "grace: DEPS_PREFIX=$DEPS_PREFIX lacks:$missing (unpack their .deb files there with dpkg -x)"
    exit 1
  fi
  exit 0
fi
[ -f /usr/include/lua5.4/lua.h ] || missing="$missing liblua5.4-dev"
[ -f /usr/include/mimalloc.h ] || missing="$missing libmimalloc-dev"
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
