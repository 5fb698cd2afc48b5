-- evaluate: decides a call of independent requests, one after the other,
-- atomically, on the clock of this Redis node. Each request is decided
-- all-or-nothing on its own, exactly as if it were alone in the call, and
-- sees what an earlier one wrote; the call shares only the round trip and
-- the reading of TIME.
--
-- keys (KEYS): the keys of every request's hits, in order (a key may
--   repeat: hits on one counter).
-- args (ARGV): the requests in the same order, each a header of
--   ARGS_PER_REQUEST arguments, now ("" in production: Redis TIME, read
--   once per call; tests pass µs) and n, its number of hits (>= 1); then
--   ARGS_PER_HIT arguments per hit, plus ARGS_PER_CALENDAR with
--   FLAG_CALENDAR:
--   spec "code:L:W:B:N": the algorithm code (an ALG_ constant), limit,
--     window (µs), capacity (limit.Spec.Capacity), precision (>= 1),
--     parsed once however many hits share it;
--   cost (>= 0);
--   flags: the sum of the FLAG_ constants that apply, plus
--     FLAG_QUOTA_BASE * (quota + 1) for a quota hit (limit.Hit.Group);
--   with FLAG_CALENDAR, four ascending window boundaries (µs) around the
--     server's clock.
-- Returns one element per request: FIELDS_PER_DECISION integers per hit
--   (at the FIELD_ offsets), then 1 when the request is blocked, else 0;
--   or an error reply when it could not be decided (a key of another
--   type, clocks disagreeing with a calendar): it then writes nothing, and
--   the other requests are decided as if it were not there. Malformed
--   arguments fail the whole call.
--
-- A request is decided as limit.Memory.Evaluate decides it: hits step a
-- working copy of their key's state in order (step, limit.step); a blocked
-- request (limit.Blocked) writes nothing but its usage hits, otherwise
-- each changed key is written once, to expire when its state becomes
-- equivalent to none (see expire_at).
--
-- Receives the generated constants, C (common.lua) and loaders (see
-- definitions in script.go); defines evaluate(keys, args). What is
-- defined outside evaluate lives as long as the library, so each call
-- sets the arrays below before it reads them.

local outcome = C.outcome

-- step mirrors limit.step: it returns the working state after the hit and
-- the hit's outcome; the caller keeps the state only when the hit writes.
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

-- algorithm returns the functions of an algorithm, made on first use; an
-- unknown code is an error.
local algorithms = {}
local function algorithm(code)
  local a = algorithms[code]
  if a == nil then
    if loaders[code] == nil then
      return error('floodgate: unknown algorithm code ' .. tostring(code))
    end
    a = loaders[code](C, K)
    algorithms[code] = a
  end
  return a
end

-- put writes the decision of outcome o to out[p ..].
local function put(out, p, o)
  out[p + FIELD_ALLOWED] = o.allowed and 1 or 0
  out[p + FIELD_REMAINING] = o.remaining
  out[p + FIELD_RESET] = o.reset
  out[p + FIELD_RETRY] = o.retry
  out[p + FIELD_NEVER] = o.never and 1 or 0
  out[p + FIELD_DEBT] = o.debt
end

-- single returns the reply of a request of one hit. A constructor makes
-- it at its size at once; it lists the fields in the order of their
-- FIELD_ offsets, which the check below holds to.
if not (FIELD_ALLOWED == 0 and FIELD_REMAINING == FIELD_ALLOWED + 1 and FIELD_RESET == FIELD_REMAINING + 1 and
    FIELD_RETRY == FIELD_RESET + 1 and FIELD_NEVER == FIELD_RETRY + 1 and FIELD_DEBT == FIELD_NEVER + 1 and
    FIELDS_PER_DECISION == FIELD_DEBT + 1) then
  error('floodgate: evaluate.lua: single() lists the fields in another order than FIELD_')
end
local function single(o, blocked)
  return {o.allowed and 1 or 0, o.remaining, o.reset, o.retry, o.never and 1 or 0, o.debt, blocked and 1 or 0}
end

-- parse_spec returns the spec table of a spec argument, parsing each once;
-- past max_parsed specs, as after many reloads, the cache starts over.
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
-- hit's arguments start.
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
-- windows without a calendar, with a limit in 1 .. LIMIT_MAX, a cost
-- within the capacity, and no flag or all FLAG_USAGE alone, on at most
-- FIXED_MAX distinct keys. fixed_window.lua applies and decides each hit
-- in place by the rule of its step; here is the request's part. Both
-- paths read, write and reply alike (TestFixedFastPath).
local FIXED_MAX = 16
local LIMIT_MAX = C.LIMIT_MAX

-- fixed_window.lua's in-place functions, loaded when a call needs them.
local fixed_hit, fixed_take_back, fixed_ready, fixed_commit, fixed_look
local function load_fixed()
  local a = algorithm(ALG_FIXED_WINDOW)
  fixed_hit, fixed_take_back, fixed_ready, fixed_commit, fixed_look = a.hit, a.take_back, a.ready, a.commit, a.look
end

-- read_first is set, for the rest of a call, once a request of the fast
-- path is blocked: the next ones, mostly over the limit too, read their
-- counters (GET) before they write. It never changes a decision.
local read_first = false

-- fixed_takes reports whether the fast path takes a hit (keys aside).
local function fixed_takes(h, cost, flags)
  local limit = h.limit
  return (flags == 0 or flags == FLAG_USAGE) and h.code == ALG_FIXED_WINDOW and limit > 0 and limit <= LIMIT_MAX and
    cost <= h.cap
end

-- fast_h[k] is the spec of the call's hit on keys[k] when fixed_takes it,
-- else false, fast_cost[k] its cost, fast_usage[k] whether it is a usage
-- hit: check fills them for every hit of a call before any is decided.
local fast_h, fast_cost, fast_usage = {}, {}, {}

-- fixed_one returns the reply of a request of one hit on key that
-- fixed_takes, having applied it, or nil, having written nothing.
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

-- reply_of[n] returns a new reply of n hits (1 to 3), sized at once as
-- single's; the check below holds each to its size.
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
-- keys[k0 + 1 ..] (see above). It runs no command.
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
-- when a commit cannot be made: the general path decides it then. A
-- commit Redis refuses (an ACL) raises its error once every hit is taken
-- back.
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
-- must decide it. One pass applies the hits as if the request passes; a
-- hit that blocks it takes the earlier ones back, and they and the
-- allowed hits after it report a look. Charges stay applied.
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
-- args[a], on the general path, without working copies.
local function decide_one(key, args, now, a)
  local h, cost, refund, advisory, q, _, usage = read(args, a)
  local algo = algorithm(h.code)
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

-- PER_CHARGE is the number of fields of a charge in decide_several's
-- list: the hit's index, cost and refund.
local PER_CHARGE = 3

-- charge applies the usage hits of a denied request alone, in order, to
-- the loaded states of their keys, writing their decisions to out, and
-- returns the states they leave by key (st, ok, and if written h and ttl).
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

-- conclude completes the reply out of a request of several hits that
-- decide_several stepped through: a denied request consumes nothing but
-- its charges, and its other allowed hits report a peek at the state as
-- stored or as the charges leave it; otherwise each changed key is
-- written once.
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
-- k0 + n], their arguments from args[a], on the general path, each hit
-- stepping a working copy of its key's state.
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

-- decide evaluates one request, hits on keys[k0 + 1 .. k0 + n] with
-- arguments from args[a], on the fast path when it takes it. It raises an
-- error before writing anything if the request cannot be decided.
local function decide(keys, args, now, k0, n, a)
  if n == 1 then
    local h = fast_h[k0 + 1]
    return h and fixed_one(keys[k0 + 1], h, fast_cost[k0 + 1], now, fast_usage[k0 + 1]) or
      decide_one(keys[k0 + 1], args, now, a)
  end
  return fixed(keys, now, k0, n) or decide_several(keys, args, now, k0, n, a)
end

-- decide_from decides requests r0 .. nreq of a call into results, in
-- order (offs, hits and nows as check returns them), up to the first
-- error, which its pcall catches.
local function decide_from(keys, args, offs, hits, nows, results, r0, nreq)
  for r = r0, nreq do
    results[r] = decide(keys, args, nows[r], offs[2 * r], hits[r], offs[2 * r - 1] + ARGS_PER_REQUEST)
  end
end

-- check reads the call's requests before any is decided, noting the hits
-- the fast path takes (fast_h, ...). It returns each request's first
-- argument and first key (offs, at 2r - 1 and 2r), hits and now, and the
-- number of requests; or an error reply naming a malformed argument.
local function check(keys, args)
  local offs, hits, nows = {}, {}, {}
  local clock -- Redis TIME in µs, read once per call if a request needs it
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

-- evaluate checks the call, then decides its requests in order, under
-- pcall so that a request's error is its own: one pcall covers the
-- requests up to the first error, and the next resumes after it.
local function evaluate(keys, args)
  read_first = false
  local offs, hits, nows, r = check(keys, args)
  if not hits then
    return offs
  end
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
