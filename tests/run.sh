#!/bin/sh
# run.sh: prove's interpreter for every test: Lua tests run under build/grace, shell tests under sh
# (with $GRACE set), Python tests (NumPy references) under a python3 that has NumPy, C tests directly.
# Usage: sh tests/run.sh BUILD_DIR TEST
# With GRACE_TEST_LOGS set (make test), a test's output and stderr go to GRACE_TEST_LOGS/NAME.tap and NAME.err;
# its TAP is passed on to prove when it ends, and a failing test's failures and stderr are printed on stderr.
build=$1; shift
run() {
  case "$1" in
    *.lua) "$build/grace" "$@" ;;
    *.sh) GRACE="$build/grace" sh "$@" ;;
    *.py) GRACE="$build/grace" "$(tests/python.sh)" "$@" ;;
    *) "$@" ;;
  esac
}
if [ -z "${GRACE_TEST_LOGS:-}" ]; then
  case "$1" in   # exec: prove sees the test's own exit status and signals
    *.lua) exec "$build/grace" "$@" ;;
    *.sh) GRACE="$build/grace" exec sh "$@" ;;
    *.py) GRACE="$build/grace" exec "$(tests/python.sh)" "$@" ;;
    *) exec "$@" ;;
  esac
fi
mkdir -p "$GRACE_TEST_LOGS"
log="$GRACE_TEST_LOGS/$(printf '%s' "$1" | tr / _)"
run "$@" > "$log.tap" 2> "$log.err"
rc=$?
cat "$log.tap"
if [ $rc -ne 0 ] || grep -q '^not ok' "$log.tap"; then
  {
    echo "==== $1 failed (exit status $rc; its output: $log.tap, stderr: $log.err)"
    awk '/^not ok/ { p = 1; print; n++; next } p && /^#/ { print; next } { p = 0 } n >= 20 { exit }' "$log.tap"
    [ -s "$log.err" ] && { echo "---- stderr (last 30 lines):"; tail -n 30 "$log.err"; }
  } >&2
fi
exit $rc
