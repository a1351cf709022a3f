#!/bin/sh
# basic.sh: the `grace` command line: -e, scripts and the arg table, stdin, -v/-h, the preloaded module,
# --device, -l, GRACE_INIT, exit statuses. Run by prove through tests/run.sh, which sets $GRACE.
GRACE=${GRACE:-build/grace}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/lib.sh"

echo "1..26"

out=$("$GRACE" -e 'print(1+1)'); st=$?
is "-e prints 1+1" "$out" "2"
is "-e exits 0" "$st" "0"

out=$("$GRACE" -e 'a=1' -e 'print(a+1)'); is "-e may repeat, in order" "$out" "2"

cat > "$tmp/args.lua" <<'EOF'
print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)
EOF
out=$("$GRACE" "$tmp/args.lua" x 'y z'); st=$?
is "script: arg[0], arg[1..] and ..." "$out" "$(printf '%s\tx\ty z\t2\t2\tx\ty z' "$tmp/args.lua")"
is "script exits 0" "$st" "0"

cat > "$tmp/neg.lua" <<'EOF'
print(arg[-3] == os.getenv("GRACE_BIN"), arg[-2], arg[-1], arg[0] ~= nil, arg[-4])
EOF
out=$(GRACE_BIN=$GRACE "$GRACE" -e 'x=1' "$tmp/neg.lua")
is "negative arg indices hold the interpreter and options" "$out" "$(printf 'true\t-e\tx=1\ttrue\tnil')"

out=$("$GRACE" -e 'print("e ran")' "$tmp/nosuch.lua" b 2>/dev/null); st=$?
is "after -e, the next word is the script (here missing: exit 1)" "$out:$st" "e ran:1"

out=$(GRACE_BIN=$GRACE "$GRACE" -e 'print(arg[0] == os.getenv("GRACE_BIN"), arg[1], arg[2])' </dev/null)
is "no script: arg[0] is the interpreter, arg[1..] the options" "$out" "$(printf 'true\t-e\tprint(arg[0] == os.getenv("GRACE_BIN"), arg[1], arg[2])')"

out=$(echo 'print("from stdin", ...)' | "$GRACE" - p q)
is "'-' runs stdin with its arguments" "$out" "$(printf 'from stdin\tp\tq')"

out=$(echo 'print(6*7)' | "$GRACE")
is "no script and stdin not a terminal: runs stdin" "$out" "42"

out=$("$GRACE" -- "$tmp/args.lua" -e)
is "'--' ends the options" "$out" "$(printf '%s\t-e\tnil\t1\t1\t-e' "$tmp/args.lua")"

out=$("$GRACE" -v); st=$?
echo "$out" | grep -Eq '^grace [0-9]+\.[0-9]+\.[0-9]+ \(Lua 5\.4\.[0-9]+\)$'; ok $? "-v prints the version line" "$out"
out2=$("$GRACE" --version)
is "--version is -v" "$out2" "$out"

out=$("$GRACE" -h); st=$?
echo "$out" | grep -q '^usage: grace ' && echo "$out" | grep -q -- '--device'
ok $? "-h prints the usage, naming --device" "$out"
is "-h exits 0" "$st" "0"

out=$("$GRACE" -e 'print(require("grace") == grace, type(grace), grace.version)')
is "require 'grace' is the global grace" "$out" "$(printf 'true\ttable\t0.1.0')"

out=$("$GRACE" --device cpu -e 'print((grace.backend():match("^cpu")))'); st=$?
is "--device cpu works" "$out:$st" "cpu:0"

out=$("$GRACE" --device=cpu -e 'print((grace.backend():match("^cpu")))')
is "--device=cpu works" "$out" "cpu"

out=$("$GRACE" --device bogus -e 'print("ran")' 2>"$tmp/err"); st=$?
err=$(cat "$tmp/err")
[ "$st" -eq 1 ] && [ -z "$out" ] && grep -q "^grace: .*'bogus'" "$tmp/err"
ok $? "--device bogus: exit 1, message names the device" "status $st, stdout [$out], stderr [$err]"

out=$(GRACE_DEVICE=bogus2 "$GRACE" -e 'print("ran")' 2>"$tmp/err"); st=$?
[ "$st" -eq 1 ] && grep -q "bogus2" "$tmp/err"
ok $? "GRACE_DEVICE=bogus2: exit 1, message names the device" "status $st, stderr [$(cat "$tmp/err")]"

"$GRACE" -e 'os.exit(3)'; st=$?
is "os.exit(3) exits 3" "$st" "3"
"$GRACE" -e 'os.exit(false)'; st=$?
is "os.exit(false) exits 1" "$st" "1"

out=$("$GRACE" -l s=string -e 'print(s.rep("ab", 3))')
is "-l g=mod sets the global" "$out" "ababab"

out=$("$GRACE" -x 2>"$tmp/err"); st=$?
[ "$st" -eq 1 ] && grep -q "unrecognized option '-x'" "$tmp/err"
ok $? "an unknown option: exit 1 with a message" "status $st, stderr [$(cat "$tmp/err")]"

out=$(GRACE_INIT='init_ran = 5' "$GRACE" -e 'print(init_ran)')
is "GRACE_INIT runs first" "$out" "5"

out=$(printf '1+2\n= 2*3\nx = 9\nx\nerror("oops")\nprint("after")\n' | "$GRACE" -i 2>"$tmp/err" | grep -v '^grace ')
# prompts are printed to stdout when input is not a terminal, as lua5.4 does
is "-i with piped input: values printed, errors survived" "$out" "$(printf '> 3\n> 6\n> > 9\n> > after\n> ')"

if [ "$failed" -ne 0 ]; then exit 1; fi
exit 0
