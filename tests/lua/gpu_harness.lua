-- gpu_harness.lua: the start both GPU test files share. Picks the device (GRACE_TEST_DEVICE, default cuda; "cpu"
-- runs a file CPU against CPU, a check of its harness), prints a TAP skip plan and exits when no CUDA device is
-- usable, fails once (not thousands of times) when a tensor made on the device cannot be read back, and seeds
-- the generator (GRACE_TEST_SEED reproduces a run; the seed is printed as a diag line). Also the helpers and
-- pointwise tolerances both files use.
local tap = require "tests.lua.tap"
local grace = require "grace"

local DEV = os.getenv("GRACE_TEST_DEVICE") or "cuda"
if DEV ~= "cpu" and not grace.cuda_available() then
  local ok, why = pcall(grace.device, "cuda")
  if ok then grace.device("cpu") end
  why = tostring(why or grace.backend()):gsub("^[^:]*:%d+: ", ""):gsub("\n", " ")
  io.write("1..0 # SKIP no CUDA device: ", why, "\n")
  os.exit(0)
end
do
  local ok, err = pcall(function() return grace.ones(3, {device = DEV}):cpu():tolist() end)
  if not ok then
    io.write("not ok 1 - a tensor made on ", DEV, " reads back\n# ", tostring(err):gsub("\n", "\n# "), "\n1..1\n")
    os.exit(1)
  end
end

local SEED = tonumber(os.getenv("GRACE_TEST_SEED")) or os.time()
tap.diag(("device %s, seed %d (GRACE_TEST_SEED=%d reproduces this run); backend: %s"):format(
  DEV, SEED, SEED, grace.backend()))
grace.manual_seed(SEED)

local H = {DEV = DEV, SEED = SEED}
-- pointwise tolerances per float dtype (see the files' headers)
H.TOL = {
  float32 = {rtol = 1e-5, atol = 1e-6}, float64 = {rtol = 1e-12, atol = 1e-12},
  float16 = {rtol = 1e-2, atol = 1e-3}, bfloat16 = {rtol = 2e-2, atol = 1e-2},
}
function H.shape(t) return "[" .. table.concat(t:size(), ",") .. "]" end
-- A separate copy of a CPU tensor on the device under test (a clone when that device is the CPU too, so
-- in-place ops never touch the reference).
function H.to_dev(t)
  if DEV == "cpu" then return t:clone() end
  return t:to(DEV)
end
function H.flat(t) return t:reshape(-1):tolist() end
function H.absmax(t)
  if not grace.is_tensor(t) or t:numel() == 0 then return 0 end
  return t:double():abs():max():item()
end

-- The early-exit MLP of the partition and automatic-region tests: #Ws layers of relu(x W + b), returning x * 0.5
-- after layer 4 when x:abs():max():item() > 1e9 (a host read: a graph break, or a branch grace can make a region).
function H.early_exit_mlp(Ws, bs)
  return function(x)
    for i = 1, #Ws do
      x = (x:matmul(Ws[i]) + bs[i]):relu()
      if i == 4 and x:abs():max():item() > 1e9 then return x * 0.5 end
    end
    return x
  end
end
-- Its weights: `layers` random [K, K] and [K] CPU tensors, and their copies on the device under test.
function H.mlp_weights(K, layers)
  local Wc, bc, Wd, bd = {}, {}, {}, {}
  for i = 1, layers do
    Wc[i] = grace.randn(K, K) * (1 / math.sqrt(K))
    bc[i] = grace.randn(K) * 0.1
    Wd[i], bd[i] = H.to_dev(Wc[i]), H.to_dev(bc[i])
  end
  return Wc, bc, Wd, bd
end
-- Whether got (any device) is want (CPU, float32) within 1e-4 * sqrt(K) + 1e-4 * max |want|, a sum over K
-- products; and the largest difference.
function H.close_k(got, want, K)
  local d = (got:cpu():double() - want:double()):abs():max():item()
  return d <= 1e-4 * math.sqrt(K) + 1e-4 * H.absmax(want), d
end
return H
