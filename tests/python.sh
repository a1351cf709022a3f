#!/bin/sh
# python.sh: prints the path of a python3 that has NumPy (Debian's first, then the one on PATH).
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import numpy' >/dev/null 2>&1; then command -v "$p"; exit 0; fi
done
echo /usr/bin/python3
