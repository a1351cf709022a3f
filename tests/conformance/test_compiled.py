#!/usr/bin/env python3
"""The whole conformance suite again, with every case body run through grace.compile (CONF_COMPILE=1, see
conf.py): the body is traced on a first call and the second call, served by the compiled entry, gives the results
compared with the same NumPy references. Runs the other test_*.py files of this folder (test_nn.py excepted: it
has its own harness) and re-emits their TAP lines as one stream, prefixed with the file's name."""
import glob
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
files = [f for f in sorted(glob.glob(os.path.join(here, "test_*.py")))
         if os.path.basename(f) not in ("test_compiled.py", "test_nn.py")]
env = dict(os.environ, CONF_COMPILE="1")
n = failed = 0
for f in files:
    name = os.path.basename(f)[5:-3]
    try:
        p = subprocess.run([sys.executable, f], capture_output=True, text=True, env=env, timeout=600, errors="replace")
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        out, err, rc = "", "timed out", None
    seen = 0
    for line in out.split("\n"):
        m = re.match(r"(not ok|ok) \d+ - (.*)$", line)
        if m:
            n += 1
            seen += 1
            if m.group(1) == "not ok":
                failed += 1
            print("%s %d - compiled %s: %s" % (m.group(1), n, name, m.group(2)))
        elif line.startswith("#"):
            print(line)
    if seen == 0 or (rc not in (0, 1)):
        n += 1
        failed += 1
        print("not ok %d - compiled %s: the file ran (exit status %s)" % (n, name, rc))
        for line in (err.strip().split("\n")[-8:] if err else []):
            print("#   " + line)
print("1..%d" % n)
sys.stdout.flush()
sys.exit(1 if failed else 0)
