-- greedy_loop.lua: benchmark workload "greedy_loop": a small recurrent decoder generating greedily until it emits
-- an end token or has run 64 steps, the whole loop one call. A step: h = tanh(E[tok] Wx + h Wh + b), tok =
-- argmax(h Wo). Each pool input holds a start token, a start state and its end token, chosen at build time as the
-- token that input's decoding emits at step 8k (k its place in the pool), so calls run 8 to 64 steps (fewer where
-- that token came up earlier). Returns the last state and the last token. Two forms: `greedy_loop` as users write
-- it (a Lua `for` with a `break` on item()), `greedy_loop_while` through grace.while_loop. The same model is
-- GreedyLoop in bench/torch/wl_control.py.
local M = {name = "greedy_loop", variants = {
  {name = "greedy_loop", dtype = "float32"},
  {name = "greedy_loop_while", dtype = "float32"},
}}

function M.config(small)
  if small then return {d = 32, vocab = 64, steps = 16, every = 2} end
  return {d = 512, vocab = 4096, steps = 64, every = 8}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local d, V = c.d, c.vocab
  local E = ctx.tensor("greedy.E", {V, d}, {"normal", 1})
  local Wx = ctx.tensor("greedy.Wx", {d, d}, {"normal", 1 / math.sqrt(d)})
  local Wh = ctx.tensor("greedy.Wh", {d, d}, {"normal", 1 / math.sqrt(d)})
  local b = ctx.tensor("greedy.b", {d}, {"normal", 0.02})
  local Wo = ctx.tensor("greedy.Wo", {d, V}, {"normal", 1 / math.sqrt(d)})
  local function step(tok, h)   -- tok [1] int64 (1-based), h [1, d]
    h = (grace.embedding(tok, E):matmul(Wx) + h:matmul(Wh) + b):tanh()
    return h:matmul(Wo):argmax(2), h
  end
  local pool = {}
  for k = 1, ctx.npool do
    -- token ids are 0-based on file (PyTorch's), 1-based in grace
    local tok = ctx.tensor(("greedy.tok.%d"):format(k), {1}, {"randint", 0, V}) + 1
    local h = ctx.tensor(("greedy.h.%d"):format(k), {1, d}, {"normal", 0.5})
    local t, s = tok, h
    for _ = 1, c.every * k do t, s = step(t, s) end
    pool[k] = {tok, h, t}
  end
  local fn
  if ctx.variant == "greedy_loop_while" then
    local zero = grace.zeros({}, {dtype = "int64", device = ctx.device})
    fn = function(tok, h, eos)
      local _, hn, tn = grace.while_loop(
        function(n, _, t) return n:lt(c.steps):logical_and(n:eq(0):logical_or(t:ne(eos):all())) end,
        function(n, s, t) local t2, s2 = step(t, s); return n + 1, s2, t2 end,
        {zero, h, tok}, {max_iters = c.steps})
      return hn, tn
    end
  else
    fn = function(tok, h, eos)
      for _ = 1, c.steps do
        tok, h = step(tok, h)
        if tok:eq(eos):item() then break end
      end
      return h, tok
    end
  end
  return {
    description = ("greedy decoding with a recurrent decoder, d %d, vocab %d, until an end token or %d steps"):format(
      d, V, c.steps),
    fn = fn,
    pool = pool,
    flops = 2 * c.steps * (2 * d * d + d * V),
  }
end

return M
