-- fixed_window: counts hits in the window [start, end) that holds now.
--
-- Per hit: KEYS: the counter's key. A plain window's counter is the
-- integer tag * COUNT_SPAN + count (common.lua: the tag names the window),
-- a calendar window's the string "<window start µs>:<count>", whose start
-- tells months and years apart where a tag could not; each reads the
-- other's layout, and a plain window reads the string of earlier releases
-- and the hash {s = window start, n = count} before it (see pair_of).
-- ARGV group (see evaluate.lua), whose spec "code:L:W:B:N" gives limit L, window W µs, and, for calendar
-- windows, four boundaries b1 < b2 < b3 < b4 (µs) computed in Go around its
-- own clock; the window is the one of [b1,b2), [b2,b3), [b3,b4) holding
-- Redis's now, and it is an error if none does. Without a calendar,
-- start = floor(now/W)*W and end = start + W.
--
-- Semantics (limit.stepFixedWindow), in judge: n is the stored count if
-- the stored window is this one, else 0. Allowed iff n + cost <= L; a
-- consuming hit sets n = n + cost and writes (start, n) with TTL end - now.
-- Remaining = max(0, L - n) after the hit; reset = end - now; retry
-- (denied) = end - now. A refund sets n = max(0, n - cost), writing only if
-- the stored window is this one and n > 0. A charge (force: a usage hit)
-- that does not fit sets n = max(n, min(n + cost, count_cap(L))) and
-- writes, denied.
--
-- A hit is applied one of two ways, both decided by judge. load, step and
-- store keep a working copy of the state, read with GET and written once
-- with SET: evaluate.lua's general path, for every kind of hit. hit,
-- take_back, ready, commit and look apply a hit in place to a plain
-- window's integer counter with INCRBY: evaluate.lua's fast path, for
-- requests of plain windows that only consume or charge, on distinct keys.
-- Both read and write the same counters, and the tests hold them to the
-- same replies, values and expiries (TestFixedFastPath).
--
-- Receives (see scriptSource in script.go): C, common.lua's helpers; it
-- uses no constant. Returns {load, step, store, hit, take_back, ready,
-- commit, look}.

local int, outcome, pair_of, store_pair = C.int, C.outcome, C.pair_of, C.store_pair
local COUNT_SPAN, LIMIT_MAX, window_tag, fixed_of = C.COUNT_SPAN, C.LIMIT_MAX, C.window_tag, C.fixed_of
local count_cap, fixed_parts, expire_at = C.count_cap, C.fixed_parts, C.expire_at
local floor = math.floor

-- judge is the rule of a hit of cost on a window holding n: it returns the
-- window's count after the hit, whether the hit is allowed, whether it
-- writes, and the remaining and debt it reports. Whichever way the hit is
-- applied, this is where the fixed window decides.
local function judge(n, limit, cost, refund, force)
  local allowed, write = true, false
  if refund then
    if n > 0 and cost > 0 then
      n, write = math.max(0, n - cost), true
    end
  elseif n + cost <= limit then
    if cost > 0 then
      n, write = n + cost, true
    end
  elseif force then
    local most = count_cap(limit)
    allowed, write = false, true
    if n + cost <= most then
      n = n + cost
    elseif n < most then
      n = most
    end
  else
    allowed = false
  end
  if n < limit then
    return n, allowed, write, limit - n, 0
  end
  return n, allowed, write, 0, n - limit
end

local function window(h, now)
  if h.cal then
    for i = 1, #h.cal - 1 do
      if h.cal[i] <= now and now < h.cal[i + 1] then
        return h.cal[i], h.cal[i + 1]
      end
    end
    return error('floodgate: Redis time ' .. int(now) .. ' is outside the calendar windows ' ..
      int(h.cal[1]) .. '..' .. int(h.cal[#h.cal]) .. ' computed by the server: their clocks disagree')
  end
  local start = floor(now / h.window) * h.window
  return start, start + h.window
end

-- A state's expires flag says that its key is a string already set to
-- expire at the end of the state's window: every write in a window sets
-- the same instant (ceil(end/1000) ms, see expire_at), so a later write in
-- it keeps the key's TTL (KEEPTTL) instead of setting it again. A state
-- holds its window's tag (an integer counter) or its start (a string).
local function load(key, h, now)
  local v = redis.pcall('GET', key)
  local tag, n = fixed_of(v)
  if tag then
    return {tag = tag, count = n, expires = true}, true
  end
  local start, count, str = pair_of(key, v, 's', 'n')
  if not start then
    return {start = 0, count = 0}, false
  end
  return {start = start, count = count, expires = str}, true
end

local function step(st, ok, h, now, cost, refund, force)
  local start, stop = window(h, now)
  local limit = h.limit
  if limit > LIMIT_MAX and not h.cal then
    return error('floodgate: fixed window limit ' .. int(limit) .. ' above ' .. int(LIMIT_MAX))
  end
  local tag = not h.cal and window_tag(start, h.window) or nil
  -- The stored window is this one: a counter of the same tag, or a string
  -- of the same start.
  local same = false
  if ok and st.tag then
    same = st.tag == tag
  elseif ok then
    same = st.start == start
  end
  local n, allowed, write, remaining, debt = judge(same and st.count or 0, limit, cost, refund, force)
  local o = outcome(allowed, remaining, stop - now, allowed and 0 or stop - now, write, stop - now)
  o.debt = debt
  return {start = start, tag = tag, count = n, expires = same and st.expires}, o
end

local function store(key, st, h, now, ttl)
  local v
  if st.tag then
    v = st.tag * COUNT_SPAN + st.count
  else
    v = string.format('%d:%d', st.start, st.count)
  end
  if st.expires then
    redis.call('SET', key, v, 'KEEPTTL')
  else
    store_pair(key, v, now, ttl)
  end
end

-- In place. A consuming hit adds its cost to its counter at once (INCRBY),
-- reads the count before it from the reply, and is taken back (INCRBY of
-- minus its cost, or DEL of a key it created) if its request turns out
-- blocked or must go to the general path; a hit under the limit is then
-- one command where load and store take two, and the formatting and
-- parsing of a string around them are gone. When the driver asks, a hit
-- reads its counter first (GET) instead, and commit writes it.
--
-- The hits of the request being decided are numbered 1, 2, ... by the
-- driver; what hit i found and what its commit needs are kept in the
-- arrays below at i, set by hit before anything reads them, so nothing of
-- one request or call reaches the next.

-- What a hit found: its INCRBY added to this window's counter, to another
-- window's, or created the key holding the bare cost; or its read (GET)
-- found this window's counter, which a commit then adds to in place.
-- Otherwise (a read finding none, a hit taken back) it is nil or false.
local ADDED, STALE, CREATED, HELD = 'added', 'stale', 'created', 'held'

-- found[i] is what hit i found, before[i] its window's count before it,
-- pending[i] whether it has a write left for commit; for those, tags[i],
-- resets[i] and helds[i] (the value GET read, for a HELD counter) are what
-- the write needs.
local found, before, pending, tags, resets, helds = {}, {}, {}, {}, {}, {}

-- hit decides hit i of a request in place: cost (within the capacity) on
-- key's plain window of spec h (limit 1 to LIMIT_MAX), a charge when force
-- (a usage hit of cost > 0), added at once when add, else only read. It
-- returns the hit's decision (allowed, remaining, reset, retry, debt) and
-- whether the hit has a write left for commit (pending); or nil when the
-- general path must decide: the key holds something else (a counter of
-- earlier releases, an error such as WRONGTYPE; what INCRBY added is
-- taken back, and the general path reads it, or names it in its error),
-- or the hit would write other than count + cost, a charge the counter
-- holds only in part (found[i] says what take_back must undo).
local function hit(i, key, h, cost, now, add, force)
  local w = h.window
  local start = floor(now / w) * w
  local tag = window_tag(start, w)
  local count, did, held
  if add then
    local x = redis.pcall('INCRBY', key, cost)
    if type(x) == 'number' then
      count = x - cost
      local t = floor(count / COUNT_SPAN)
      if t == tag then
        count, did = count - t * COUNT_SPAN, ADDED
      elseif count == 0 then
        -- No key, or the bare 0, which INCRBY cannot tell from none
        -- (fixed_of reads it as none too; taken back, it is deleted, a
        -- state equal to it).
        did = CREATED
      elseif fixed_parts(count) then
        count, did = 0, STALE
      else
        redis.call('INCRBY', key, -cost)
        count = nil
      end
    end
  else
    local v = redis.pcall('GET', key)
    if not v then
      count = 0
    else
      local t, c = fixed_of(v)
      if t == tag then
        count, did, held = c, HELD, v
      elseif t then
        count = 0
      end
    end
  end
  found[i], before[i] = did, count
  if not count then
    return nil
  end
  local n, allowed, write, remaining, debt = judge(count, h.limit, cost, false, force)
  if write and n ~= count + cost then
    return nil
  end
  local reset = start + w - now
  local left = write and did ~= ADDED
  pending[i] = left
  if left then
    tags[i], resets[i], helds[i] = tag, reset, held
  end
  return allowed, remaining, reset, allowed and 0 or reset, debt, left
end

-- take_back undoes what hit i (on key, of cost) added or created, leaving
-- the key as it was before the request. After its commit (taken back only
-- when a later one is refused), an addition to a counter it read is undone
-- too, a counter set in place of an earlier window's is left at this
-- window's count 0, which reads as the earlier one did, and a counter set
-- where it read none is left.
local function take_back(i, key, cost)
  local did = found[i]
  if did == CREATED then
    redis.call('DEL', key)
  elseif did == ADDED or did == STALE then
    redis.call('INCRBY', key, -cost)
  end
  found[i] = false
end

-- ready reports whether hit i's commit can be made: a counter it read and
-- adds to must be in the decimal form INCRBY reads, not merely one
-- tonumber reads ("<n>.0", hex, spaces). A request with a counter INCRBY
-- refuses goes to the general path, which rewrites it, before any write:
-- its commit would fail after the request's other writes.
local function ready(i)
  return not pending[i] or found[i] ~= HELD or string.find(helds[i], '^[1-9]%d*$') ~= nil
end

-- commit makes hit i's pending write, of cost on key, in a request that
-- passed (or a charge, which stays): a counter it read is added to, a new
-- window's counter is set with its expiry (reset µs from now). It returns
-- the error of a write Redis refused (a user whose ACL denies SET), which
-- wrote nothing, else nil; the caller takes the request back and raises
-- that error, the request's, so that the fast path leaves what the general
-- path, which reads before it writes, leaves: nothing. A key INCRBY created
-- and left would hold a bare count without expiry, which no later call
-- reads as a counter.
local function commit(i, key, cost, now)
  if not pending[i] then
    return nil
  end
  local did, done = found[i]
  if did == HELD then
    done = redis.pcall('INCRBY', key, cost)
  else
    done = redis.pcall('SET', key, tags[i] * COUNT_SPAN + before[i] + cost, 'PXAT', expire_at(now, resets[i]))
  end
  if type(done) == 'table' and done.err then
    return done
  end
  if did == HELD then
    -- Added now, to take back as an INCRBY's.
    found[i] = ADDED
  end
end

-- look returns the remaining and debt of a hit of cost 0 on the counter
-- hit i found, of limit: what an allowed hit of a blocked request reports.
local function look(i, limit)
  local _, _, _, remaining, debt = judge(before[i], limit, 0, false, false)
  return remaining, debt
end

return {load = load, step = step, store = store, hit = hit, take_back = take_back, ready = ready, commit = commit,
        look = look}
