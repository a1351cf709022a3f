-- test_nn.lua: grace.nn modules: parameter counts/shapes/names, :to, deterministic init, hand-computed
-- Linear, norms, activations, causality of masked attention and of nn.GPT, KV-cache decode = full forward,
-- error messages.
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local section = tap.section

local function flat(t)
  local out = {}
  local function walk(v) if type(v) == "table" then for _, x in ipairs(v) do walk(x) end else out[#out + 1] = v end end
  walk(t:tolist())
  return out
end

local function maxdiff(a, b)
  local fa, fb = flat(a), flat(b)
  assert(#fa == #fb, ("maxdiff: %d vs %d elements"):format(#fa, #fb))
  local m = 0
  for i = 1, #fa do
    local d = math.abs(fa[i] - fb[i])
    if d ~= d then return math.huge end
    if d > m then m = d end
  end
  return m
end

local function shape(t) return table.concat(t:size(), "x") end

section("parameter counts and shapes", function()
  local l = nn.Linear(4, 3)
  local p = l:parameters()
  tap.is(#p, 2, "Linear(4,3) has 2 parameter tensors")
  tap.is(l:num_parameters(), 15, "Linear(4,3) has 15 parameters")
  tap.is(shape(p[1]), "3x4", "Linear weight is [out, in]")
  tap.is(shape(p[2]), "3", "Linear bias is [out]")
  tap.is(p[1].dtype, "float32", "parameters are float32")
  local nb = nn.Linear(4, 3, {bias = false})
  tap.is(#nb:parameters(), 1, "Linear without bias has one tensor")
  tap.is(nb:num_parameters(), 12, "Linear(4,3,{bias=false}) has 12 parameters")
  tap.is(nn.Embedding(10, 3):num_parameters(), 30, "Embedding(10,3)")
  tap.is(nn.LayerNorm(5):num_parameters(), 10, "LayerNorm(5)")
  tap.is(nn.RMSNorm(5):num_parameters(), 5, "RMSNorm(5)")
  tap.is(#nn.ReLU():parameters() + #nn.GELU():parameters() + #nn.SiLU():parameters(), 0, "activations have none")
  local seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  tap.is(seq:num_parameters(), 4 * 8 + 8 + 8 * 2 + 2, "Sequential sums its children")
  tap.is(#seq, 3, "#Sequential")
  tap.is(nn.MLP(4, 16):num_parameters(), 4 * 16 + 16 + 16 * 4 + 4, "MLP(4,16)")
  tap.is(nn.MultiheadAttention(8, 2):num_parameters(), 4 * (8 * 8 + 8), "MultiheadAttention(8,2)")
  -- GPT-2 block: 12 d^2 + 13 d (two LayerNorms 4d, qkv+out 4d^2+4d, MLP 8d^2+5d)
  local d = 8
  tap.is(nn.TransformerBlock(d, 2):num_parameters(), 12 * d * d + 13 * d, "TransformerBlock(8,2) = 12d^2+13d")
  tap.is(nn.TransformerBlock(d, 2, {mlp_ratio = 2}):num_parameters(), 8 * d * d + 11 * d, "mlp_ratio=2")
end)

section("named_parameters", function()
  local seq = nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.Linear(3, 1))
  local map, names = seq:named_parameters()
  tap.is(table.concat(names, ","), "1.weight,1.bias,3.weight,3.bias", "Sequential names, in order")
  tap.ok(map["3.weight"] == seq[3].weight, "name maps to the very tensor")
  local blk = nn.TransformerBlock(8, 2)
  local _, bn = blk:named_parameters()
  tap.is(table.concat(bn, ","),
    "ln_1.weight,ln_1.bias,attn.q_proj.weight,attn.q_proj.bias,attn.k_proj.weight,attn.k_proj.bias," ..
    "attn.v_proj.weight,attn.v_proj.bias,attn.out_proj.weight,attn.out_proj.bias,ln_2.weight,ln_2.bias," ..
    "mlp.fc1.weight,mlp.fc1.bias,mlp.fc2.weight,mlp.fc2.bias", "TransformerBlock names, in order")
  local plist = blk:parameters()
  local same = #plist == #bn
  for i, n in ipairs(bn) do same = same and plist[i] == select(1, blk:named_parameters())[n] end
  tap.ok(same, "parameters() follows named_parameters() order")
end)

section("tostring", function()
  tap.is(tostring(nn.Linear(4, 3)), "Linear(in_features=4, out_features=3, bias=true)", "Linear")
  tap.is(tostring(nn.Linear(4, 3, {bias = false})), "Linear(in_features=4, out_features=3, bias=false)", "no bias")
  tap.is(tostring(nn.GELU("tanh")), "GELU(approximate='tanh')", "GELU")
  tap.is(tostring(nn.Sequential(nn.Linear(2, 2), nn.ReLU())),
    "Sequential(\n  (1): Linear(in_features=2, out_features=2, bias=true)\n  (2): ReLU()\n)", "Sequential")
end)

section(":to(dtype)", function()
  local m = nn.MLP(4, 8)
  tap.ok(m:to("float64") == m, ":to returns the module")
  local all = true
  for _, t in ipairs(m:parameters()) do all = all and t.dtype == "float64" end
  tap.ok(all, "every parameter is float64")
  tap.is(m.fc1.weight.dtype, "float64", "child fields are rebound")
  local y = m(grace.randn({2, 4}):double())
  tap.is(y.dtype, "float64", "forward in float64")
  tap.is(shape(y), "2x4", "MLP output shape")
end)

section("deterministic init", function()
  grace.manual_seed(7)
  local a = nn.TransformerBlock(8, 2)
  grace.manual_seed(7)
  local b = nn.TransformerBlock(8, 2)
  grace.manual_seed(8)
  local c = nn.TransformerBlock(8, 2)
  local pa, pb, pc = a:parameters(), b:parameters(), c:parameters()
  local same, differ = true, false
  for i = 1, #pa do
    same = same and maxdiff(pa[i], pb[i]) == 0
  end
  differ = maxdiff(pa[3], pc[3]) > 0
  tap.ok(same, "same seed gives the same parameters")
  tap.ok(differ, "another seed gives other parameters")
  local w = flat(nn.Linear(16, 4).weight)
  local inside, lo, hi = true, math.huge, -math.huge
  for _, v in ipairs(w) do inside = inside and math.abs(v) <= 0.25; lo = math.min(lo, v); hi = math.max(hi, v) end
  tap.ok(inside, "Linear(16,4) weights within 1/sqrt(16)")
  tap.ok(lo < -0.1 and hi > 0.1, "and spread over both signs")
  local e = flat(nn.Embedding(100, 50).weight)
  local s, s2 = 0, 0
  for _, v in ipairs(e) do s = s + v; s2 = s2 + v * v end
  local mean = s / #e
  tap.ok(math.abs(mean) < 0.1, "Embedding init mean ~0 (" .. mean .. ")")
  tap.ok(math.abs(math.sqrt(s2 / #e - mean * mean) - 1) < 0.1, "Embedding init std ~1")
end)

section("Linear by hand", function()
  local l = nn.Linear(2, 3)
  l.weight:copy_(grace.tensor({{1, 2}, {3, 4}, {5, 6}}))
  l.bias:copy_(grace.tensor({0.5, -1, 2}))
  local y = l(grace.tensor({{1.0, 1.0}, {2.0, -1.0}}))
  tap.is(shape(y), "2x3", "output shape")
  tap.ok(maxdiff(y, grace.tensor({{3.5, 6, 13}, {0.5, 1, 6}})) < 1e-6, "x W^T + b")
  local y3 = l(grace.tensor({{{1.0, 1.0}}, {{2.0, -1.0}}}))
  tap.is(shape(y3), "2x1x3", "leading dims are batch dims")
  tap.ok(maxdiff(y3, grace.tensor({{{3.5, 6, 13}}, {{0.5, 1, 6}}})) < 1e-6, "3-D input")
  local nb = nn.Linear(2, 1, {bias = false})
  nb.weight:copy_(grace.tensor({{2, -3}}))
  tap.ok(maxdiff(nb(grace.tensor({{1.0, 1.0}})), grace.tensor({{-1}})) < 1e-6, "no bias")
end)

section("Embedding", function()
  local e = nn.Embedding(5, 3)
  local y = e(grace.tensor({{1, 5}, {2, 2}}))
  tap.is(shape(y), "2x2x3", "output shape")
  local w = e.weight:tolist()
  local yl = y:tolist()
  tap.ok(yl[1][2][3] == w[5][3] and yl[2][1][1] == w[2][1], "rows are selected by 1-based ids")
end)

section("norms", function()
  grace.manual_seed(3)
  local x = grace.randn({4, 16}) * 3 + 2
  local ln = nn.LayerNorm(16)
  local rows = ln(x):tolist()
  local good_mean, good_var = true, true
  for _, r in ipairs(rows) do
    local s, s2 = 0, 0
    for _, v in ipairs(r) do s = s + v end
    local m = s / #r
    for _, v in ipairs(r) do s2 = s2 + (v - m) ^ 2 end
    good_mean = good_mean and math.abs(m) < 1e-5
    good_var = good_var and math.abs(s2 / #r - 1) < 1e-3
  end
  tap.ok(good_mean, "LayerNorm rows have mean ~0")
  tap.ok(good_var, "LayerNorm rows have (biased) variance ~1")
  ln.weight:fill_(2); ln.bias:fill_(1)
  local r = ln(x):tolist()[1]
  local s = 0
  for _, v in ipairs(r) do s = s + v end
  tap.near(s / #r, 1, "LayerNorm bias shifts the mean", 1e-5, 1e-5)
  local rms = nn.RMSNorm(16)
  local q = rms(x):tolist()
  local good = true
  for _, row in ipairs(q) do
    local s2 = 0
    for _, v in ipairs(row) do s2 = s2 + v * v end
    good = good and math.abs(s2 / #row - 1) < 1e-4
  end
  tap.ok(good, "RMSNorm rows have mean square ~1")
end)

section("activations", function()
  local x = grace.tensor({-1.0, 0.0, 1.0, 2.0})
  tap.ok(maxdiff(nn.ReLU()(x), grace.tensor({0.0, 0.0, 1.0, 2.0})) == 0, "ReLU")
  local erf1 = 0.8413447460685429     -- Phi(1) = (1 + erf(1/sqrt 2)) / 2
  tap.near(nn.GELU()(x):tolist()[3], erf1, "GELU exact at 1", 1e-6, 1e-6)
  local u = math.sqrt(2 / math.pi) * (1 + 0.044715)
  local th = (math.exp(2 * u) - 1) / (math.exp(2 * u) + 1)
  tap.near(nn.GELU("tanh")(x):tolist()[3], 0.5 * (1 + th), "GELU tanh at 1", 1e-6, 1e-6)
  tap.near(nn.SiLU()(x):tolist()[4], 2 / (1 + math.exp(-2)), "SiLU at 2", 1e-6, 1e-6)
  local seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
  local xi = grace.randn({2, 3})
  tap.ok(maxdiff(seq(xi), seq[1](xi):relu()) == 0, "Sequential chains its modules")
end)

section("causal attention", function()
  grace.manual_seed(11)
  local attn = nn.MultiheadAttention(8, 2, {causal = true})
  local x = grace.randn({2, 6, 8})
  local y = attn(x)
  tap.is(shape(y), "2x6x8", "output shape")
  local x2 = x:clone()
  x2:narrow(2, 5, 1):copy_(grace.randn({2, 1, 8}))
  local y2 = attn(x2)
  tap.ok(maxdiff(y:narrow(2, 1, 4), y2:narrow(2, 1, 4)) < 1e-6, "outputs before t do not see token t")
  tap.ok(maxdiff(y:narrow(2, 5, 2), y2:narrow(2, 5, 2)) > 1e-3, "outputs from t on do")
  local full = nn.MultiheadAttention(8, 2, {causal = false})
  tap.ok(maxdiff(full(x):narrow(2, 1, 1), full(x2):narrow(2, 1, 1)) > 1e-3, "without the mask, position 1 sees token 5")
  -- position 1 attends only to itself: softmax over one key is 1, so out = out_proj(v_proj(x_1))
  local x1 = x:narrow(2, 1, 1)
  tap.ok(maxdiff(y:narrow(2, 1, 1), attn.out_proj(attn.v_proj(x1))) < 1e-5, "first position = out_proj(v_proj(x1))")
end)

section("GPT", function()
  grace.manual_seed(4)
  local V, S, d = 11, 8, 16
  local g = nn.GPT(V, S, {d = d, heads = 2, layers = 2})
  -- embeddings (V + S) d, two blocks of 12 d^2 + 13 d, ln_f 2d, head d V + V
  tap.is(g:num_parameters(), (V + S) * d + 2 * (12 * d * d + 13 * d) + 2 * d + d * V + V,
         "GPT(11, 8, d 16, 2 layers): parameter count")
  local _, names = g:named_parameters()
  tap.is(names[1] .. " " .. names[3] .. " " .. names[#names], "tok.weight blocks.1.ln_1.weight head.bias",
         "GPT: parameter names")
  local stds = {}
  for _, name in ipairs({"tok.weight", "blocks.1.mlp.fc1.weight", "head.weight"}) do
    local w = ({g:named_parameters()})[1][name]
    stds[#stds + 1] = math.abs(w:std():item() - 0.02) < 0.005
  end
  tap.ok(stds[1] and stds[2] and stds[3], "GPT: matrices drawn from N(0, 0.02)")
  local ids = grace.randint(1, V + 1, {2, 6})
  local y = g(ids)
  tap.is(shape(y), "2x6x11", "GPT: logits [batch, seq, vocab]")
  local ids2 = ids:clone()
  ids2:narrow(2, 5, 1):copy_(ids:narrow(2, 5, 1):eq(1):to("int64") + 1)   -- a different id at position 5
  local y2 = g(ids2)
  tap.ok(maxdiff(y:narrow(2, 1, 4), y2:narrow(2, 1, 4)) < 1e-6 and maxdiff(y:narrow(2, 5, 2), y2:narrow(2, 5, 2)) > 1e-4,
         "GPT is causal: logits before position 5 do not see its id, those from 5 on do")
  local ok, err = pcall(function() return g(grace.randint(1, V + 1, {1, S + 1})) end)
  tap.ok(not ok and tostring(err):find("GPT: a sequence of 9 ids, longer than max_seq 8", 1, true),
         "GPT: a sequence longer than max_seq is an error naming both")
  ok, err = pcall(function() return g(grace.randint(1, V + 1, {6})) end)
  tap.ok(not ok and tostring(err):find("expected ids of shape [batch, seq], got [6]", 1, true),
         "GPT: 1-d ids are an error naming the shape")
end)

section("KV cache", function()
  grace.manual_seed(5)
  local blk = nn.TransformerBlock(16, 4)
  local B, T = 2, 7
  local x = grace.randn({B, T, 16})
  local y = blk(x)
  local ck, cv = blk:new_cache(B, 8)
  tap.is(shape(ck), "2x4x8x4", "cache shape [B, heads, max_seq, head_dim]")
  local yp = blk(x:narrow(2, 1, 4), {cache_k = ck, cache_v = cv, pos = 1})
  tap.ok(maxdiff(yp, y:narrow(2, 1, 4)) < 1e-5, "prefill through the cache = full forward")
  local worst = 0
  for t = 5, T do
    local yt = blk(x:narrow(2, t, 1), {cache_k = ck, cache_v = cv, pos = t})
    worst = math.max(worst, maxdiff(yt, y:narrow(2, t, 1)))
  end
  tap.ok(worst < 1e-5, "one-token decode = full forward (max diff " .. worst .. ")")
  -- chunks of 2 after position 1 exercise the mask offset (query i at pos+i-1)
  local ck2, cv2 = blk:new_cache(B, T)
  local parts = {}
  local pos = 1
  for _, len in ipairs({3, 2, 2}) do
    parts[#parts + 1] = blk(x:narrow(2, pos, len), {cache_k = ck2, cache_v = cv2, pos = pos})
    pos = pos + len
  end
  tap.ok(maxdiff(grace.cat(parts, 2), y) < 1e-5, "chunked prefill = full forward")
  tap.ok(maxdiff(ck2, ck:narrow(3, 1, T)) < 1e-6, "both caches hold the same keys")
end)

section("load_parameters", function()
  local a, b = nn.MLP(4, 8), nn.MLP(4, 8)
  b:load_parameters((a:named_parameters()))
  local x = grace.randn({3, 4})
  tap.ok(maxdiff(a(x), b(x)) == 0, "copied parameters give the same output")
  tap.raises(function() nn.MLP(4, 9):load_parameters((a:named_parameters())) end,
    {"fc1.weight", "[8, 4]", "[9, 4]"}, "shape mismatch names the parameter and shapes")
end)

section("errors", function()
  local l = nn.Linear(4, 3)
  tap.raises(function() local y = l(grace.randn({2, 5})); return y end, {"Linear", "[2, 5]", "expected 4", "test_nn.lua"},
    "wrong feature size names the shapes and the script line")
  local attn = nn.MultiheadAttention(8, 2)
  tap.raises(function() return attn(grace.randn({6, 8})) end, {"MultiheadAttention", "[6, 8]"}, "2-D input to attention")
  tap.raises(function() nn.MultiheadAttention(10, 3) end, {"divisible"}, "heads must divide d")
  local ck, cv = attn:new_cache(1, 4)
  tap.raises(function() return attn(grace.randn({1, 3, 8}), {cache_k = ck, cache_v = cv, pos = 3}) end,
    {"3..5", "[1, 2, 4, 4]"}, "cache overflow")
  tap.raises(function() return attn(grace.randn({2, 1, 8}), {cache_k = ck, cache_v = cv, pos = 1}) end,
    {"cache", "[1, 2, 4, 4]", "[2, 1, 8]"}, "cache for another batch")
  tap.raises(function() nn.GELU("fast") end, {"GELU", "fast"}, "unknown GELU approximation")
  tap.raises(function() nn.MLP(4, 8, {activation = "swoosh"}) end, {"swoosh"}, "unknown activation")
end)

tap.done()
