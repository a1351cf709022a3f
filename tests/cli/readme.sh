#!/bin/sh
# readme.sh: every ```lua block of README.md runs and prints what the README says it prints
# (tests/cli/readme.lua does the work; blocks that need a CUDA device skip without one).
GRACE=${GRACE:-build/grace}
cd "$(dirname "$0")/../.." || exit 1
exec "$GRACE" tests/cli/readme.lua README.md
