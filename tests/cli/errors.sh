#!/bin/sh
# errors.sh: how `grace` reports failures: runtime and syntax errors with file:line and a traceback,
# missing files, non-string error objects, Ctrl-C (SIGINT) interrupting a running script. Always exit 1,
# never a crash. Run by prove through tests/run.sh, which sets $GRACE.
GRACE=${GRACE:-build/grace}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/lib.sh"
err_has() { grep -F -q -- "$1" "$tmp/err"; } # err_has TEXT: stderr of the last run contains TEXT
diag() { echo "status $st; stderr:"; cat "$tmp/err"; }

echo "1..14"

cd "$tmp" || exit 1
printf 'local x = 1\n\nerror("boom on three")\n' > boom.lua
"$GRACE" boom.lua >/dev/null 2>"$tmp/err"; st=$?
ok $(test "$st" -eq 1; echo $?) "runtime error: exit 1" "$(diag)"
err_has "grace: boom.lua:3: boom on three"; ok $? "runtime error: 'grace: file:line: message'" "$(diag)"
err_has "stack traceback:" && err_has "boom.lua:3: in main chunk"; ok $? "runtime error: stack traceback" "$(diag)"

printf 'local function f()\n  local t = nil\n  return t.x\nend\nf()\n' > nilidx.lua
"$GRACE" nilidx.lua 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "grace: nilidx.lua:3: attempt to index a nil value" && err_has "in local 'f'"
ok $? "error inside a function: line of the fault, caller in the traceback" "$(diag)"

"$GRACE" nosuch.lua 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "grace: cannot open nosuch.lua"
ok $? "missing script: exit 1, 'cannot open nosuch.lua'" "$(diag)"

printf 'local a = 1\nlocal b = = 2\n' > syntax.lua
"$GRACE" syntax.lua 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "grace: syntax.lua:2:"
ok $? "syntax error: exit 1 with file:line" "$(diag)"

"$GRACE" -e 'x = (' 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "(command line):1:"
ok $? "syntax error in -e: exit 1, '(command line):1:'" "$(diag)"

"$GRACE" -e 'error({})' 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "(error object is a table value)"
ok $? "error({}): exit 1, names the type" "$(diag)"

"$GRACE" -e 'error(setmetatable({}, {__tostring = function() return "custom object" end}))' 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "grace: custom object"
ok $? "error object with __tostring: its text is printed" "$(diag)"

"$GRACE" -e 'error(setmetatable({}, {__tostring = function() error("worse") end}))' 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ]
ok $? "error in __tostring of the error object: exit 1, no crash" "$(diag)"

"$GRACE" -e 'error()' 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "(error object is a nil value)"
ok $? "error(): exit 1, 'nil value'" "$(diag)"

"$GRACE" -l no_such_module_xyz 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "module 'no_such_module_xyz' not found"
ok $? "-l of a missing module: exit 1" "$(diag)"

echo 'error("from stdin")' | "$GRACE" - 2>"$tmp/err"; st=$?
[ "$st" -eq 1 ] && err_has "grace: stdin:1: from stdin"
ok $? "error in a script read from stdin: 'stdin:1:'" "$(diag)"

# Ctrl-C: the script signals that its loop runs (so the handler is in place), then gets SIGINT.
"$GRACE" -e 'io.open("started", "w"):close() local i = 0 while true do i = i + 1 end' 2>"$tmp/err" &
pid=$!
i=0
while [ ! -f started ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT "$pid" 2>/dev/null
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
kill -KILL "$pid" 2>/dev/null # still running: not interrupted (the test fails below)
wait "$pid"; st=$?
[ "$st" -eq 1 ] && err_has "interrupted!"
ok $? "SIGINT interrupts a running script: exit 1, 'interrupted!'" "$(diag)"

if [ "$failed" -ne 0 ]; then exit 1; fi
exit 0
