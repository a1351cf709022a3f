#!/bin/sh
# train.sh: examples/train_mlp.lua and train_gpt.lua run a few compiled training steps and their loss falls; no
# progress line when stdout is not a terminal. Run by prove through tests/run.sh, which sets $GRACE.
GRACE=${GRACE:-build/grace}
. "$(dirname "$0")/lib.sh"
echo "1..6"
out=$("$GRACE" examples/train_mlp.lua steps=40 every=20 2>&1); st=$?
ok $st "train_mlp.lua runs" "$out"
first=$(printf '%s\n' "$out" | awk '$1 == "step" && $2 == 1 { print $4 }')
last=$(printf '%s\n' "$out" | awk '$1 == "step" && $2 == 40 { print $4 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a != "" && b != "" && b < a * 0.75) }'
ok $? "the loss falls by a quarter or more in 40 steps ($first to $last)" "$out"
printf '%s\n' "$out" | grep -q "compiled step: 1 trace(s), 39 compiled calls, 0 eager"
ok $? "one trace, the other 39 steps compiled" "$out"
printf '%s' "$out" | grep -q "$(printf '\r')"
[ $? -ne 0 ]; ok $? "no progress line on a pipe"
out=$("$GRACE" examples/train_gpt.lua steps=30 every=30 2>&1); st=$?
first=$(printf '%s\n' "$out" | awk '$1 == "step" && $2 == 1 { print $4 }')
last=$(printf '%s\n' "$out" | awk '$1 == "step" && $2 == 30 { print $4 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a != "" && b != "" && b < a * 0.9) }'
ok $? "train_gpt.lua: the loss falls in 30 steps ($first to $last)" "$out"
printf '%s\n' "$out" | grep -q "compiled step: 1 trace(s), 29 compiled calls, 0 eager"
ok $? "train_gpt.lua: one trace, the other 29 steps compiled" "$out"
exit $((failed > 0))
