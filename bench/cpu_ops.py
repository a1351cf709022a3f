# cpu_ops.py: NumPy's side of bench/cpu_ops.lua: the same ops on the same sizes, median seconds per call.
import sys, time
import numpy as np

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
rng = np.random.default_rng(0)
a = rng.random(1 << 20, dtype=np.float32)
b = rng.random(1 << 20, dtype=np.float32)
m = a.reshape(1024, 1024)

def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

cases = {
    "add": lambda: a + b,
    "mul": lambda: a * b,
    "exp": lambda: np.exp(a),
    "sum": lambda: a.sum(),
    "softmax": lambda: softmax(m),
}
for name, f in cases.items():
    for _ in range(5):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    print(name, ts[len(ts) // 2])
