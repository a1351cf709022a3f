#!/bin/sh
# layers.sh: checks the layering rules of docs/architecture.md (its ```layers block: "folder: folders it may use")
# on the source tree and on a build of it. An include of a header from a folder the includer's folder may not use
# fails, and so does a call (an undefined symbol of an object) to a function defined in such a folder; a folder
# whose rule says "api" may call only the public grace_* functions. libgrace.so must export only grace_* functions.
# Prints TAP. Usage: sh tools/layers.sh [BUILD_DIR] (default: the folder of $GRACE, else build)
build=${1:-}
[ -n "$build" ] || { [ -n "$GRACE" ] && build=$(dirname "$GRACE"); }
build=${build:-build}
cd "$(dirname "$0")/.." || exit 1
rules=$(awk '/^```layers/{on=1; next} /^```/{on=0} on' docs/architecture.md)
[ -n "$rules" ] || { echo "1..0 # SKIP no layers block in docs/architecture.md"; exit 1; }
folders=$(echo "$rules" | sed 's/:.*//')
allowed() {   # allowed FROM TO: 0 when folder FROM may use folder TO
  [ "$1" = "$2" ] && return 0
  echo "$rules" | awk -v f="$1" -v t="$2" -F: '$1==f { n=split($2, a, " "); for (i=1; i<=n; i++) if (a[i]==t) ok=1 } END { exit ok ? 0 : 1 }'
}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# includes: "folder/file.h" across the rules
for f in $folders; do
  for src in "$f"/*.c "$f"/*.h; do
    [ -f "$src" ] || continue
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/[^"]*".*/\1/p' "$src" | sort -u | while read -r to; do
      allowed "$f" "$to" || echo "$src includes a header of $to/" >> "$tmp/bad"
    done
  done
done
# calls: each object's undefined symbols that another folder's objects define
for f in $folders; do
  for o in "$build"/obj/"$f"/*.o; do
    [ -f "$o" ] && [ -f "$f/$(basename "$o" .o).c" ] && nm -g --defined-only "$o" | awk -v f="$f" 'NF == 3 { print $3, f }'
  done
done | sort -u > "$tmp/defs"
for f in $folders; do
  api=$(echo "$rules" | awk -v f="$f" -F: '$1==f && $2 ~ /(^| )api( |$)/ { print 1 }')
  for o in "$build"/obj/"$f"/*.o; do
    [ -f "$o" ] && [ -f "$f/$(basename "$o" .o).c" ] || continue   # objects of removed sources are stale
    nm -u "$o" | awk '{ print $NF }' | sort -u | join - "$tmp/defs" | while read -r sym to; do
      [ "$to" = "$f" ] && continue
      if [ -n "$api" ]; then
        case "$sym" in grace_*) continue ;; esac
        echo "$o calls $sym ($to/), not a public grace_ function" >> "$tmp/bad"
      elif ! allowed "$f" "$to"; then
        echo "$o calls $sym, defined in $to/" >> "$tmp/bad"
      fi
    done
  done
done
[ -s "$tmp/defs" ] || { echo "1..0 # SKIP no objects under $build/obj"; exit 0; }
echo "1..3"
if [ -s "$tmp/bad" ] && grep -q includes "$tmp/bad"; then echo "not ok 1 - includes follow docs/architecture.md"; grep includes "$tmp/bad" | sed 's/^/# /'
else echo "ok 1 - includes follow docs/architecture.md"; fi
if [ -s "$tmp/bad" ] && grep -qv includes "$tmp/bad"; then echo "not ok 2 - calls follow docs/architecture.md"; grep -v includes "$tmp/bad" | sed 's/^/# /'
else echo "ok 2 - calls follow docs/architecture.md"; fi
if [ -f "$build/libgrace.so" ]; then
  nm -D --defined-only "$build/libgrace.so" | awk '$2 ~ /^[TDBRVW]$/ && $3 !~ /^grace_/ { print $3 }' > "$tmp/exports"
  if [ -s "$tmp/exports" ]; then
    echo "not ok 3 - libgrace.so exports only grace_* ($(wc -l < "$tmp/exports") others)"; sed 's/^/# /' "$tmp/exports" | head -20
    echo x >> "$tmp/bad"
  else echo "ok 3 - libgrace.so exports only grace_*"; fi
else echo "ok 3 # SKIP no $build/libgrace.so"; fi
[ ! -s "$tmp/bad" ]
