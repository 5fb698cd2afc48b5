-- evaluate: decides all hits of one request together, atomically, on the
-- clock of this Redis node.
--
-- KEYS[i]: the key of hit i (a key may repeat: hits on one counter).
-- ARGV[1]: "" in production, the time is then Redis TIME (seconds and
--   microseconds); tests pass an explicit now in µs to reach exact
--   boundaries.
-- ARGV[2 + 11*(i-1) ...]: hit i's group of 11 arguments:
--   1 algorithm code (limit.Algorithm: 0 fixed_window, 1 sliding_window,
--     2 sliding_log, 3 token_bucket, 4 leaky_bucket, 5 gcra)
--   2 cost (>= 0)   3 flags: 1 refund + 2 advisory (0 to 3)
--   4 limit L   5 window W in µs
--   6 capacity B (limit.Spec.Capacity)   7 precision N (sub-windows, >= 1)
--   8..11 calendar window boundaries in µs for a calendar fixed window
--     (four ascending instants around the server's clock), or "" each.
-- Returns a flat array of 5 integers per hit, in order: allowed (0/1),
--   remaining, reset (µs), retry (µs), never (0/1).
--
-- Semantics (limit.step and limit.Memory.Evaluate): hits are applied in
-- order to a working copy of each key's state, so a later hit on a key sees
-- an earlier one's consumption. Before the algorithm: Limit 0 denies a hit
-- of cost > 0 (never, all else 0) and allows a peek or refund (all 0),
-- without reading state; a cost above the capacity (not a refund) is denied
-- with never set and retry 0, remaining and reset being those of a peek.
-- If any hit of cost > 0, neither a refund nor advisory, is denied (it
-- blocks), nothing is written, and each allowed hit's decision is that of
-- a hit of cost 0 against the stored state, allowed;
-- otherwise each changed key is written once and set to expire at the
-- instant its state becomes equivalent to none (now + the TTL of its last
-- write, in ms rounded up; see expire_at). Every hit gets its decision
-- either way.
--
-- Redis 6.2 and 7: TIME before writes needs effects replication, the
-- default since Redis 5 and the only mode of 7, so the script does not call
-- redis.replicate_commands(). Keys are only those in KEYS (Cluster).

local NARGS = 11

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  -- Effects replication (the default since Redis 5, the only mode in 7)
  -- makes reading TIME before writing safe.
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function hit_at(i)
  local a = 1 + (i - 1) * NARGS
  local h = {
    code = tonumber(ARGV[a + 1]),
    cost = tonumber(ARGV[a + 2]),
    refund = ARGV[a + 3] == '1' or ARGV[a + 3] == '3',
    advisory = ARGV[a + 3] == '2' or ARGV[a + 3] == '3',
    limit = tonumber(ARGV[a + 4]),
    window = tonumber(ARGV[a + 5]),
    cap = tonumber(ARGV[a + 6]),
    precision = tonumber(ARGV[a + 7]),
  }
  if ARGV[a + 8] ~= '' then
    h.cal = {tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9]), tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11])}
  end
  return h
end

-- step mirrors limit.step: it returns the working state after the hit
-- and the hit's outcome. The caller keeps the state only when the hit
-- writes (the sliding algorithms' states may also drop what no longer
-- counts, which changes nothing).
local function step(algo, st, ok, h, cost, refund)
  if h.limit == 0 then
    local o = outcome(cost == 0 or refund, 0, 0, 0, false, 0)
    o.never = cost > 0 and not refund
    return st, o
  end
  if cost > h.cap and not refund then
    local nst, o = step(algo, st, ok, h, 0, false)
    o.allowed, o.never, o.retry = false, true, 0
    return nst, o
  end
  return algo.step(st, ok, h, now, cost, refund)
end

if #ARGV ~= 1 + NARGS * #KEYS then
  return redis.error_reply('floodgate: ' .. #ARGV .. ' arguments for ' .. #KEYS .. ' keys')
end

-- algorithm returns the functions of the algorithm with the given code,
-- creating them on first use.
local algorithms = {}
local function algorithm(code)
  local a = algorithms[code]
  if a == nil and loaders[code] ~= nil then
    a = loaders[code]()
    algorithms[code] = a
  end
  return a
end

local work, order, hits = {}, {}, {}
local out = {}
local denied = false
for i = 1, #KEYS do
  local key = KEYS[i]
  local h = hit_at(i)
  local algo = algorithm(h.code)
  if not algo then
    return redis.error_reply('floodgate: unknown algorithm code ' .. ARGV[2 + (i - 1) * NARGS])
  end
  local w = work[key]
  if w == nil then
    w = {algo = algo, code = h.code}
    work[key] = w
    order[#order + 1] = key
  elseif w.code ~= h.code then
    return redis.error_reply('floodgate: key ' .. key .. ' used by two algorithms in one call')
  end
  if w.st == nil and h.limit ~= 0 then
    w.st, w.ok = algo.load(key, h, now)
    w.st0, w.ok0 = w.st, w.ok
  end
  local st, o = step(algo, w.st, w.ok, h, h.cost, h.refund)
  if o.write then
    -- A state written with no lifetime left is equivalent to none: later
    -- hits of the call see none, and the key is deleted.
    w.st, w.ok, w.h, w.ttl, w.dirty = st, o.ttl > 0, h, o.ttl, true
  end
  if not o.allowed and h.cost > 0 and not h.refund and not h.advisory then
    denied = true
  end
  hits[i] = h
  out[#out + 1] = o.allowed and 1 or 0
  out[#out + 1] = o.remaining
  out[#out + 1] = o.reset
  out[#out + 1] = o.retry
  out[#out + 1] = o.never and 1 or 0
end

if denied then
  -- Nothing is consumed: the allowed hits report the stored state, as a
  -- hit of cost 0 sees it (step leaves the loaded state as it was).
  for i = 1, #KEYS do
    local p = 5 * (i - 1)
    if out[p + 1] == 1 then
      local w = work[KEYS[i]]
      local _, o = step(w.algo, w.st0, w.ok0, hits[i], 0, false)
      out[p + 2], out[p + 3], out[p + 4], out[p + 5] = o.remaining, o.reset, 0, 0
    end
  end
else
  for _, key in ipairs(order) do
    local w = work[key]
    if w.dirty then
      w.algo.store(key, w.st, w.h, now, w.ttl)
    end
  end
end
return out
