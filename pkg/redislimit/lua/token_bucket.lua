-- token_bucket: refills L tokens per W continuously, up to the burst B, and
-- starts full; a hit takes cost tokens.
--
-- Per hit: KEYS: the counter's key, the string "<tokens, 17 digits>:<as of,
-- µs>" (before: a hash {v = tokens, t = as of}, still read; see load_pair).
-- ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs,
-- capacity B.
--
-- Semantics (limit.stepTokenBucket): r = L/W tokens per µs; tokens, ts =
-- stored, or B and now; t0 = B if now - ts >= ceil((B - tokens)/r) (see
-- settle), else min(B, tokens + (now - ts)*r). Allowed iff
-- t0 >= cost; a consuming hit writes (t0 - cost, now). With ta the tokens
-- after the hit (min(B, t0 + cost) for a refund): Remaining =
-- max(0, floor(ta)), reset = ceil((B - ta)/r), TTL the same; retry (denied)
-- = the smallest d >= 1 at which t0 computed for now + d is >= cost, found
-- from ceil((cost - t0)/r) by asking that predicate (first_pass). A refund
-- writes only a stored state that changes.
--
-- A charge (force: a usage hit) that does not fit takes its tokens into
-- debt, down to max(t0 - cost, min(t0, -MAX_DEBT*r)), and writes, denied,
-- with the retry of the same hit on the state after it.
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers, and
-- K, the constants (MAX_DEBT). Returns {load, step, store}.

local outcome, settle, first_pass, load_bucket, store_bucket =
  C.outcome, C.settle, C.first_pass, C.load_bucket, C.store_bucket
local MAX_DEBT = K.MAX_DEBT

-- tokens_at returns the tokens at instant at of a bucket of capacity b
-- refilling at r that held value at ts (limit.tokensAt).
local function tokens_at(value, ts, at, b, r)
  if at - ts < settle(b - value, r) then
    return math.min(b, value + (at - ts) * r)
  end
  return b
end

local function step(st, ok, h, now, cost, refund, force)
  local r = h.limit / h.window
  local b = h.cap
  local value, ts = st.value, st.ts
  if not ok then
    value, ts = b, now
  end
  local t0 = tokens_at(value, ts, now, b, r)
  local ta = t0
  local o = outcome(false, 0, 0, 0, false, 0)
  if refund then
    o.allowed = true
    ta = math.min(b, t0 + cost)
    o.write = ok and (ta ~= value or now ~= ts)
  elseif t0 >= cost or force then
    o.allowed = t0 >= cost
    if cost > 0 then
      ta = math.max(t0 - cost, math.min(t0, -(MAX_DEBT * r)))
      o.write = true
    end
    if not o.allowed and cost <= b then
      o.retry = first_pass(math.ceil((cost - ta) / r), function(d) return tokens_at(ta, now, now + d, b, r) >= cost end)
    end
  else
    o.retry = first_pass(math.ceil((cost - t0) / r), function(d) return tokens_at(value, ts, now + d, b, r) >= cost end)
  end
  o.remaining, o.debt = math.max(0, math.floor(ta)), math.max(0, math.ceil(-ta))
  o.reset = settle(b - ta, r)
  o.ttl = o.reset
  return {value = ta, ts = now}, o
end

return {load = load_bucket, step = step, store = store_bucket}
