#!/bin/sh
# repl.sh: the interactive REPL, driven through a real terminal under tmux (private server socket):
# banner, expressions, "= expr", multi-line input with the continuation prompt, errors that do not end
# the session, Ctrl-C at the prompt and during a running chunk, completion, history, Ctrl-D exit.
# Waits poll the screen (bounded) instead of sleeping a fixed time. Run by prove via tests/run.sh.
GRACE=${GRACE:-build/grace}
if ! command -v tmux >/dev/null 2>&1; then
  echo "1..0 # SKIP no tmux"
  exit 0
fi
case "$GRACE" in /*) ;; *) GRACE="$PWD/$GRACE" ;; esac
tmp=$(mktemp -d) || exit 1
sock="gracetest$$"
tm() { tmux -L "$sock" -f /dev/null "$@"; }
cleanup() { # kill-server leaves the socket file behind
  sp=$(tm display-message -p '#{socket_path}' 2>/dev/null)
  tm kill-server >/dev/null 2>&1
  [ -n "$sp" ] && rm -f "$sp"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$(dirname "$0")/lib.sh"
ok() { # ok CONDITION_STATUS NAME: lib.sh's, with the screen as the diagnostic
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else
    echo "not ok $n - $2"; failed=$((failed + 1))
    echo "# screen:"; screen | sed -e '/^[[:space:]]*$/d' -e 's/^/#   /'
  fi
}
screen() { tm capture-pane -p -J -S -500 -t repl 2>/dev/null; }
# wait_for REGEX [COUNT]: until COUNT lines of the screen match (at most ~8 s, for a loaded machine)
wait_for() {
  i=0
  while [ $i -lt 80 ]; do
    c=$(screen | grep -E -c -- "$1")
    [ "$c" -ge "${2:-1}" ] && return 0
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}
typeln() { tm send-keys -t repl -l "$1" && tm send-keys -t repl Enter; }
keys() { tm send-keys -t repl "$@"; }

echo "1..15"

# The exit status goes to a file (tmux may mark the pane dead before it knows the status); the shell
# around grace survives the test's Ctrl-C, and the trap is reset for grace by exec. remain-on-exit
# keeps the screen for the diagnostics of a failure.
tm new-session -d -s repl -x 110 -y 60 \
  "trap : INT; env HOME='$tmp' GRACE_HISTORY='$tmp/hist' TERM=xterm '$GRACE' --device cpu; echo \$? > '$tmp/status'" \; \
  set-option -g remain-on-exit on >/dev/null 2>&1
wait_for '^grace [0-9.]+ on Lua 5\.4 -- backend: cpu'; ok $? "banner names the version and the backend"
if [ "$failed" -ne 0 ]; then # no REPL: fail the rest at once rather than wait for each
  while [ $n -lt 15 ]; do n=$((n + 1)); echo "not ok $n - the REPL did not start"; done
  exit 1
fi

typeln '1+2'
wait_for '^3$'; ok $? "an expression prints its value"

typeln '= 2*3'
wait_for '^6$'; ok $? "'= expr' prints its value"

typeln 'return 1, "two", nil'
wait_for '^1[[:space:]]+two[[:space:]]+nil$'; ok $? "several values are printed tab-separated"

typeln 'function f(a)'
wait_for '^>>'; ok $? "an unfinished statement shows the continuation prompt"
typeln '  local b = a * 10'
typeln '  return b + 2'
typeln 'end'
typeln 'f(4)'
wait_for '^42$'; ok $? "a function typed over several lines, then called, gives its value"

typeln 'error("boom")'
wait_for '^stdin:1: boom'; ok $? "an error prints its message"
typeln 'print("still" .. "alive")'
wait_for '^stillalive$'; ok $? "the REPL goes on after an error"

keys -l 'junk that is dropped'
wait_for 'junk that is dropped$' && keys C-c && wait_for '\^C$'
typeln '6*7+1'
wait_for '^43$' && ! screen | grep -q '^stdin.*junk'
ok $? "Ctrl-C at the prompt drops the line and the REPL goes on"

typeln 'for i = 1, math.huge do if i == 1 then print("loop" .. "ing") end end'
wait_for '^looping$' && keys C-c && wait_for 'interrupted!'
ok $? "Ctrl-C interrupts a running chunk"
typeln 'print("back" .. "again")'
wait_for '^backagain$'; ok $? "the REPL goes on after the interruption"

if ldd "$GRACE" 2>/dev/null | grep -q libreadline; then
  keys -l 'grace.backe'
  keys Tab
  wait_for '^> grace\.backend$' && typeln '():upper()'
  wait_for '^CPU'; ok $? "Tab completes a field of a global table"
else
  n=$((n + 1)); echo "ok $n # SKIP built without readline"
fi

keys C-d
i=0
while [ ! -s "$tmp/status" ] && [ $i -lt 80 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$tmp/status" ]; ok $? "Ctrl-D ends the REPL"
st=$(cat "$tmp/status" 2>/dev/null)
[ "$st" = 0 ]; ok $? "... with exit status 0 (got '$st')"

if ldd "$GRACE" 2>/dev/null | grep -q libreadline; then
  grep -qx '1+2' "$tmp/hist" 2>/dev/null && grep -qx '= 2\*3' "$tmp/hist" && grep -qx 'f(4)' "$tmp/hist"
  ok $? "history is saved to \$GRACE_HISTORY"
else
  n=$((n + 1)); echo "ok $n # SKIP built without readline"
fi

if [ "$failed" -ne 0 ]; then exit 1; fi
exit 0
