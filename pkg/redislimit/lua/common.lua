-- Helpers shared by the algorithm files and the driver (evaluate.lua).
--
-- Receives: the generated constants, of which it reads MAX_COUNT. This
-- file is the body of a function of no arguments (see scriptSource in
-- script.go); it returns its helpers in one table, C,
-- that the algorithm files and the driver receive and read from. The
-- script is the generated constants block, then this file, then each
-- algorithm file as the body of a loader function(C, K) registered under
-- the algorithm's code, then evaluate.lua: one script, one SHA. Redis runs
-- the whole script on every call, so an algorithm's functions are only
-- created when a hit needs them.
--
-- Numbers: Lua numbers are C doubles, like Go's float64. Times are integer
-- microseconds (exact below 2^53), fractions are doubles, and every float
-- expression is written in the order package limit's step functions evaluate
-- it, so both give the same bits. Numbers sent to Redis go through num() or
-- int(), never tostring() (which keeps only 14 digits).

-- num formats x with 17 significant digits: any double survives the round
-- trip through tonumber. For fractions (tokens, levels, arrival times).
local function num(x)
  return string.format('%.17g', x)
end

-- int formats an integer-valued x (µs, counts, indices): exact, and faster
-- than num.
local function int(x)
  return string.format('%d', x)
end

-- outcome returns a hit's outcome; the fields mirror limit's outcome type.
-- Every call fills the same table, rather than making one per hit: an
-- outcome is read to the end before the next step asks for another
-- (evaluate.lua copies its fields into the decision at once, and no
-- algorithm holds two), and all its fields are set each time, so nothing of
-- one hit or call reaches the next.
local the_outcome = {}
local function outcome(allowed, remaining, reset, retry, write, ttl)
  local o = the_outcome
  o.allowed, o.never, o.remaining, o.reset, o.retry, o.write, o.ttl, o.debt =
    allowed, false, remaining, reset, retry, write, ttl, 0
  return o
end

-- expire_at returns the instant, in whole milliseconds rounded up, at which
-- a state written at now with lifetime ttl (µs) becomes equivalent to none.
-- Keys expire at an absolute instant of the script's timeline: in
-- production that is Redis's own clock, so it means PEXPIRE ttl; with a
-- test's explicit now (in the future) keys outlive the test, and their
-- expiry instant can be checked exactly.
local function expire_at(now, ttl)
  return int(math.ceil((now + ttl) / 1000))
end

-- expire sets key's expiry for a state written at now with lifetime ttl
-- (µs); a state already equivalent to none (ttl <= 0) is deleted.
local function expire(key, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIREAT', key, expire_at(now, ttl))
  end
end

-- settle returns ceil(gap/r): the µs a bucket moving at r per µs needs to
-- cross gap, to fill up (token bucket) or drain (leaky bucket). It is the
-- bucket's reset and TTL, and a bucket is read as settled (full, or empty)
-- once that long has passed since it was written, whatever the float sum
-- gives: rounding may leave it an ulp short at the instant its key expires,
-- and expiry must not change a decision (limit.settleMicros).
local function settle(gap, r)
  return math.ceil(gap / r)
end

-- first_pass mirrors limit.firstPass: the smallest d >= 1 for which
-- pass(d) holds, pass being monotone and pass(0) false, from an estimate:
-- about two calls of pass when the estimate is right or 1 off.
local function first_pass(guess, pass)
  guess = math.max(guess, 1)
  local lo, hi
  if pass(guess) then
    hi = guess
    local step = 1
    while true do
      lo = guess - step
      if lo < 1 then
        lo = 0
        break
      end
      if not pass(lo) then
        break
      end
      hi = lo
      step = step * 2
    end
  else
    lo = guess
    local step = 1
    while true do
      hi = guess + step
      if pass(hi) then
        break
      end
      lo = hi
      step = step * 2
    end
  end
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if pass(mid) then
      hi = mid
    else
      lo = mid
    end
  end
  return hi
end

-- pair_of reads a state kept as the string "<a>:<b>" (one GET, one SET
-- with PXAT: two commands where a hash took three) from v, GET's reply for
-- key. A key written before strings holds a hash with fields fa and fb
-- instead: GET fails on it with WRONGTYPE, and only then is the hash read,
-- so counters survive an upgrade; the next write replaces the hash with a
-- string. Returns a, b as numbers and whether they were a string, or nil
-- when the key is missing.
local function pair_of(key, v, fa, fb)
  if type(v) == 'table' then
    local f = redis.call('HMGET', key, fa, fb)
    if not f[1] then
      return nil
    end
    return tonumber(f[1]), tonumber(f[2]) or 0
  end
  if not v then
    return nil
  end
  local sep = string.find(v, ':', 1, true)
  if not sep then
    return error('floodgate: key ' .. key .. ' holds ' .. v .. ', not a counter of this algorithm')
  end
  return tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1)), true
end

-- load_pair reads key's state "<a>:<b>" as pair_of does.
local function load_pair(key, fa, fb)
  return pair_of(key, redis.pcall('GET', key), fa, fb)
end

-- A plain fixed window's counter (no calendar) is one integer,
-- tag * COUNT_SPAN + count, so that a hit is one INCRBY where a string
-- "<start>:<count>" took a GET and a SET (fixed_window.lua, in place). The
-- tag names the window among its neighbours: window_tag. Limits are at
-- most LIMIT_MAX (the rules' requests_per_unit is a uint32), so a count,
-- and a count plus a hit's cost, stay below COUNT_SPAN; tags are at most
-- WINDOW_TAGS, so the integer stays below 2^52 and Lua reads it exactly.
-- COUNT_SPAN is limit.MaxCount + 1 (2^33): a count, usage charges past the
-- limit included, is at most MaxCount.
local COUNT_SPAN, WINDOW_TAGS, LIMIT_MAX = MAX_COUNT + 1, 524287, 4294967295

-- count_cap returns the most a window of limit counts: usage charges count
-- past the limit up to MAX_COUNT, or twice the limit when that is more
-- (limit.countCap).
local function count_cap(limit)
  if limit * 2 > MAX_COUNT then
    return limit * 2
  end
  return MAX_COUNT
end

-- window_tag returns the tag of the window of length w starting at start:
-- its index start/w modulo WINDOW_TAGS, plus one, so that no tag is 0 (a
-- key INCRBY creates holds a bare count). Consecutive windows have
-- different tags, and a counter is only read in its own window or, for the
-- last millisecond of its expiry rounding, the next one (it expires at its
-- window's end), so the tag tells this window's count from the last's. A
-- clock stepped back WINDOW_TAGS windows or more could mistake one for the
-- other, as the stored start could a clock stepped back to the same start.
local function window_tag(start, w)
  return (start / w) % WINDOW_TAGS + 1
end

-- fixed_parts returns the tag and count of x, a plain fixed window's
-- counter as a number, or nil when x is none (out of the range, or not
-- whole).
local function fixed_parts(x)
  if x < COUNT_SPAN or x >= COUNT_SPAN * (WINDOW_TAGS + 1) or x % 1 ~= 0 then
    return nil
  end
  local tag = math.floor(x / COUNT_SPAN)
  return tag, x - tag * COUNT_SPAN
end

-- fixed_of reads GET's reply v as a plain fixed window's counter (see
-- fixed_parts); nil for a missing key, a string of earlier releases or
-- anything else. The bare 0 is tag 0, no window's: INCRBY cannot tell it
-- from a missing key, so it is read as one, whichever command reads it.
local function fixed_of(v)
  if v == '0' then
    return 0, 0
  end
  local x = type(v) == 'string' and tonumber(v)
  if not x then
    return nil
  end
  return fixed_parts(x)
end

-- store_pair writes v (the string a .. ':' .. b formatted by the caller,
-- or a fixed window's counter) to expire at the instant a state written at now with lifetime ttl (µs)
-- becomes equivalent to none; a state already equivalent to none is deleted.
local function store_pair(key, v, now, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, v, 'PXAT', expire_at(now, ttl))
  end
end

-- load_bucket and store_bucket keep a token bucket's tokens or a leaky
-- bucket's level: the string "<value, 17 digits>:<as of, µs>" (before:
-- a hash {v = value, t = as of}).
local function load_bucket(key)
  local v, t = load_pair(key, 'v', 't')
  if not v then
    return {value = 0, ts = 0}, false
  end
  return {value = v, ts = t}, true
end

local function store_bucket(key, st, h, now, ttl)
  store_pair(key, string.format('%.17g:%d', st.value, st.ts), now, ttl)
end

return {num = num, int = int, outcome = outcome, expire_at = expire_at, expire = expire,
        settle = settle, first_pass = first_pass, pair_of = pair_of, load_pair = load_pair, store_pair = store_pair,
        COUNT_SPAN = COUNT_SPAN, WINDOW_TAGS = WINDOW_TAGS, LIMIT_MAX = LIMIT_MAX, count_cap = count_cap,
        window_tag = window_tag, fixed_parts = fixed_parts, fixed_of = fixed_of,
        load_bucket = load_bucket, store_bucket = store_bucket}
