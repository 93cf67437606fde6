-- Sluice's decision step: G independent groups of N checks, each group
-- all-or-nothing, with exactly the arithmetic of sluice-core.
--
-- ARGV[1]  mode: 'c' (check and commit), 'r' (refund committed costs, then
--          peek) or 'd' (dry run: decide, commit nothing, report as a
--          refused request would)
-- ARGV[2]  now in microseconds, or '' for Redis's own TIME (tests only)
-- ARGV[3]  number of limits, then 10 fields per limit, precomputed in Rust
--          (see script.rs, `LimitParams`):
--          alg B P M g a L L2 M2 queue
-- then     number of groups, then per group: n, then n pairs (limit, cost)
-- KEYS     one per check, in the order of the checks
--
-- Units. With the rate reduced to a units of cost per p ns and
-- g = gcd(1000 a, p), one "unit" is g/a ns: a microsecond is M = 1000 a / g
-- units and one unit of cost is P = p / g units. Every time Sluice sees is a
-- whole microsecond (Redis's TIME), so every quantity of sluice-core's
-- scaled arithmetic is a whole number of units: the same integers, divided
-- by g. Times are kept in whole microseconds, quantities relative to them.
-- Durations are answered as (microseconds, nanoseconds) pairs that Rust adds
-- up, so nothing returned needs more than 53 bits.
--
-- Reply: per group its flag (1 allowed), then per check 8
-- integers: allowed, remaining, reset_after (us, ns), retry_after (us, ns;
-- us = -1 when allowed), delay (us, ns).

local floor = math.floor
local fmt = string.format
local match = string.match
local call = redis.call

local mode = ARGV[1]
local now
local margin = 0
if ARGV[2] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
  -- A test clock is not Redis's: keep keys long enough for any test.
  margin = 3600000
end

-- Exact x = q y + r for integers 0 <= x, 0 < y below 2^52.
local function divmod(x, y)
  local q = floor(x / y)
  local r = x - q * y
  if r < 0 then
    q = q - 1
    r = r + y
  elseif r >= y then
    q = q + 1
    r = r - y
  end
  return q, r
end

local function ceil_div(x, y)
  local q, r = divmod(x, y)
  if r > 0 then q = q + 1 end
  return q
end

local function floor_div(x, y)
  local q = divmod(x, y)
  return q
end

-- ceil((g x + extra) / a) ns, for x units plus extra (< a) core units,
-- as (microseconds, nanoseconds).
local function dur(lim, x, extra)
  if x <= 0 and extra <= 0 then return 0, 0 end
  if x < 0 then x = 0 end
  local us, r = divmod(x, lim.M)
  return us, ceil_div(r * lim.g + extra, lim.a)
end

-- Milliseconds of life for a key that is idle `us` microseconds from now.
local function ttl_ms(us)
  local ms = ceil_div(us, 1000)
  if ms < 1 then ms = 1 end
  return ms + margin
end

-- The window holding `now`, and the units elapsed in it.
local function window_pos(lim, t)
  local q, r = divmod(t, lim.L2)
  local i2, e2 = divmod(r * lim.M2, lim.L2)
  return q * lim.M2 + i2, e2 * lim.g2
end

local function get_fields(key)
  local v = call('GET', key)
  if not v then return nil end
  local x, y, z = match(v, '^(%d+):(%d+):?(%d*)$')
  if not x then return nil end
  return tonumber(x), tonumber(y), tonumber(z)
end

local function allowed_d(remaining, r_us, r_ns, d_us, d_ns)
  return { 1, remaining, r_us, r_ns, -1, 0, d_us, d_ns }
end

local function refused_d(remaining, r_us, r_ns, t_us, t_ns)
  return { 0, remaining, r_us, r_ns, t_us, t_ns, 0, 0 }
end

-- Token bucket (4), leaky bucket (5), GCRA (6): state "last_us:level"
-- where level is the used capacity in units as of last (for GCRA: the TAT is
-- last + level).
local function meter_used(lim, last, level)
  if not last then return 0 end
  local used
  if lim.alg == 6 then
    used = (last - now) * lim.M + level
  elseif now > last then
    used = level - (now - last) * lim.M
  else
    used = level
  end
  if used < 0 then used = 0 end
  return used
end

local function meter(lim, key, cost)
  local last, level = get_fields(key)
  local used = meter_used(lim, last, level)
  local cap, P = lim.L, lim.P
  local need = cost * P
  if used + need <= cap then
    local new = used + need
    local r_us, r_ns = dur(lim, new, 0)
    local d_us, d_ns = 0, 0
    if lim.queue == 1 then d_us, d_ns = dur(lim, used, 0) end
    local w = nil
    if cost > 0 then
      local stamp = now
      if lim.alg ~= 6 and last and last > now then stamp = last end
      w = { 'set', key, fmt('%.0f:%.0f', stamp, new),
            ttl_ms(stamp - now + ceil_div(new, lim.M)) }
    end
    return allowed_d(floor_div(cap - new, P), r_us, r_ns, d_us, d_ns), w
  end
  local r_us, r_ns = dur(lim, used, 0)
  local t_us, t_ns = dur(lim, used + need - cap, 0)
  local free = cap - used
  if free < 0 then free = 0 end
  return refused_d(floor_div(free, P), r_us, r_ns, t_us, t_ns), nil
end

-- Fixed window (1): state "window:count".
local function fixed(lim, key, cost)
  local idx0, e0 = window_pos(lim, now)
  local idx, e = idx0, e0
  local sw, sc = get_fields(key)
  local count = 0
  if sc and sc > 0 and sw >= idx then
    if sw > idx then
      idx = sw
      e = 0
    end
    count = sc
  end
  local B, L = lim.B, lim.L
  local u_us, u_ns = dur(lim, L - e, 0)
  if count + cost <= B then
    local used = count + cost
    local w = nil
    if cost > 0 then
      w = { 'set', key, fmt('%.0f:%.0f', idx, used),
            ttl_ms(ceil_div((idx - idx0 + 1) * L - e0, lim.M)) }
    end
    if used > 0 then
      return allowed_d(B - used, u_us, u_ns, 0, 0), w
    end
    return allowed_d(B - used, 0, 0, 0, 0), w
  end
  return refused_d(B - count, u_us, u_ns, u_us, u_ns), nil
end

-- Sliding window counter (3): state "window:previous:current".
local function sliding(lim, key, cost)
  local idx0, e0 = window_pos(lim, now)
  local idx, e = idx0, e0
  local prev, cur = 0, 0
  local sw, sp, sc = get_fields(key)
  if sw and sc and not (sp == 0 and sc == 0) then
    if sw == idx then
      prev, cur = sp, sc
    elseif sw > idx then
      idx = sw
      e = 0
      prev, cur = sp, sc
    elseif sw + 1 == idx then
      prev, cur = sc, 0
    end
  end
  local B, L = lim.B, lim.L
  local capacity = B * L
  local function weighted(c) return prev * (L - e) + c * L end
  local function reset(c)
    if c > 0 then return dur(lim, 2 * L - e, 0) end
    if prev > 0 then return dur(lim, L - e, 0) end
    return 0, 0
  end
  local used = cur + cost
  if weighted(used) <= capacity then
    local r_us, r_ns = reset(used)
    local w = nil
    if cost > 0 then
      w = { 'set', key, fmt('%.0f:%.0f:%.0f', idx, prev, used),
            ttl_ms(ceil_div((idx - idx0 + 2) * L - e0, lim.M)) }
    end
    return allowed_d(floor_div(capacity - weighted(used), L), r_us, r_ns, 0, 0), w
  end
  -- The first instant the estimate leaves room, as sluice-core computes it
  -- in its own units (g times ours): e' = len - min(floor(g slack / div), len).
  local base, slack, div
  if cur + cost <= B then
    base, slack, div = 0, (B - cur - cost) * L, prev
  else
    base, slack, div = L, (B - cost) * L, cur
  end
  if div < 1 then div = 1 end
  local qs, rs = divmod(slack, div)
  local t_us, t_ns
  if qs >= L then
    t_us, t_ns = dur(lim, base - e, 0)
  else
    local f = floor_div(lim.g * rs, div)
    local y = base + L - e - qs
    if y <= 0 then
      t_us, t_ns = 0, 0
    else
      t_us, t_ns = dur(lim, y - 1, lim.g - f)
    end
  end
  if t_us == 0 and t_ns == 0 then t_ns = 1 end
  local free = capacity - weighted(cur)
  if free < 0 then free = 0 end
  local r_us, r_ns = reset(cur)
  return refused_d(floor_div(free, L), r_us, r_ns, t_us, t_ns), nil
end

-- Sliding log (2): a list of "at_us:cost", oldest first, at most B entries.
local function read_log(key)
  local raw = call('LRANGE', key, 0, -1)
  local ats, cs = {}, {}
  for k = 1, #raw do
    local x, y = match(raw[k], '^(%d+):(%d+)$')
    ats[k] = tonumber(x) or 0
    cs[k] = tonumber(y) or 0
  end
  return ats, cs, #raw
end

local function log(lim, key, cost)
  local ats, cs, n = read_log(key)
  local t = now
  if n > 0 and ats[n] > t then t = ats[n] end
  local B, L, M = lim.B, lim.L, lim.M
  local first = n + 1
  for k = 1, n do
    if (t - ats[k]) * M < L then
      first = k
      break
    end
  end
  local used = 0
  for k = first, n do used = used + cs[k] end
  local newest = 0
  if first <= n then newest = L - (t - ats[n]) * M end
  if used + cost <= B then
    local w = nil
    local r_us, r_ns
    if cost > 0 then
      r_us, r_ns = dur(lim, L, 0)
      local merge = n > 0 and ats[n] == t
      local v
      if merge then v = fmt('%.0f:%.0f', t, cs[n] + cost) else v = fmt('%.0f:%.0f', t, cost) end
      w = { 'log', key, v, ttl_ms(t - now + ceil_div(L, M)), first - 1, merge }
    else
      r_us, r_ns = dur(lim, newest, 0)
    end
    return allowed_d(B - used - cost, r_us, r_ns, 0, 0), w
  end
  local to_free = used + cost - B
  local pass = 0
  for k = first, n do
    pass = L - (t - ats[k]) * M
    to_free = to_free - cs[k]
    if to_free <= 0 then break end
  end
  local r_us, r_ns = dur(lim, newest, 0)
  local t_us, t_ns = dur(lim, pass, 0)
  return refused_d(B - used, r_us, r_ns, t_us, t_ns), nil
end

local deciders = { fixed, log, sliding, meter, meter, meter }

local function write(w)
  if w[1] == 'set' then
    call('SET', w[2], w[3], 'PX', w[4])
  else
    if w[5] > 0 then call('LTRIM', w[2], w[5], -1) end
    if w[6] then call('LSET', w[2], -1, w[3]) else call('RPUSH', w[2], w[3]) end
    call('PEXPIRE', w[2], w[4])
  end
end

-- Refunds: give back a committed cost, as closely as the state allows.
local function refund_meter(lim, key, cost)
  local last, level = get_fields(key)
  if not last then return end
  local used = meter_used(lim, last, level) - cost * lim.P
  if used < 0 then used = 0 end
  local stamp = now
  if lim.alg ~= 6 and last > now then stamp = last end
  call('SET', key, fmt('%.0f:%.0f', stamp, used), 'KEEPTTL')
end

local function refund_fixed(lim, key, cost)
  local idx = window_pos(lim, now)
  local sw, sc = get_fields(key)
  if not sc or sw < idx then return end
  sc = sc - cost
  if sc < 0 then sc = 0 end
  call('SET', key, fmt('%.0f:%.0f', sw, sc), 'KEEPTTL')
end

local function refund_sliding(lim, key, cost)
  local idx = window_pos(lim, now)
  local sw, sp, sc = get_fields(key)
  if not sc or sw + 1 < idx then return end
  sc = sc - cost
  if sc < 0 then sc = 0 end
  call('SET', key, fmt('%.0f:%.0f:%.0f', sw, sp, sc), 'KEEPTTL')
end

local function refund_log(lim, key, cost)
  local ats, cs, n = read_log(key)
  local left = cost
  local k = n
  while k >= 1 and left > 0 do
    if cs[k] <= left then
      left = left - cs[k]
      call('RPOP', key)
    else
      call('LSET', key, k - 1, fmt('%.0f:%.0f', ats[k], cs[k] - left))
      left = 0
    end
    k = k - 1
  end
end

local refunders = { refund_fixed, refund_log, refund_sliding, refund_meter, refund_meter, refund_meter }

-- Parse the limits and the groups before touching anything.
local lims = {}
local nl = tonumber(ARGV[3])
local ai = 4
for j = 1, nl do
  local l = {
    alg = tonumber(ARGV[ai]), B = tonumber(ARGV[ai + 1]), P = tonumber(ARGV[ai + 2]),
    M = tonumber(ARGV[ai + 3]), g = tonumber(ARGV[ai + 4]), a = tonumber(ARGV[ai + 5]),
    L = tonumber(ARGV[ai + 6]), L2 = tonumber(ARGV[ai + 7]), M2 = tonumber(ARGV[ai + 8]),
    queue = tonumber(ARGV[ai + 9]),
  }
  l.g2 = l.M / l.M2
  lims[j] = l
  ai = ai + 10
end

local groups = {}
local ng = tonumber(ARGV[ai])
ai = ai + 1
local ki = 1
for gi = 1, ng do
  local n = tonumber(ARGV[ai])
  ai = ai + 1
  local checks = {}
  for c = 1, n do
    local lim = lims[tonumber(ARGV[ai])]
    local cost = tonumber(ARGV[ai + 1])
    if not lim or not cost or cost < 0 then
      return redis.error_reply('ERR sluice: malformed arguments')
    end
    if cost > lim.B then
      return redis.error_reply('ERR sluice: cost exceeds capacity')
    end
    checks[c] = { lim, KEYS[ki], cost }
    ki = ki + 1
    ai = ai + 2
  end
  groups[gi] = checks
end

-- Refund mode gives the costs back, then answers peeks (cost 0): the
-- state as it now stands.
if mode == 'r' then
  for gi = 1, ng do
    for _, c in ipairs(groups[gi]) do
      if c[3] > 0 then refunders[c[1].alg](c[1], c[2], c[3]) end
      c[3] = 0
    end
  end
end

local out = {}
local o = 0
for gi = 1, ng do
  local checks = groups[gi]
  local ds, ws = {}, {}
  local ok = true
  for c = 1, #checks do
    local lim = checks[c][1]
    ds[c], ws[c] = deciders[lim.alg](lim, checks[c][2], checks[c][3])
    if ds[c][1] == 0 then ok = false end
  end
  local group_ok = ok
  if mode == 'd' then ok = false end
  if ok then
    for c = 1, #checks do
      if ws[c] then write(ws[c]) end
    end
  else
    -- Refused: nothing is written; the limits that would have allowed it
    -- report their state as it stands.
    for c = 1, #checks do
      if ds[c][1] == 1 then
        local lim = checks[c][1]
        ds[c] = deciders[lim.alg](lim, checks[c][2], 0)
      end
    end
  end
  o = o + 1
  if group_ok then out[o] = 1 else out[o] = 0 end
  for c = 1, #ds do
    local d = ds[c]
    for f = 1, 8 do
      out[o + f] = d[f]
    end
    o = o + 8
  end
end
return out
