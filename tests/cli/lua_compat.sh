#!/bin/sh
# lua_compat.sh: `grace` behaves as Debian's lua5.4 for the same inputs: LUA_INIT_5_4 / LUA_INIT (a chunk or
# @file, `arg` visible, errors and exit status), -E, the message of a failed require (grace's has one more
# line, its embedded-stdlib searcher's) and _PROMPT/_PROMPT2 through tostring in the REPL (under tmux).
# Each case runs under both and compares, with "lua5.4:" made "grace:". Run by prove via tests/run.sh.
GRACE=${GRACE:-build/grace}
LUA=${LUA:-lua5.4}
if ! command -v "$LUA" >/dev/null 2>&1; then
  echo "1..0 # SKIP no $LUA to compare with"
  exit 0
fi
case "$GRACE" in /*) ;; *) GRACE="$PWD/$GRACE" ;; esac
tmp=$(mktemp -d) || exit 1
sock="gracecompat$$"
tm() { tmux -L "$sock" -f /dev/null "$@"; }
cleanup() {
  if command -v tmux >/dev/null 2>&1; then
    sp=$(tm display-message -p '#{socket_path}' 2>/dev/null)
    tm kill-server >/dev/null 2>&1
    [ -n "$sp" ] && rm -f "$sp"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# the caller's own init chunks must not change what either prints
unset GRACE_INIT LUA_INIT LUA_INIT_5_4

. "$(dirname "$0")/lib.sh"
# is NAME GOT EXPECTED, its diagnostic labelled: grace's output against lua5.4's
is() { [ "$2" = "$3" ]; ok $? "$1" "grace:  [$2]
lua5.4: [$3]"; }

# run VAR=VALUE... -- ARGS...: runs grace and lua5.4 in $tmp with those variables and arguments; sets $g and $l
# to stdout and stderr together, then "status N", with lua5.4's name made grace's.
run() {
  envs=""
  while [ "$1" != "--" ]; do envs="$envs $(printf '%s' "$1" | sed "s/'/'\\\\''/g; s/^/'/; s/\$/'/")"; shift; done
  shift
  args=""
  for a in "$@"; do args="$args $(printf '%s' "$a" | sed "s/'/'\\\\''/g; s/^/'/; s/\$/'/")"; done
  g=$(cd "$tmp" && eval "env $envs \"\$GRACE\" $args" 2>&1; echo "status $?")
  l=$(cd "$tmp" && eval "env $envs \"\$LUA\" $args" 2>&1; echo "status $?")
  l=$(printf '%s\n' "$l" | sed "s/^$LUA:/grace:/")
}

echo "1..15"

cat > "$tmp/script.lua" <<'EOF'
print("script", init_value, ...)
EOF
cat > "$tmp/init.lua" <<'EOF'
init_value = "from file"
print("init file", arg[0], arg[1], arg[2], #arg, ...)
EOF

run 'LUA_INIT=init_value = 1; print("init", arg[0], arg[1], #arg)' -- script.lua a b
is "LUA_INIT chunk runs before the script, with arg set" "$g" "$l"
case "$g" in "init	script.lua	a	2"*) ok 0 "... and the chunk's output is what was expected" ;;
  *) ok 1 "... and the chunk's output is what was expected" "$g" ;; esac

run 'LUA_INIT=@init.lua' -- -e 'print("e", init_value)' script.lua x
is "LUA_INIT=@file runs the file before -e and the script" "$g" "$l"

run 'LUA_INIT_5_4=print("5_4")' 'LUA_INIT=print("plain")' -- -e 'print("e")'
is "LUA_INIT_5_4 is run instead of LUA_INIT" "$g" "$l"

run 'LUA_INIT_5_4=' 'LUA_INIT=print("plain")' -- -e 'print("e")'
is "an empty LUA_INIT_5_4 still shadows LUA_INIT" "$g" "$l"

run 'LUA_INIT=error("boom")' -- -e 'print("not reached")'
is "an error in LUA_INIT: message, traceback, exit status 1" "$g" "$l"

run 'LUA_INIT=x = = 1' -- -e 'print("not reached")'
is "a syntax error in LUA_INIT" "$g" "$l"

run 'LUA_INIT=@nosuch.lua' -- -e 'print("not reached")'
is "LUA_INIT=@file that does not exist" "$g" "$l"

run 'LUA_INIT=error(setmetatable({}, {__tostring = function() return "obj" end}))' -- -e 'print(1)'
is "an error object with __tostring in LUA_INIT" "$g" "$l"

run 'LUA_INIT=print("init ran")' 'LUA_INIT_5_4=print("init ran")' -- -E -e 'print("e")'
is "-E ignores LUA_INIT and LUA_INIT_5_4" "$g" "$l"

# require: every standard searcher's line is the same; grace adds its embedded stdlib's, after preload's
run -- -e 'require "nosuchmod"'
is "a failed require: the same message less grace's embedded-module line" \
  "$(printf '%s\n' "$g" | grep -v "^	no embedded module 'nosuchmod'\$")" "$l"
printf '%s\n' "$g" | sed -n 3p | grep -qx "	no embedded module 'nosuchmod'"
ok $? "... and that line follows preload's, in the standard lines' style" "$g"

run -- -e 'print(pcall(require, "grace.nosuch"))'
is "a failed require of a grace.* name, under pcall" \
  "$(printf '%s\n' "$g" | grep -v "^	no embedded module 'grace.nosuch'\$")" "$l"

# _PROMPT and _PROMPT2 through tostring, in each program's REPL on a terminal (set by LUA_INIT, which both run)
if ! command -v tmux >/dev/null 2>&1; then
  ok 0 "# SKIP no tmux: _PROMPT"
  ok 0 "# SKIP no tmux: _PROMPT2"
  exit $((failed > 0))
fi
screen() { tm capture-pane -p -J -S -200 -t "$1" 2>/dev/null; }
wait_for() { # wait_for SESSION REGEX: at most ~8 s
  i=0
  while [ $i -lt 80 ]; do
    screen "$1" | grep -Eq -- "$2" && return 0
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}
init='_PROMPT = setmetatable({}, {__tostring = function() return "tbl> " end}) _PROMPT2 = 42'
prompts() { # prompts SESSION PROGRAM: the prompt lines after typing an unfinished then a finished statement
  tm new-session -d -s "$1" -x 100 -y 30 \
    "env HOME='$tmp' GRACE_HISTORY='$tmp/hist' TERM=xterm LUA_INIT='$init' '$2'; sleep 30" >/dev/null 2>&1
  wait_for "$1" '^tbl> ' || return
  tm send-keys -t "$1" -l 'x = (' && tm send-keys -t "$1" Enter
  wait_for "$1" '^42' || return
  tm send-keys -t "$1" -l '1)' && tm send-keys -t "$1" Enter
  tm send-keys -t "$1" -l 'print(x)' && tm send-keys -t "$1" Enter
  wait_for "$1" '^1$'
  screen "$1" | grep -E '^(tbl> |42|1$)'
}
g=$(prompts grace "$GRACE")
l=$(prompts lua "$LUA")
# nothing seen on both screens must not pass as equal
[ -n "$g" ] || g="(no grace prompt seen)"
[ -n "$l" ] || l="(no lua5.4 prompt seen)"
is "_PROMPT through tostring (a table with __tostring), as lua5.4" \
  "$(printf '%s\n' "$g" | grep '^tbl> ')" "$(printf '%s\n' "$l" | grep '^tbl> ')"
is "_PROMPT2 through tostring (a number), as lua5.4" \
  "$(printf '%s\n' "$g" | grep -v '^tbl> ')" "$(printf '%s\n' "$l" | grep -v '^tbl> ')"

exit $((failed > 0))
