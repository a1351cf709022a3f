#!/bin/sh
# run.sh: prove's interpreter for every test: Lua tests run under build/grace, shell tests under sh
# (with $GRACE set), Python tests (NumPy references) under a python3 that has NumPy, C tests directly. Usage: sh tests/run.sh BUILD_DIR TEST
build=$1; shift
case "$1" in
  *.lua) exec "$build/grace" "$@" ;;
  *.sh) GRACE="$build/grace" exec sh "$@" ;;
  *.py) GRACE="$build/grace" exec "$(tests/python.sh)" "$@" ;;
  *) exec "$@" ;;
esac
