-- evaluate: decides a batch of independent requests, one after the other,
-- atomically, on the clock of this Redis node. Each request is decided
-- all-or-nothing on its own, exactly as if it were the only one in the call;
-- the batch only shares the round trip and the reading of TIME.
--
-- keys (KEYS): the keys of the hits of every request, request after request, hit
--   after hit (a key may repeat: hits on one counter).
-- args (ARGV): the requests in the same order, each a header of ARGS_PER_REQUEST
--   (2) arguments followed by its hits:
--   now: "" in production, the time is then Redis TIME (seconds and
--     microseconds, read once per call); tests pass an explicit now in µs
--     to reach exact boundaries.
--   n: the number of hits (>= 1); the request's keys are the next n keys.
-- Each hit is a group of ARGS_PER_HIT (3) arguments, ARGS_PER_CALENDAR (4)
-- more for a calendar window:
--   1 spec: "code:L:W:B:N", parsed once and kept while the library is
--     loaded, however many hits share it: the algorithm code (limit.Algorithm: 0 fixed_window,
--     1 sliding_window, 2 sliding_log, 3 token_bucket, 4 leaky_bucket,
--     5 gcra), limit L, window W in µs, capacity B (limit.Spec.Capacity),
--     precision N (sub-windows, >= 1); the codes are the ALG_ constants
--   2 cost (>= 0)
--   3 flags: the sum of FLAG_REFUND (1), FLAG_ADVISORY (2), FLAG_CALENDAR
--     (4), FLAG_USAGE (8) as they apply, plus FLAG_QUOTA_BASE (16) *
--     (quota + 1) for a hit of a quota (limit.Quota; quota is its
--     limit.Hit.Group)
--   4..7 only with FLAG_CALENDAR: calendar window boundaries in µs for a
--     calendar fixed window (four ascending instants around the server's
--     clock).
-- Returns an array with one element per request: an array of
--   FIELDS_PER_DECISION (6) integers per hit, at offsets FIELD_ALLOWED
--   (0/1), FIELD_REMAINING, FIELD_RESET (µs), FIELD_RETRY (µs),
--   FIELD_NEVER (0/1) and FIELD_DEBT, 0 to 5 in this order, then one more: 1 when the
--   request is blocked (it wrote nothing), else 0; or an error reply, when the request could not be decided
--   (its clocks disagree with a calendar's, a key holds something else, ...):
--   such a request writes nothing, and the other requests are decided as
--   if it were not there. Malformed arguments fail the whole call.
--
-- Semantics of a request (limit.step and limit.Memory.Evaluate): hits are
-- applied in order to a working copy of each key's state, so a later hit on
-- a key sees an earlier one's consumption. Before the algorithm: Limit 0
-- denies a hit of cost > 0 (never, all else 0) and allows a peek or refund
-- (all 0), without reading state; a cost above the capacity (not a refund)
-- is denied with never set and retry 0, remaining and reset being those of
-- a peek. The request is blocked (limit.Blocked) when a hit of cost > 0,
-- neither a refund, advisory nor a quota's, is denied, or when it has
-- quota hits and every quota has a denied hit. A usage hit (FLAG_USAGE,
-- limit.Hit.Usage) of cost > 0 is applied whatever its decision and the
-- request's: a charge that does not fit is consumed all the same, past the
-- limit (each algorithm's step, force), denied, never when its cost is
-- above the capacity. A blocked request writes nothing but its usage hits,
-- applied alone, in order, each with its own decision, and each other
-- allowed hit's decision is that of a hit of cost 0 against the state
-- they leave, allowed; otherwise each changed key is written once and set
-- to expire at the instant its state becomes equivalent to none (now +
-- the TTL of its last write, in ms rounded up; see expire_at).
-- Every hit gets its decision either way. A later request of the batch
-- sees what an earlier one wrote.
--
-- Receives (see scriptSource in script.go): the generated constants
-- (ARGS_PER_REQUEST, ARGS_PER_HIT, FLAG_REFUND, ... as locals, numbers given
-- above only to read this header), C (common.lua's helpers) and loaders
-- (each algorithm's loader, by code, to call with C and K). Defines
-- evaluate(keys, args), which the assembly calls: with KEYS and ARGV in the
-- script sent by EVALSHA, or registers as the function of a Redis Functions
-- library (FCALL). In a library, what this file defines outside evaluate is
-- made once, when the library is loaded, and lives as long as it: the
-- algorithms' functions and the parsed specs are then shared by every call,
-- so nothing outside evaluate may carry one call's state into the next:
-- the fast path's arrays and read_first here, and fixed_window.lua's
-- arrays of the hits it applies in place, which do hold it, are set again
-- by each call before they are read.
--
-- Redis 6.2 and 7: TIME before writes needs effects replication, the
-- default since Redis 5 and the only mode of 7, so the script does not call
-- redis.replicate_commands(). Keys are only those in keys (Cluster).

local outcome = C.outcome

-- step mirrors limit.step: it returns the working state after the hit
-- and the hit's outcome. The caller keeps the state only when the hit
-- writes (the sliding algorithms' states may also drop what no longer
-- counts, which changes nothing).
local function step(algo, st, ok, h, cost, refund, now, usage)
  if h.limit == 0 then
    local o = outcome(cost == 0 or refund, 0, 0, 0, false, 0)
    o.never = cost > 0 and not refund
    return st, o
  end
  local force = usage and not refund and cost > 0
  if cost > h.cap and not refund and not force then
    local nst, o = step(algo, st, ok, h, 0, false, now, false)
    o.allowed, o.never, o.retry = false, true, 0
    return nst, o
  end
  local nst, o = algo.step(st, ok, h, now, cost, refund, force)
  if force and not o.allowed and cost > h.cap then
    o.never, o.retry = true, 0
  end
  return nst, o
end

-- algorithm returns the functions of the algorithm with the given code,
-- creating them on first use.
local algorithms = {}
local function algorithm(code)
  local a = algorithms[code]
  if a == nil and loaders[code] ~= nil then
    a = loaders[code](C, K)
    algorithms[code] = a
  end
  return a
end

-- put writes a decision from outcome o to out[p ..], its fields at their
-- FIELD_ offsets.
local function put(out, p, o)
  out[p + FIELD_ALLOWED] = o.allowed and 1 or 0
  out[p + FIELD_REMAINING] = o.remaining
  out[p + FIELD_RESET] = o.reset
  out[p + FIELD_RETRY] = o.retry
  out[p + FIELD_NEVER] = o.never and 1 or 0
  out[p + FIELD_DEBT] = o.debt
end

-- single returns the reply of a request of one hit, decided by outcome o,
-- blocked or not, as a new array. A table constructor makes it at its
-- size at once, where stores into an empty table would have Lua grow it
-- step by step; it lists the fields in the order of their FIELD_ offsets,
-- which the check below holds to.
if not (FIELD_ALLOWED == 0 and FIELD_REMAINING == FIELD_ALLOWED + 1 and FIELD_RESET == FIELD_REMAINING + 1 and
    FIELD_RETRY == FIELD_RESET + 1 and FIELD_NEVER == FIELD_RETRY + 1 and FIELD_DEBT == FIELD_NEVER + 1 and
    FIELDS_PER_DECISION == FIELD_DEBT + 1) then
  error('floodgate: evaluate.lua: single() lists the fields in another order than FIELD_')
end
local function single(o, blocked)
  return {o.allowed and 1 or 0, o.remaining, o.reset, o.retry, o.never and 1 or 0, o.debt, blocked and 1 or 0}
end

-- parse_spec returns the spec table of a spec argument, parsing each
-- distinct one once. In a library the tables outlive the call (specs are
-- few: one per limit of the rules); past max_parsed, as after many
-- reloads, the cache starts over so that it stays bounded.
local parsed, nparsed, max_parsed = {}, 0, 1000
local function parse_spec(arg)
  local h = parsed[arg]
  if h == nil then
    local code, limit, window, cap, precision = string.match(arg, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if not code or tonumber(window) < 1 or tonumber(precision) < 1 then
      return nil
    end
    h = {code = tonumber(code), limit = tonumber(limit), window = tonumber(window),
         cap = tonumber(cap), precision = tonumber(precision)}
    if nparsed >= max_parsed then
      parsed, nparsed = {}, 0
    end
    parsed[arg], nparsed = h, nparsed + 1
  end
  return h
end

-- has reports whether flags (a sum of distinct powers of two) holds flag.
local function has(flags, flag)
  return math.floor(flags / flag) % 2 == 1
end

-- hit reads the hit whose arguments start at args[a]: its spec, cost and
-- flags (a number, 0 for none), each nil if malformed, and where the next
-- hit's arguments start. The hits are read where they lie, not copied into
-- tables first (but for the spec and cost the fast path notes): arrays
-- grown hit by hit cost more than reading an argument again.
local function hit(args, a)
  local h, cost, flags = parse_spec(args[a]), tonumber(args[a + 1]), args[a + 2]
  if flags == '0' then
    return h, cost, 0, a + ARGS_PER_HIT
  end
  flags = tonumber(flags)
  if flags and has(flags, FLAG_CALENDAR) then
    return h, cost, flags, a + ARGS_PER_HIT + ARGS_PER_CALENDAR
  end
  return h, cost, flags, a + ARGS_PER_HIT
end

-- calendar returns the spec of a calendar hit, whose boundaries follow its
-- arguments at args[a]: a copy of h with them in cal.
local function calendar(h, args, a)
  local cal = {}
  for j = 1, ARGS_PER_CALENDAR do
    cal[j] = tonumber(args[a + ARGS_PER_HIT + j - 1])
  end
  return {code = h.code, limit = h.limit, window = h.window, cap = h.cap, precision = h.precision, cal = cal}
end

-- read returns the hit at args[a] as the general path uses it: its spec
-- (a calendar hit's own copy), cost, refund, advisory, the quota
-- (limit.Hit.Group + 1) of a quota hit, 0 for the others, where the next
-- hit starts, and usage.
local function read(args, a)
  local h, cost, flags, nxt = hit(args, a)
  if flags == 0 then
    return h, cost, false, false, 0, nxt, false
  end
  if has(flags, FLAG_CALENDAR) then
    h = calendar(h, args, a)
  end
  return h, cost, has(flags, FLAG_REFUND), has(flags, FLAG_ADVISORY), math.floor(flags / FLAG_QUOTA_BASE), nxt,
    has(flags, FLAG_USAGE)
end

-- The fast path of plain fixed windows: a request whose hits are all fixed
-- windows without a calendar, with a limit above 0 (and at most
-- LIMIT_MAX), a cost within the capacity, no flag (consuming, not a
-- refund, advisory nor a quota's) or every one of them FLAG_USAGE alone
-- (charges, which stay applied when they do not fit), on distinct keys, at
-- most FIXED_MAX of them. fixed_window.lua applies and decides each hit in
-- place, by the rule its step decides by (hit, take_back, ready, commit,
-- look); what is here is the request's part, as decide_one,
-- decide_several and conclude are the general path's: a denied hit blocks
-- the request, which then takes its hits back (but charges) and has its
-- other allowed hits report a look. Both paths read, write and reply
-- alike (the golden vectors and the differential tests hold them to
-- package limit, TestFixedFastPath to each other's keys).
--
-- Its hits are read once, by evaluate's check of the call, which notes
-- the spec and cost of each hit the fast path takes (fast_h, fast_cost),
-- and a request of one hit, the most common, is decided by fixed_one,
-- without the reply of a request of several.
local FIXED_MAX = 16
local LIMIT_MAX = C.LIMIT_MAX

-- fixed_window.lua's functions that apply a hit in place, set by
-- load_fixed when the check of a call first finds a hit the fast path
-- takes, so that they are made only when needed, as the general path's.
local fixed_hit, fixed_take_back, fixed_ready, fixed_commit, fixed_look
local function load_fixed()
  local a = algorithm(ALG_FIXED_WINDOW)
  fixed_hit, fixed_take_back, fixed_ready, fixed_commit, fixed_look = a.hit, a.take_back, a.ready, a.commit, a.look
end

-- read_first is set, for the rest of a call, once a request of the fast
-- path is blocked: each request then reads its counters (GET) before it
-- writes, which costs a request that passes a second command per hit but
-- one that is blocked, as most requests that follow a blocked one are
-- over the limit, one per hit instead of two (an INCRBY and its undoing).
-- evaluate clears it at the start of every call; it changes which commands
-- decide a request, never the decision nor what is written.
local read_first = false

-- fixed_takes reports whether the fast path takes a hit of spec h, cost
-- and flags (a number, as hit returns them), the distinct keys aside.
local function fixed_takes(h, cost, flags)
  local limit = h.limit
  return (flags == 0 or flags == FLAG_USAGE) and h.code == ALG_FIXED_WINDOW and limit > 0 and limit <= LIMIT_MAX and
    cost <= h.cap
end

-- fast_h[k] is the spec of the call's hit on keys[k] when fixed_takes it,
-- else false, fast_cost[k] its cost, fast_usage[k] whether it is a usage
-- hit: evaluate fills them for every hit of a call before any is decided,
-- so nothing of one call reaches the next. They keep as many entries as
-- the largest call had hits (a few hundred: the client bounds a batch's
-- arguments and a request's descriptors).
local fast_h, fast_cost, fast_usage = {}, {}, {}

-- fixed_one returns the reply of a request of one hit on key that
-- fixed_takes, having applied it, or nil, having written nothing. The
-- table lists the fields in the order of their FIELD_ offsets, as single's.
local function fixed_one(key, h, cost, now, usage)
  local charge = usage and cost > 0
  local allowed, remaining, reset, retry, debt, pending =
    fixed_hit(1, key, h, cost, now, charge or (cost > 0 and not read_first), charge)
  if allowed == nil then
    fixed_take_back(1, key, cost)
    return nil
  end
  -- A denied look (cost 0, over a limit lowered by a reload) blocks
  -- nothing; a denied charge blocks, and stays.
  local blocked = not allowed and cost > 0
  if blocked and not charge then
    fixed_take_back(1, key, cost)
  elseif pending then
    if not fixed_ready(1) then
      return nil
    end
    local refused = fixed_commit(1, key, cost, now)
    if refused then
      fixed_take_back(1, key, cost)
      error(refused)
    end
  end
  read_first = read_first or blocked
  return {allowed and 1 or 0, remaining, reset, retry, 0, debt, blocked and 1 or 0}
end

-- reply_of[n] returns a new reply of n hits (1 to 3), sized at once by a
-- constructor where Lua would grow an empty table four times (see single);
-- the check below holds each to its size.
local reply_of = {
  function() return {0, 0, 0, 0, 0, 0, 0} end,
  function() return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end,
  function() return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} end,
}
for n = 1, #reply_of do
  if #reply_of[n]() ~= FIELDS_PER_DECISION * n + 1 then
    error('floodgate: evaluate.lua: reply_of sizes a reply of ' .. n .. ' hits wrong')
  end
end

-- fixed_fits reports whether the fast path takes the request of n hits on
-- keys[k0 + 1 ..]: every hit one fixed_takes (fast_h), all usage hits or
-- none, on distinct keys, at most FIXED_MAX of them. It runs no command.
local function fixed_fits(keys, k0, n)
  if n > FIXED_MAX then
    return false
  end
  for k = k0 + 1, k0 + n do
    if not fast_h[k] or fast_usage[k] ~= fast_usage[k0 + 1] then
      return false
    end
    local key = keys[k]
    for j = k0 + 1, k - 1 do
      if keys[j] == key then
        return false
      end
    end
  end
  return true
end

-- fixed_undo takes back hits 1 .. m of the request on keys[k0 + 1 ..],
-- leaving their keys as they were before it.
local function fixed_undo(keys, k0, m)
  for i = 1, m do
    fixed_take_back(i, keys[k0 + i], fast_cost[k0 + i])
  end
end

-- fixed_settle makes the pending writes of a request of n hits that
-- passed, or charged. It returns false, having taken the request back,
-- when a commit cannot be made (fixed_window.lua's ready): the general
-- path decides it then. A commit Redis refuses raises its error, the
-- request's, once every hit is taken back with the commits before it
-- that added to a counter. A user refused SET on every key has made no
-- other commit; for one allowed it on some keys only (an ACL selector),
-- which leaves partial writes on the general path too, a counter that
-- replaced an earlier window's is taken back to this window's count 0,
-- which is what the earlier one read as.
local function fixed_settle(keys, k0, n, now)
  for i = 1, n do
    if not fixed_ready(i) then
      fixed_undo(keys, k0, n)
      return false
    end
  end
  for i = 1, n do
    local refused = fixed_commit(i, keys[k0 + i], fast_cost[k0 + i], now)
    if refused then
      fixed_undo(keys, k0, n)
      error(refused)
    end
  end
  return true
end

-- fixed returns the reply of a request of several plain fixed windows,
-- having applied it, or nil, having written nothing, when the general path
-- must decide it: the request is not one fixed_fits takes, a key holds
-- something else, or a commit cannot be made. One pass applies the hits
-- and writes each one's reply as if the request passes; a hit that blocks
-- it takes the earlier ones back and has them report a look, and the hits
-- after it are only read, each allowed one reporting a look. Charges are
-- applied whatever the others decide.
local function fixed(keys, now, k0, n)
  if not fixed_fits(keys, k0, n) then
    return nil
  end
  local usage = fast_usage[k0 + 1]
  local sized = reply_of[n]
  local out = sized and sized() or {}
  local blocked, settle = false, false
  for i = 1, n do
    local k = k0 + i
    local h, cost = fast_h[k], fast_cost[k]
    local charge = usage and cost > 0
    local allowed, remaining, reset, retry, debt, pending =
      fixed_hit(i, keys[k], h, cost, now, charge or (cost > 0 and not blocked and not read_first), charge)
    if allowed == nil then
      fixed_undo(keys, k0, i)
      return nil
    end
    if not allowed and cost > 0 then
      -- The first denial blocks the request: its hits so far are taken
      -- back, and those allowed report a look. A charge stays.
      if not (blocked or usage) then
        fixed_undo(keys, k0, i)
        for j = 1, i - 1 do
          local q = FIELDS_PER_DECISION * (j - 1) + 1
          if out[q + FIELD_ALLOWED] == 1 then
            out[q + FIELD_REMAINING], out[q + FIELD_DEBT] = fixed_look(j, fast_h[k0 + j].limit)
          end
        end
      end
      blocked = true
    elseif allowed and blocked and not usage then
      remaining, debt = fixed_look(i, h.limit)
    end
    settle = settle or pending
    local p = FIELDS_PER_DECISION * (i - 1) + 1
    out[p + FIELD_ALLOWED], out[p + FIELD_REMAINING], out[p + FIELD_RESET] = allowed and 1 or 0, remaining, reset
    out[p + FIELD_RETRY], out[p + FIELD_NEVER], out[p + FIELD_DEBT] = retry, 0, debt
  end
  if settle and (usage or not blocked) and not fixed_settle(keys, k0, n, now) then
    return nil
  end
  out[FIELDS_PER_DECISION * n + 1] = blocked and 1 or 0
  read_first = read_first or blocked
  return out
end

-- decide_one decides a request of one hit on key, its arguments from
-- args[a], on the general path: without working copies, as its only hit
-- writes if it consumes, and when it is denied there is no other hit to
-- report as a peek.
local function decide_one(key, args, now, a)
  local h, cost, refund, advisory, q, _, usage = read(args, a)
  local algo = algorithm(h.code)
  if not algo then
    return error('floodgate: unknown algorithm code ' .. tostring(h.code))
  end
  local st, ok
  if h.limit ~= 0 then
    st, ok = algo.load(key, h, now)
  end
  local nst, o = step(algo, st, ok, h, cost, refund, now, usage)
  if o.write then
    algo.store(key, nst, h, now, o.ttl)
  end
  -- Blocked as decide_several's: a lone quota that is over is every quota.
  return single(o, not o.allowed and (q > 0 or (cost > 0 and not refund and not advisory)))
end

-- PER_CHARGE is the number of fields of a charge in decide_several's list
-- of them: the hit's index, cost and refund.
local PER_CHARGE = 3

-- charge applies the usage hits of a denied request, charges (PER_CHARGE
-- fields each), alone and in order, to the loaded states of their keys,
-- writing their decisions to out, and returns the states they leave by key
-- (st, ok, and for a written one h and ttl).
local function charge(keys, k0, now, out, work, specs, charges)
  local after = {}
  for c = 1, #charges, PER_CHARGE do
    local i, cost, refund = charges[c], charges[c + 1], charges[c + 2]
    local key = keys[k0 + i]
    local w, a = work[key], after[key]
    if a == nil then
      a = {st = w.st0, ok = w.ok0}
      after[key] = a
    end
    local st, o = step(w.algo, a.st, a.ok, specs[i], cost, refund, now, true)
    if o.write then
      a.st, a.ok, a.h, a.ttl = st, o.ttl > 0, specs[i], o.ttl
    end
    put(out, FIELDS_PER_DECISION * (i - 1) + 1, o)
  end
  return after
end

-- conclude completes the reply out of a request of several hits on
-- keys[k0 + 1 .. k0 + n] that decide_several stepped through: a denied
-- request consumes nothing but its usage hits (charges, see charge), and
-- its other allowed hits report the state as a hit of cost 0 sees it, as
-- stored or as the usage hits leave it (step leaves the loaded state as it
-- was); otherwise each changed key (work, in order) is written once.
local function conclude(keys, k0, n, now, out, work, order, specs, denied, charges)
  if denied then
    local after, charged
    if charges then
      after, charged = charge(keys, k0, now, out, work, specs, charges), {}
      for c = 1, #charges, PER_CHARGE do
        charged[charges[c]] = true
      end
    end
    for i = 1, n do
      local p = FIELDS_PER_DECISION * (i - 1) + 1
      if out[p + FIELD_ALLOWED] == 1 and not (charged and charged[i]) then
        local key = keys[k0 + i]
        local w, a = work[key], after and after[key]
        local st, ok = w.st0, w.ok0
        if a then
          st, ok = a.st, a.ok
        end
        local _, o = step(w.algo, st, ok, specs[i], 0, false, now, false)
        out[p + FIELD_REMAINING], out[p + FIELD_RESET] = o.remaining, o.reset
        out[p + FIELD_RETRY], out[p + FIELD_NEVER], out[p + FIELD_DEBT] = 0, 0, o.debt
      end
    end
    if after then
      for _, key in ipairs(order) do
        local a = after[key]
        if a and a.h then
          work[key].algo.store(key, a.st, a.h, now, a.ttl)
        end
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
  out[FIELDS_PER_DECISION * n + 1] = denied and 1 or 0
  return out
end

-- decide_several decides a request of several hits on keys[k0 + 1 ..
-- k0 + n], their arguments from args[a], on the general path: each hit
-- steps a working copy of its key's state, so a later hit on a key sees an
-- earlier one's consumption.
local function decide_several(keys, args, now, k0, n, a)
  local specs = {}
  local work, order, out = {}, {}, {}
  local denied = false
  -- over[q] tells, for each quota q of the request, whether a hit of it
  -- is denied. charges lists the usage hits, made only when there is one.
  local over, anyquota, charges = {}, false, nil
  for i = 1, n do
    local key = keys[k0 + i]
    local h, cost, refund, advisory, q, usage
    h, cost, refund, advisory, q, a, usage = read(args, a)
    if usage and cost > 0 then
      charges = charges or {}
      local c = #charges
      charges[c + 1], charges[c + 2], charges[c + 3] = i, cost, refund
    end
    specs[i] = h
    local algo = algorithm(h.code)
    if not algo then
      return error('floodgate: unknown algorithm code ' .. tostring(h.code))
    end
    local w = work[key]
    if w == nil then
      w = {algo = algo, code = h.code}
      work[key] = w
      order[#order + 1] = key
    elseif w.code ~= h.code then
      return error('floodgate: key ' .. key .. ' used by two algorithms in one call')
    end
    if w.st == nil and h.limit ~= 0 then
      w.st, w.ok = algo.load(key, h, now)
      w.st0, w.ok0 = w.st, w.ok
    end
    local st, o = step(algo, w.st, w.ok, h, cost, refund, now, usage)
    if o.write then
      -- A state written with no lifetime left is equivalent to none: later
      -- hits of the call see none, and the key is deleted.
      w.st, w.ok, w.h, w.ttl, w.dirty = st, o.ttl > 0, h, o.ttl, true
    end
    if q > 0 then
      anyquota = true
      over[q] = over[q] or not o.allowed
    elseif not o.allowed and cost > 0 and not refund and not advisory then
      denied = true
    end
    put(out, FIELDS_PER_DECISION * (i - 1) + 1, o)
  end
  if not denied and anyquota then
    -- Blocked too when every quota is over.
    denied = true
    for _, o in pairs(over) do
      denied = denied and o
    end
  end
  return conclude(keys, k0, n, now, out, work, order, specs, denied, charges)
end

-- decide evaluates one request: hits on keys[k0 + 1 .. k0 + n], their
-- arguments from args[a], checked by evaluate; on the fast path when it
-- takes the request, else on the general path. It raises an error before
-- writing anything if the request cannot be decided.
local function decide(keys, args, now, k0, n, a)
  if n == 1 then
    local h = fast_h[k0 + 1]
    return h and fixed_one(keys[k0 + 1], h, fast_cost[k0 + 1], now, fast_usage[k0 + 1]) or
      decide_one(keys[k0 + 1], args, now, a)
  end
  return fixed(keys, now, k0, n) or decide_several(keys, args, now, k0, n, a)
end

-- decide_from decides requests r0 .. nreq of a call into results, in order;
-- offs holds each request's first argument and first key (at 2r - 1 and
-- 2r), hits its number of hits and nows its now. It stops at the first
-- error, which its pcall catches.
local function decide_from(keys, args, offs, hits, nows, results, r0, nreq)
  for r = r0, nreq do
    results[r] = decide(keys, args, nows[r], offs[2 * r], hits[r], offs[2 * r - 1] + ARGS_PER_REQUEST)
  end
end

-- check reads the call's requests before any is decided, and notes the
-- hits the fast path takes (fast_h, fast_cost, fast_usage). It returns
-- each request's first argument and first key (offs, at 2r - 1 and 2r),
-- its number of hits (hits) and its now (nows), and the number of
-- requests; or an error reply naming the first malformed argument.
local function check(keys, args)
  local offs, hits, nows = {}, {}, {}
  -- Redis TIME in µs, read once per call, when a request needs it.
  -- Effects replication (the default since Redis 5, the only mode in 7)
  -- makes reading TIME before writing safe.
  local clock
  local nargs, nkeys = #args, #keys
  local a, k, r = 1, 0, 0
  while a <= nargs do
    r = r + 1
    local now = args[a]
    local n = tonumber(args[a + 1])
    if not n or n < 1 or n % 1 ~= 0 or k + n > nkeys then
      return redis.error_reply('floodgate: request ' .. r .. ' at argument ' .. a ..
        ': bad hit count ' .. tostring(args[a + 1]) .. ' for ' .. (nkeys - k) .. ' keys left')
    end
    if now == '' then
      if not clock then
        local t = redis.call('TIME')
        clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      now = clock
    else
      now = tonumber(now)
      if not now then
        return redis.error_reply('floodgate: request ' .. r .. ' at argument ' .. a .. ': bad now ' .. tostring(args[a]))
      end
    end
    offs[2 * r - 1], offs[2 * r], hits[r], nows[r] = a, k, n, now
    a = a + ARGS_PER_REQUEST
    for i = 1, n do
      local h, cost, flags, nxt = hit(args, a)
      local bad
      if not h then
        bad = 'spec ' .. tostring(args[a])
      elseif not cost or cost < 0 or cost % 1 ~= 0 then
        bad = 'cost ' .. tostring(args[a + 1])
      elseif not flags then
        bad = 'flags ' .. tostring(args[a + 2])
      end
      if bad then
        return redis.error_reply('floodgate: request ' .. r .. ': bad ' .. bad)
      end
      -- The hits the fast path takes are noted for it.
      local takes = fixed_takes(h, cost, flags)
      if takes and not fixed_hit then
        load_fixed()
      end
      fast_h[k + i], fast_cost[k + i], fast_usage[k + i] = takes and h, cost, flags == FLAG_USAGE
      a = nxt
    end
    k = k + n
  end
  if a ~= nargs + 1 or k ~= nkeys then
    return redis.error_reply('floodgate: ' .. nargs .. ' arguments and ' .. nkeys .. ' keys for ' ..
      r .. ' requests of ' .. k .. ' hits')
  end
  return offs, hits, nows, r
end

-- evaluate decides the call: it checks every request's arguments, then
-- decides the requests in order.
local function evaluate(keys, args)
  read_first = false
  local offs, hits, nows, r = check(keys, args)
  if not hits then
    return offs
  end

  -- Decide the requests in order, under pcall so that a request's error is
  -- its own; one pcall covers the requests up to the first error, and the
  -- next one resumes after it.
  local results, done = {}, 0
  while done < r do
    local ok, err = pcall(decide_from, keys, args, offs, hits, nows, results, done + 1, r)
    done = #results
    if not ok then
      -- A Redis error (a table on 6.2, a string on 7) keeps its code, such
      -- as WRONGTYPE; the script's own get ERR.
      if type(err) == 'table' then
        err = err.err
      end
      err = tostring(err)
      if not string.find(err, '^%u[%u%d]* ') then
        err = 'ERR ' .. err
      end
      done = done + 1
      results[done] = {err = err}
    end
  end
  return results
end
