"""wl_train.py: the training-step workload of the benchmark suite, PyTorch side (imported by workloads.py).

train_step as bench/workloads/train_step.lua defines it: one whole training step per call, written as PyTorch users
write it (`opt.zero_grad(set_to_none=True); loss = loss_fn(model(x), y); loss.backward(); opt.step()`), with
torch.compile applied to that step function for the compiled modes. Two variants, with the same shapes, tensor
names and initialisations as grace's:
  train_step_mlp: the mlp workload's model (8 x (Linear 1024->1024 + exact GELU), batch 8; weights tmlp.*), MSE
                  against a target batch;
  train_step_gpt: the tiny GPT of examples/train_gpt.lua (grace's nn.GPT: token and position embeddings, 2 pre-norm
                  blocks with causal attention and a tanh-GELU MLP, a final LayerNorm, a linear head; d 64, 4 heads,
                  context 32, vocabulary 64, batch 16), cross-entropy on next ids; attention through
                  F.scaled_dot_product_attention(is_causal=True), as nanoGPT writes it.
AdamW(lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-2), PyTorch's defaults otherwise. A step changes the
weights: the step object has reset() (the initial weights back, the optimizer's state zeroed in place) and each
compiled mode gets a fresh model and optimizer (compiled(mode)); the reference written for grace is the losses of
NPOOL steps from the initial state, one per pool input.
"""
import math

WORKLOADS = ["train_step"]
VARIANTS = {"train_step": [("train_step_mlp", "float32"), ("train_step_gpt", "float32")]}
NPOOL = 8
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)


def config(name, small):
    """Both variants' sizes (the same as config() in bench/workloads/train_step.lua)."""
    if name != "train_step":
        raise ValueError(name)
    mlp = dict(layers=8, d=64, batch=8) if small else dict(layers=8, d=1024, batch=8)
    gpt = (dict(layers=2, d=32, heads=4, vocab=64, seq=16, batch=4) if small
           else dict(layers=2, d=64, heads=4, vocab=64, seq=32, batch=16))
    return dict(mlp=mlp, gpt=gpt)


def gpt_params(g):
    """(name, shape, init) of nn.GPT's parameters in its order (Module:named_parameters), under tgpt."""
    d, V = g["d"], g["vocab"]
    out = [("tok.weight", (V, d)), ("pos.weight", (g["seq"], d))]
    for i in range(1, g["layers"] + 1):
        p = f"blocks.{i}."
        out += [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,))]
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out += [(p + f"attn.{proj}.weight", (d, d)), (p + f"attn.{proj}.bias", (d,))]
        out += [(p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                (p + "mlp.fc1.weight", (4 * d, d)), (p + "mlp.fc1.bias", (4 * d,)),
                (p + "mlp.fc2.weight", (d, 4 * d)), (p + "mlp.fc2.bias", (d,))]
    out += [("ln_f.weight", (d,)), ("ln_f.bias", (d,)), ("head.weight", (V, d)), ("head.bias", (V,))]

    def init(name):   # as train_step.lua: LayerNorm scales 1, shifts 0, the rest N(0, 0.02)
        if ".ln_" in "." + name and name.endswith(".weight"):
            return ("normal", 0, 1)
        if ".ln_" in "." + name and name.endswith(".bias"):
            return ("normal", 0)
        return ("normal", 0.02)
    return [("tgpt." + n, s, init(n)) for n, s in out]


def specs(name, c):
    """(name, shape, init) in the order the Lua module asks for them."""
    if name != "train_step":
        raise ValueError(name)
    m, g = c["mlp"], c["gpt"]
    s = []
    for i in range(1, m["layers"] + 1):
        s.append((f"tmlp.fc{i}.weight", (m["d"], m["d"]), ("normal", math.sqrt(2 / m["d"]))))
        s.append((f"tmlp.fc{i}.bias", (m["d"],), ("normal", 0.02)))
    for k in range(1, NPOOL + 1):
        s.append((f"tmlp.x.{k}", (m["batch"], m["d"]), ("normal", 1)))
        s.append((f"tmlp.y.{k}", (m["batch"], m["d"]), ("normal", 1)))
    s += gpt_params(g)
    for k in range(1, NPOOL + 1):
        s.append((f"tgpt.x.{k}", (g["batch"], g["seq"]), ("randint", 0, g["vocab"])))
        s.append((f"tgpt.y.{k}", (g["batch"], g["seq"]), ("randint", 0, g["vocab"])))
    return s


def build(wname, vname, T, c, torch, nn, F):
    """(step, pool, description) for a variant; T maps tensor names to device tensors (float32). step(x, y) runs one
    training step and returns the loss; step.reset() and step.compiled(mode) as the module docstring says."""
    if vname == "train_step_mlp":
        m = c["mlp"]

        def make_model():
            layers = []
            for i in range(1, m["layers"] + 1):
                lin = nn.Linear(m["d"], m["d"], device=T[f"tmlp.fc{i}.weight"].device)
                with torch.no_grad():
                    lin.weight.copy_(T[f"tmlp.fc{i}.weight"])
                    lin.bias.copy_(T[f"tmlp.fc{i}.bias"])
                layers += [lin, nn.GELU()]
            return nn.Sequential(*layers)
        loss_fn = F.mse_loss

        def named_params(model):   # (the weight's name on file, the parameter)
            return [(f"tmlp.fc{i}.{w}", getattr(model[2 * (i - 1)], w))
                    for i in range(1, m["layers"] + 1) for w in ("weight", "bias")]
        pool = [(T[f"tmlp.x.{k}"], T[f"tmlp.y.{k}"]) for k in range(1, NPOOL + 1)]
        desc = f"{m['layers']} x (Linear {m['d']}->{m['d']} + GELU), batch {m['batch']}, MSE"
    elif vname == "train_step_gpt":
        g = c["gpt"]
        d, H, V = g["d"], g["heads"], g["vocab"]

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
                self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
                self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)
                self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                B, Tn, _ = x.shape
                h = self.ln_1(x)
                q, k, v = (p(h).view(B, Tn, H, d // H).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.out_proj(o.transpose(1, 2).reshape(B, Tn, d))
                return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))

        class Gpt(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = nn.Embedding(V, d), nn.Embedding(g["seq"], d)
                self.blocks = nn.ModuleList(Block() for _ in range(g["layers"]))
                self.ln_f, self.head = nn.LayerNorm(d, eps=1e-5), nn.Linear(d, V)

            def forward(self, ids):
                x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
                for b in self.blocks:
                    x = b(x)
                return self.head(self.ln_f(x))

        def torch_name(name):   # grace's name (blocks 1-based, attn.* and mlp.* submodules) -> this module's
            name = name[len("tgpt."):]
            if name.startswith("blocks."):
                _, i, rest = name.split(".", 2)
                rest = rest.replace("attn.", "").replace("mlp.", "")
                return f"blocks.{int(i) - 1}.{rest}"
            return name

        def make_model():
            model = Gpt().to(T["tgpt.tok.weight"].device)
            own = dict(model.named_parameters())
            names = [n for n, _, _ in gpt_params(g)]
            assert len(names) == len(own), (len(names), len(own))
            with torch.no_grad():
                for n in names:
                    own[torch_name(n)].copy_(T[n])
            return model

        def loss_fn(logits, y):
            return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))

        def named_params(model):
            own = dict(model.named_parameters())
            return [(n, own[torch_name(n)]) for n, _, _ in gpt_params(g)]
        pool = [(T[f"tgpt.x.{k}"], T[f"tgpt.y.{k}"]) for k in range(1, NPOOL + 1)]
        desc = (f"GPT, {g['layers']} layers, d {d}, {H} heads, vocab {V}, batch {g['batch']} x {g['seq']} tokens, "
                "cross-entropy")
    else:
        raise ValueError(vname)

    class TrainStep:
        """One model, its AdamW and the step function (compiled for a mode other than eager)."""

        def __init__(self, mode="eager"):
            self.model = make_model()
            self.opt = torch.optim.AdamW(self.model.parameters(), **ADAMW)
            self.initial = [p.detach().clone() for p in self.model.parameters()]
            model, opt = self.model, self.opt

            def step(x, y):   # as users write it
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                return loss.detach()
            self.fn = step if mode == "eager" else torch.compile(step, **({} if mode == "compile" else {"mode": mode}))

        def __call__(self, x, y):
            # the suite runs under torch.no_grad() (inference workloads): a training step turns grad mode on for
            # itself, outside the compiled function
            with torch.enable_grad():
                return self.fn(x, y)

        def reset(self):
            with torch.no_grad():
                for p, p0 in zip(self.model.parameters(), self.initial):
                    p.copy_(p0)
                for st in self.opt.state.values():   # in place: compiled code and CUDA graphs hold these tensors
                    for v in st.values():
                        if torch.is_tensor(v):
                            v.zero_()

        def grads(self, x, y):
            """Each parameter's gradient after one forward and backward from the initial state, by name on file."""
            self.reset()
            self.opt.zero_grad(set_to_none=True)
            with torch.enable_grad():
                loss_fn(self.model(x), y).backward()
            return [(n, p.grad.detach()) for n, p in named_params(self.model)]

        def compiled(self, mode):
            return TrainStep(mode)

    return TrainStep(), pool, desc + ", AdamW, one step per call"
