#!/bin/sh
# Checks the Debian packages grace builds and tests with; installs the missing ones when run as root
# (apt-get update once, then apt-get install -y), otherwise names them in one line and fails.
# With DEPS_PREFIX set (packages unpacked with dpkg -x, e.g. on a GPU machine without network) it only checks
# that prefix. `sh tools/deps.sh --debs` prints the packages such a machine needs as .deb files (what
# tools/fetch-debs.sh downloads): the libraries grace builds against and the runtime packages they need.
#
# The one list of dependencies, a package a line:
#   package, kind, what shows it is there, runtime packages to carry with it
# kind: build (needed to build), optional (built without when DEPS_PREFIX lacks it), test (needed by make test).
# check: file:PATH (under DEPS_PREFIX when set), cmd:NAME (a command), python:MODULE (Debian's python3).
DEPS='
liblua5.4-dev     build     file:/usr/include/lua5.4/lua.h          liblua5.4-0
libmimalloc-dev   build     file:/usr/include/mimalloc.h            libmimalloc2.0
libjansson-dev    build     file:/usr/include/jansson.h             libjansson4
zlib1g-dev        build     file:/usr/include/zlib.h                zlib1g
libreadline-dev   optional  file:/usr/include/readline/readline.h   libreadline8
python3-numpy     test      python:numpy
perl              test      cmd:prove
tmux              test      cmd:tmux
lua5.4            test      cmd:lua5.4
g++               test      cmd:g++
'

if [ "${1:-}" = "--debs" ]; then
  echo "$DEPS" | awk 'NF && ($2 == "build" || $2 == "optional") { for (i = 1; i <= NF; i++) if (i != 2 && i != 3) print $i }'
  exit 0
fi

present() {   # present CHECK: 0 when the check holds
  case "$1" in
    file:*) [ -f "${DEPS_PREFIX:-}${1#file:}" ] ;;
    cmd:*) command -v "${1#cmd:}" >/dev/null 2>&1 ;;
    python:*) /usr/bin/python3 -c "import ${1#python:}" 2>/dev/null ;;
  esac
}

missing=""
while read -r pkg kind check _; do
  [ -n "$pkg" ] || continue
  if [ -n "${DEPS_PREFIX:-}" ]; then   # a prefix: only what the build needs, from that prefix
    [ "$kind" = build ] || continue
  fi
  present "$check" || missing="$missing $pkg"
done <<EOF
$DEPS
EOF

[ -z "$missing" ] && exit 0
if [ -n "${DEPS_PREFIX:-}" ]; then
  echo "grace: DEPS_PREFIX=$DEPS_PREFIX lacks:$missing (unpack their .deb files there with dpkg -x)"
  exit 1
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "grace: installing missing Debian packages:$missing"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >/tmp/grace-deps.log 2>&1 || {
    echo "grace: apt-get install$missing failed (log: /tmp/grace-deps.log)"; exit 1; }
  exit 0
fi
echo "grace: missing Debian packages; install them with: sudo apt-get install$missing"
exit 1
