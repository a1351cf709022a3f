"""wl_control.py: the control-flow workloads of the benchmark suite, PyTorch side (imported by workloads.py).

branch, early_exit and greedy_loop as bench/workloads/{branch,early_exit,greedy_loop}.lua define them, with the
same shapes, tensor names and initialisations. Each comes in the form users write (`.item()` and a Python `if`,
or a `for` loop with a `break`) and in PyTorch's explicit form (`torch.cond`; the `while_loop` higher-order op for
the loop), named like grace's variants (branch / branch_cond, early_exit / early_exit_cond, greedy_loop /
greedy_loop_while), so the report pairs them.
"""
import math

import numpy as np

WORKLOADS = ["branch", "early_exit", "greedy_loop"]
VARIANTS = {
    "branch": [("branch", "float32"), ("branch_cond", "float32")],
    "early_exit": [("early_exit", "float32"), ("early_exit_cond", "float32")],
    "greedy_loop": [("greedy_loop", "float32"), ("greedy_loop_while", "float32")],
}
NPOOL = 8
LIMIT = 1e9   # early_exit's threshold on max |x|


def config(name, small):
    if name in ("branch", "early_exit"):
        return dict(half=4, d=64 if small else 1024, batch=8)
    if name == "greedy_loop":
        return dict(d=32, vocab=64, steps=16, every=2) if small else dict(d=512, vocab=4096, steps=64, every=8)
    raise ValueError(name)


def _stack(s, prefix, n, d):
    for i in range(1, n + 1):
        s.append((f"{prefix}{i}.weight", (d, d), ("normal", math.sqrt(2 / d))))
        s.append((f"{prefix}{i}.bias", (d,), ("normal", 0.02)))


def specs(name, c):
    """(name, shape, init) in the order the Lua modules ask for them."""
    s = []
    if name == "branch":
        for p in ("branch.fc", "branch.pos", "branch.neg"):
            _stack(s, p, c["half"], c["d"])
        for k in range(1, NPOOL + 1):
            sign = 1 if k % 2 == 1 else -1
            s.append((f"branch.x.{k}", (c["batch"], c["d"]), ("normal", 1)))
            s.append((f"branch.s.{k}", (), ("uniform", sign, sign)))
    elif name == "early_exit":
        for p in ("early.fc", "early.rest"):
            _stack(s, p, c["half"], c["d"])
        for k in range(1, NPOOL + 1):
            s.append((f"early.x.{k}", (c["batch"], c["d"]), ("normal", 1)))
    elif name == "greedy_loop":
        d, V = c["d"], c["vocab"]
        s += [("greedy.E", (V, d), ("normal", 1)), ("greedy.Wx", (d, d), ("normal", 1 / math.sqrt(d))),
              ("greedy.Wh", (d, d), ("normal", 1 / math.sqrt(d))), ("greedy.b", (d,), ("normal", 0.02)),
              ("greedy.Wo", (d, V), ("normal", 1 / math.sqrt(d)))]
        for k in range(1, NPOOL + 1):
            s.append((f"greedy.tok.{k}", (1,), ("randint", 0, V)))
            s.append((f"greedy.h.{k}", (1, d), ("normal", 0.5)))
    else:
        raise ValueError(name)
    return s


def numpy_reference(wname, A, c):
    """The first result for pool input 1, in float64 (what --write-only stores)."""
    erf = np.vectorize(math.erf)

    def W(n):
        return A[n].astype(np.float64) if A[n].dtype == np.float32 else A[n]

    def stack(x, prefix):
        for i in range(1, c["half"] + 1):
            x = x @ W(f"{prefix}{i}.weight").T + W(f"{prefix}{i}.bias")
            x = 0.5 * x * (1 + erf(x / math.sqrt(2)))
        return x
    if wname == "branch":
        h = stack(W("branch.x.1"), "branch.fc")
        return stack(h, "branch.pos" if h.sum() * W("branch.s.1") > 0 else "branch.neg")
    if wname == "early_exit":
        h = stack(W("early.x.1"), "early.fc")
        return h if np.abs(h).max() > LIMIT else stack(h, "early.rest")
    if wname == "greedy_loop":
        E, Wx, Wh, b, Wo = (W("greedy." + n) for n in ("E", "Wx", "Wh", "b", "Wo"))

        def step(tok, h):
            h = np.tanh(E[tok] @ Wx + h @ Wh + b)
            return (h @ Wo).argmax(-1), h
        tok, h = A["greedy.tok.1"], W("greedy.h.1")
        t, s = tok, h
        for _ in range(c["every"]):
            t, s = step(t, s)
        eos = t
        for _ in range(c["steps"]):
            tok, h = step(tok, h)
            if (tok == eos).all():
                break
        return h
    raise ValueError(wname)


def build(wname, vname, T, c, torch, nn, F, P):
    """(module, pool, description) for a variant; T maps tensor names to device tensors (float32 here)."""
    def stack(prefix):
        layers = []
        for i in range(1, c["half"] + 1):
            lin = nn.Linear(c["d"], c["d"], device="meta")
            lin.weight, lin.bias = P(T[f"{prefix}{i}.weight"]), P(T[f"{prefix}{i}.bias"])
            layers += [lin, nn.GELU()]
        return nn.Sequential(*layers)

    if wname == "branch":
        class Branch(nn.Module):
            def __init__(self):
                super().__init__()
                self.first, self.pos, self.neg = stack("branch.fc"), stack("branch.pos"), stack("branch.neg")

            def forward(self, x, s):
                h = self.first(x)
                if vname == "branch_cond":
                    return torch.cond((h.sum() * s) > 0, lambda a: self.pos(a), lambda a: self.neg(a), (h,))
                if (h.sum() * s).item() > 0:
                    return self.pos(h)
                return self.neg(h)
        pool = [(T[f"branch.x.{k}"], T[f"branch.s.{k}"]) for k in range(1, NPOOL + 1)]
        return Branch(), pool, (f"{c['half']} x (Linear {c['d']}->{c['d']} + GELU), then one of two such halves by "
                                f"the sign of a sum, batch {c['batch']}")
    if wname == "early_exit":
        class EarlyExit(nn.Module):
            def __init__(self):
                super().__init__()
                self.first, self.rest = stack("early.fc"), stack("early.rest")

            def forward(self, x):
                h = self.first(x)
                if vname == "early_exit_cond":
                    return torch.cond(h.abs().max() > LIMIT, lambda a: a.clone(), lambda a: self.rest(a), (h,))
                if h.abs().max().item() > LIMIT:
                    return h
                return self.rest(h)
        pool = [(T[f"early.x.{k}"],) for k in range(1, NPOOL + 1)]
        return EarlyExit(), pool, (f"{c['half']} x (Linear {c['d']}->{c['d']} + GELU), a check on max |x|, "
                                   f"{c['half']} more, batch {c['batch']}")
    if wname == "greedy_loop":
        steps = c["steps"]

        class GreedyLoop(nn.Module):
            def __init__(self):
                super().__init__()
                self.E, self.Wx, self.Wh, self.b, self.Wo = (P(T["greedy." + n]) for n in ("E", "Wx", "Wh", "b", "Wo"))

            def step(self, tok, h):
                h = torch.tanh(F.embedding(tok, self.E) @ self.Wx + h @ self.Wh + self.b)
                return (h @ self.Wo).argmax(-1), h

            def forward(self, tok, h, eos):
                if vname == "greedy_loop_while":
                    from torch._higher_order_ops.while_loop import while_loop
                    n0 = torch.zeros((), dtype=torch.int64, device=tok.device)

                    def cond_fn(n, s, t, e):
                        return (n < steps) & ((n == 0) | (t != e).all())

                    def body_fn(n, s, t, e):
                        t2, s2 = self.step(t, s)
                        return n + 1, s2, t2, e.clone()
                    _, h, tok, _ = while_loop(cond_fn, body_fn, (n0, h, tok, eos))
                    return h, tok
                for _ in range(steps):
                    tok, h = self.step(tok, h)
                    if (tok == eos).all().item():
                        break
                return h, tok
        model = GreedyLoop()
        pool = []
        with torch.no_grad():
            for k in range(1, NPOOL + 1):
                tok, h = T[f"greedy.tok.{k}"], T[f"greedy.h.{k}"]
                t, s = tok, h
                for _ in range(c["every"] * k):
                    t, s = model.step(t, s)
                pool.append((tok, h, t))
        return model, pool, (f"greedy decoding with a recurrent decoder, d {c['d']}, vocab {c['vocab']}, until an "
                             f"end token or {steps} steps")
    raise ValueError(wname)
