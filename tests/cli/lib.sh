# lib.sh: the TAP helpers the shell tests of tests/cli share, sourced by each (`. "$(dirname "$0")/lib.sh"`); not a
# test itself (the Makefile leaves it out of make test). $n counts the checks, $failed the failed ones.
n=0
failed=0
ok() { # ok CONDITION_STATUS NAME [DIAGNOSTIC]
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else
    echo "not ok $n - $2"; failed=$((failed + 1))
    [ -n "$3" ] && printf '%s\n' "$3" | sed 's/^/# /'
  fi
}
# is NAME GOT EXPECTED
is() { [ "$2" = "$3" ]; ok $? "$1" "got: [$2]
expected: [$3]"; }
# has NAME OUTPUT TEXT: OUTPUT contains TEXT
has() { case "$2" in *"$3"*) ok 0 "$1" ;; *) ok 1 "$1" "got: [$2]
expected to contain: [$3]" ;; esac; }
# matches NAME OUTPUT PATTERN: a line of OUTPUT matches PATTERN (an extended regular expression)
matches() { printf '%s\n' "$2" | grep -Eq "$3"; ok $? "$1" "$2"; }
