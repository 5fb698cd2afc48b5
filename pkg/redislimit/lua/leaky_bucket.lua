-- leaky_bucket: a meter that drains L per W continuously; a hit adds cost
-- and passes while the level stays <= the burst B (the RLS API can only
-- allow or deny, so nothing queues).
--
-- Per hit: KEYS: the counter's key, the string "<level, 17 digits>:<as of,
-- µs>" (before: a hash {v = level, t = as of}, still read; see load_pair).
-- ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs,
-- capacity B.
--
-- Semantics (limit.stepLeakyBucket): r = L/W per µs; level, ts = stored, or
-- 0 and now; l0 = 0 if now - ts >= ceil(level/r) (see settle), else
-- max(0, level - (now - ts)*r). Allowed iff l0 + cost <= B;
-- a consuming hit writes (l0 + cost, now). With la the level after the hit
-- (max(0, l0 - cost) for a refund): Remaining = max(0, floor(B - la)),
-- reset = ceil(la/r), TTL the same; retry (denied) = the smallest d >= 1 at
-- which l0 computed for now + d gives l0 + cost <= B, found from
-- ceil(((l0 + cost) - B)/r) by asking that predicate (first_pass).
-- A refund writes only a stored state that changes.
--
-- A charge (force: a usage hit) that does not fit adds its cost past B, up
-- to min(l0 + cost, max(l0, B + MAX_DEBT*r)), and writes, denied, with the
-- retry of the same hit on the state after it.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers, and
-- K, the constants (MAX_DEBT). Returns {load, step, store}.

local outcome, settle, first_pass, load_bucket, store_bucket =
  C.outcome, C.settle, C.first_pass, C.load_bucket, C.store_bucket
local MAX_DEBT = K.MAX_DEBT

-- level_at returns the level at instant at of a bucket draining at r that
-- held value at ts (limit.levelAt).
local function level_at(value, ts, at, r)
  if at - ts < settle(value, r) then
    return math.max(0, value - (at - ts) * r)
  end
  return 0
end

local function step(st, ok, h, now, cost, refund, force)
  local r = h.limit / h.window
  local b = h.cap
  local value, ts = st.value, st.ts
  if not ok then
    value, ts = 0, now
  end
  local l0 = level_at(value, ts, now, r)
  local la = l0
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    la = math.max(0, l0 - cost)
    o.write = ok and (la ~= value or now ~= ts)
  elseif l0 + cost <= b or force then
    o.allowed = l0 + cost <= b
    if cost > 0 then
      la = math.min(l0 + cost, math.max(l0, b + MAX_DEBT * r))
      o.write = true
    end
    if not o.allowed and cost <= b then
      o.retry = first_pass(math.ceil((la + cost - b) / r), function(d) return level_at(la, now, now + d, r) + cost <= b end)
    end
  else
    o.retry = first_pass(math.ceil((l0 + cost - b) / r), function(d) return level_at(value, ts, now + d, r) + cost <= b end)
  end
  o.remaining, o.debt = math.max(0, math.floor(b - la)), math.max(0, math.ceil(la - b))
  o.reset = settle(la, r)
  o.ttl = o.reset
  return {value = la, ts = now}, o
end

return {load = load_bucket, step = step, store = store_bucket}
