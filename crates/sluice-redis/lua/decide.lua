-- Sluice's decision step: G independent groups of N checks, each group
-- all-or-nothing, with exactly the arithmetic of sluice-core.
--
-- ARGV[1]  mode: 'c' (check and commit), 'r' (refund committed costs, then
--          peek), 'd' (dry run: decide, commit nothing, report as a
--          refused request would) or 'b' (debit: charge each check's cost
--          whatever is left, into debt up to max_debt; see "Debt" below)
-- ARGV[2]  now in microseconds, or '' for Redis's own TIME (tests only)
-- ARGV[3]  the limits, packed: per limit 12 fields, each a little-endian
--          double ('<d'), precomputed in Rust (see script.rs, `LimitParams`):
--          alg B P M g a L L2 M2 queue R F
--          F is 1 when debt is forgiven at the window reset (the window
--          algorithms' `with_debt_forgiven`), else 0.
--          R is the reserve: the cost that must still be left after a
--          charge (0 to B). A check is admitted only if cost + R fits, as if
--          the burst were B - R; `remaining` and `retry_after` are those of
--          that smaller burst. The state is the same whatever R, so one key
--          can be decided with different reserves (priority classes), or
--          with a larger limiter and a reserve equal to the difference (a
--          delay limit's extended bucket, used as the plain one).
-- ARGV[4]  the checks, packed: per check '<BHHd' (1 if it opens a group, its
--          limit's index, its key's index in KEYS, its cost)
-- ARGV[5]  in mode 'b' only: max_debt, the debt allowed beyond empty, in
--          units of cost (a decimal integer)
-- KEYS     the call's distinct keys (a key that several checks name is
--          passed once, so its state is read once and kept up to date)
--
-- Units. With the rate reduced to a units of cost per p ns and
-- g = gcd(1000 a, p), one "unit" is g/a ns: a microsecond is M = 1000 a / g
-- units and one unit of cost is P = p / g units. Every time Sluice sees is a
-- whole microsecond (Redis's TIME), so every quantity of sluice-core's
-- scaled arithmetic is a whole number of units: the same integers, divided
-- by g. Times are kept in whole microseconds, quantities relative to them.
-- Durations are computed as (microseconds, nanoseconds) pairs, so nothing
-- needs more than 53 bits.
--
-- State values are packed little-endian doubles (struct.pack), exact for
-- the integers they hold and cheaper than text to read and write.
--
-- Concurrency (7): slots in flight, as leases. Its fields: B the most in
-- flight, R the reserve, L the lease in whole microseconds (rounded up), P
-- and g the lease as (microseconds, nanoseconds) for the durations it
-- answers, L2 the holder: the calling instance's id (below 2^52), or the
-- check's own lease (at least 2^52) for a request whose end Sluice may
-- not see (M = M2 = 1); the others are unused. Its state is one string of
-- packed '<ddd' triples, one per holder: (holder id, slots held, expiry in
-- us on Redis's clock). Slots whose expiry is past
-- are free. A check takes `cost` slots if the live ones plus cost fit
-- B - R; an admitted cost > 0 adds them to the caller's entry, whose
-- expiry becomes now + lease. A peek (cost 0, mode 'c') by an instance
-- that holds live slots renews its entry's expiry, whatever the decision
-- (it takes nothing): a long request keeps its leases so. A refund (a
-- release) by a lease takes the cost off that lease's entry only, never
-- below 0: a lease that ended or was released frees nothing more. A
-- refund by an instance takes it off the caller's entry, then what the
-- caller does not hold off the other live entries, the one whose lease
-- ends soonest first, never any below 0; each entry at 0 is removed. A
-- debit adds up to B + max_debt on the caller's entry. An instance that
-- dies stops renewing: its slots come back one lease after its last
-- acquisition or renewal; a lease comes back one lease after it was
-- taken or last renewed. Every write drops
-- expired entries and lives until the latest expiry; an empty state
-- deletes the key.
--
-- Reply: per group of several checks its flag (1 allowed; a group of one
-- has none: its check's is the group's), then per check:
--   remaining * 2 + allowed   (remaining above the reserve),
--   reset_after,
--   retry_after   (refused checks only),
--   delay         (leaky buckets without nodelay only).
-- A duration is one integer, nanoseconds, when below 2^53; a longer one is
-- two: -(microseconds + 1), then the nanoseconds beyond them.
-- Mode 'b' replies instead, per check, the cost charged (the rest of its
-- cost is the caller's excess).
--
-- Debt. A debit (mode 'b') applies exactly sluice-core's `Algorithm::debit`
-- and every mode decides a key in debt as sluice-core does (docs/
-- algorithms.md, "Settlement and debt"): buckets and GCRA hold it as a
-- level above the capacity; the fixed window as a count above B, of which
-- each window boundary pays off B (the rest carries on; all of it with F);
-- the sliding window counter likewise, B staying with the window that ends
-- as its previous count. The sliding log keeps its debt in the first
-- element of its list, a single packed double ('<d', 8 bytes, where an
-- entry is 16), present only while there is debt; a log in debt is
-- rewritten whole whenever it changes (only debits and refunds change it,
-- and a check admitted once the debt is logged). Its entries are logged
-- again as they leave the window, whole windows later, so the script takes
-- debits only for logs whose window is a whole number of microseconds
-- (checked in Rust). Every key in debt lives until its debt is paid off.
-- Debts are exact while the state they make stays below 2^52 units (a
-- window count below 2^32, as in sluice-core); max_debt and amounts are
-- taken as doubles, so an amount above 2^52 is charged only up to 2^52.

local floor = math.floor
local call = redis.call
-- Locals, not globals: each use is then an upvalue, not a lookup by name.
local KEYS, ARGV = KEYS, ARGV
local unpack_list = unpack
local pack = struct.pack
local unpack = struct.unpack

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

-- Exact x = q y + r for integers 0 <= x, 0 < y below 2^52. (In these
-- three, q - q % 1 is floor(q) without a call to a C function.)
local function divmod(x, y)
  local q = x / y
  q = q - q % 1
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

-- ceil(x / y) and floor(x / y), as divmod's (one call on the hot path).
local function ceil_div(x, y)
  local q = x / y
  q = q - q % 1
  local r = x - q * y
  if r < 0 then
    q, r = q - 1, r + y
  elseif r >= y then
    q, r = q + 1, r - y
  end
  if r > 0 then return q + 1 end
  return q
end

local function floor_div(x, y)
  local q = x / y
  q = q - q % 1
  local r = x - q * y
  if r < 0 then return q - 1 end
  if r >= y then return q + 1 end
  return q
end

-- ceil((g x + extra) / a) ns for x units plus `extra` of sluice-core's own
-- units (g of them make one of ours), as (microseconds, nanoseconds).
local function dur(lim, x, extra)
  if x <= 0 and extra <= 0 then return 0, 0 end
  if x < 0 then x = 0 end
  if lim.M == 1 and extra == 0 then return x, 0 end
  local us, r = divmod(x, lim.M)
  return us, ceil_div(r * lim.g + extra, lim.a)
end

-- Milliseconds of life for a key that is idle `us` microseconds from now.
local function ttl_ms(us)
  local ms = ceil_div(us, 1000)
  if ms < 1 then ms = 1 end
  return ms + margin
end

-- At most `hi`, at least 0.
local function clamp(x, hi)
  if x > hi then x = hi end
  if x < 0 then x = 0 end
  return x
end

-- Per check of a group of several, by its position k in the group: its
-- decision, and the write an admission makes, kept until the group's
-- decision. Positions start again with each group, so these tables stay as
-- small as the largest group. A check in a group of one (k = 0) writes as
-- it is decided and needs none of them: they are made for a call's first
-- group of several (`group_tables`).
local d_ok, d_rem, d_rus, d_rns, d_tus, d_tns, d_dus, d_dns
local w_x, w_y, w_z, w_need, w_exp
local w_val, w_ttl, w_drop, w_merge, w_full
local function group_tables()
  d_ok, d_rem, d_rus, d_rns, d_tus, d_tns, d_dus, d_dns = {}, {}, {}, {}, {}, {}, {}, {}
  w_x, w_y, w_z, w_need, w_exp = {}, {}, {}, {}, {}
  w_val, w_ttl, w_drop, w_merge, w_full = {}, {}, {}, {}, {}
end

-- String states, by key index: fetched with one MGET for the whole call,
-- then kept up to date as groups write, so each check costs one call (its
-- SET). Keys are referred to by their index in KEYS (`ki`).
local states = {}
local function get(ki)
  local v = states[ki]
  if v == nil then
    v = call('GET', KEYS[ki])
    states[ki] = v
  end
  return v
end

-- A string state is four packed doubles: three fields and the time (us)
-- at which the key expires. A write that the current expiry covers keeps it
-- (an overwrite in place costs a fraction of SET PX); one that needs
-- longer sets twice what it needs, so a busy key refreshes its TTL about
-- once per replenishment time and an idle one lives at most twice that
-- long.
local function read(ki)
  local v = states[ki]
  if v == nil then v = get(ki) end
  if not v or #v ~= 32 then return nil end
  return unpack('<dddd', v)
end

local function store(ki, x, y, z, need, old_exp)
  local until_us = now + need
  local v
  if old_exp and old_exp >= until_us then
    -- Overwritten in place, keeping the expiry: SETRANGE answers an
    -- integer, where SET's status reply becomes a Lua table, and it copies
    -- into the existing string rather than replacing the value (together
    -- a fifth of Redis's instructions per decision; docs/benchmarks.md).
    v = pack('<dddd', x, y, z, old_exp)
    call('SETRANGE', KEYS[ki], '0', v)
  else
    local exp = until_us + need
    v = pack('<dddd', x, y, z, exp)
    -- The TTL as an integer string: Redis turns a Lua number into text
    -- with '%.17g', several times dearer.
    call('SET', KEYS[ki], v, 'PX', string.format('%d', ttl_ms(exp - now)))
  end
  states[ki] = v
end

-- Each family of algorithms is made on first use in a call: a script's
-- functions are made anew on every call, so a call makes only those of
-- the algorithms it decides. A maker returns, per algorithm, its decide,
-- write, refund and debit operations.

-- A string state's pending write (see `store`).
local function write_state(k, ki)
  store(ki, w_x[k], w_y[k], w_z[k], w_need[k], w_exp[k])
end

-- What an admission writes to a string state: at once for a group of one
-- (k = 0: its decision is the group's), else kept until the group's
-- decision.
local function admit(k, ki, x, y, z, need, exp)
  if k == 0 then return store(ki, x, y, z, need, exp) end
  w_x[k], w_y[k], w_z[k], w_need[k], w_exp[k] = x, y, z, need, exp
end

local function make_meter()

  -- Token bucket (4), leaky bucket (5), GCRA (6): state (last_us, level),
  -- the used capacity in units as of last (for GCRA the TAT is last + level).
  local function meter_state(lim, ki)
    local v = states[ki]
    if v == nil then v = get(ki) end
    if not v or #v ~= 32 then return nil, 0, 0, nil end
    local last, level, _, exp = unpack('<dddd', v)
    local used
    if lim.alg == 6 then
      used = (last - now) * lim.M + level
    elseif now > last then
      used = level - (now - last) * lim.M
    else
      used = level
    end
    if used < 0 then used = 0 end
    return last, level, used, exp
  end

  local function meter(lim, k, ki, cost)
    local last, _, used, exp = meter_state(lim, ki)
    local P = lim.P
    local cap = lim.L - lim.R * P
    local need = cost * P
    if used + need <= cap then
      local new = used + need
      -- With M = 1 (a unit is a microsecond) a duration of x units is
      -- (x, 0), as dur has it, without a call.
      local M = lim.M
      local r_us, r_ns = new, 0
      if M ~= 1 then r_us, r_ns = dur(lim, new, 0) end
      local d_us, d_ns = 0, 0
      if lim.queue == 1 then d_us, d_ns = dur(lim, used, 0) end
      if cost > 0 then
        local stamp = now
        if lim.alg ~= 6 and last and last > now then stamp = last end
        local drain = new
        if M ~= 1 then drain = ceil_div(new, M) end
        local need = stamp - now + drain
        if k == 0 and exp and exp >= now + need then
          -- admit's common case, inline: the state overwritten in place
          -- (see `store`). Inline, this and the quotient below save 6 % of
          -- Redis's instructions per decision (docs/benchmarks.md).
          local v = pack('<dddd', stamp, new, 0, exp)
          call('SETRANGE', KEYS[ki], '0', v)
          states[ki] = v
        else
          admit(k, ki, stamp, new, 0, need, exp)
        end
      end
      -- floor_div's quotient, inline: for integers 0 <= x < 2^53 and
      -- y >= 1 the division's rounding never reaches the next integer.
      local q = (cap - new) / P
      return 1, q - q % 1, r_us, r_ns, 0, 0, d_us, d_ns
    end
    local r_us, r_ns = dur(lim, used, 0)
    local t_us, t_ns = dur(lim, used + need - cap, 0)
    local free = cap - used
    if free < 0 then free = 0 end
    return 0, floor_div(free, P), r_us, r_ns, t_us, t_ns, 0, 0
  end

  -- Refunds: give back a committed cost, as closely as the state allows.
  local function refund_meter(lim, ki, cost)
    local last, _, used, exp = meter_state(lim, ki)
    if not last then return end
    -- A GCRA whose TAT is not ahead of now is full already: left as it is
    -- (as sluice-core does), so that a clock that then steps back sees it
    -- unchanged.
    if lim.alg == 6 and used <= 0 then return end
    used = used - cost * lim.P
    if used < 0 then used = 0 end
    local stamp = now
    if lim.alg ~= 6 and last > now then stamp = last end
    -- Written as a charge writes: the state moved to `stamp` must live at
    -- least until it is replenished from there (`store` keeps the TTL when
    -- it already covers that).
    store(ki, stamp, used, 0, stamp - now + ceil_div(used, lim.M), exp)
  end

  -- Debits: charge `amount` whatever is left, into debt up to `max_debt`
  -- units of cost beyond empty (sluice-core's `Algorithm::debit`). Each
  -- returns the cost charged.
  local function debit_meter(lim, ki, amount, max_debt)
    local last, _, used, exp = meter_state(lim, ki)
    local P = lim.P
    local charged = clamp(floor((lim.L + max_debt * P - used) / P), amount)
    if charged > 0 and lim.L + max_debt * P < 2 ^ 52 then
      -- Exact where the floor above may not be.
      charged = clamp(floor_div(lim.L + max_debt * P - used, P), amount)
    end
    if charged > 0 then
      local stamp = now
      if lim.alg ~= 6 and last and last > now then stamp = last end
      local new = used + charged * P
      store(ki, stamp, new, 0, stamp - now + ceil_div(new, lim.M), exp)
    end
    return charged
  end
  return { meter, write_state, refund_meter, debit_meter }
end

local function make_windows()

  -- The window holding time t, and the units elapsed in it.
  local function window_pos(lim, t)
    local q, r = divmod(t, lim.L2)
    local i2, e2 = divmod(r * lim.M2, lim.L2)
    return q * lim.M2 + i2, e2 * lim.g2
  end

  -- What is left of `count`, counted in one window, `windows` boundaries
  -- later: each pays off one burst, the rest (debt) carries on; with debt
  -- forgiven nothing does. At most a burst (no debt) is gone at the next.
  local function carried(lim, count, windows)
    if windows <= 0 then return count end
    if lim.F == 1 then return 0 end
    local c = count - windows * lim.B
    if c < 0 then c = 0 end
    return c
  end

  -- The window boundaries until `count` > 0 counted in one window is gone.
  local function to_clear(lim, count)
    if lim.F == 1 then return 1 end
    return ceil_div(count, lim.B)
  end


  -- Fixed window (1): state (window, count).
  -- The window, the units elapsed in it and its count at now (debt carried
  -- in included); a clock that stepped back stays at the stored window.
  local function fixed_view(lim, sw, sc, idx0, e0)
    if not sw or sc <= 0 or sw == idx0 then return idx0, e0, sc or 0 end
    if sw > idx0 then return sw, 0, sc end
    return idx0, e0, carried(lim, sc, idx0 - sw)
  end

  local function fixed(lim, k, ki, cost)
    local idx0, e0 = window_pos(lim, now)
    local sw, sc, _, exp = read(ki)
    local idx, e, count = fixed_view(lim, sw, sc, idx0, e0)
    if count < 0 then count = 0 end
    local B, L = lim.B - lim.R, lim.L
    local u_us, u_ns = dur(lim, L - e, 0)
    if count + cost <= B then
      local used = count + cost
      if cost > 0 then
        admit(k, ki, idx, used, 0, ceil_div((idx - idx0 + 1) * L - e0, lim.M), exp)
      end
      if used > 0 then
        return 1, B - used, u_us, u_ns, 0, 0, 0, 0
      end
      return 1, B - used, 0, 0, 0, 0, 0, 0
    end
    if count > lim.B then
      -- In debt: refused until the carried count leaves room for the cost.
      local r_us, r_ns = dur(lim, to_clear(lim, count) * L - e, 0)
      local fits = to_clear(lim, count + cost + lim.R - lim.B)
      local t_us, t_ns = dur(lim, fits * L - e, 0)
      return 0, 0, r_us, r_ns, t_us, t_ns, 0, 0
    end
    local free = B - count
    if free < 0 then free = 0 end
    return 0, free, u_us, u_ns, u_us, u_ns, 0, 0
  end

  -- Sliding window counter (3): state (window, previous, current).
  -- The window, the units elapsed in it, and its previous and current counts
  -- at now: rolling on, the current count becomes the previous one (at most
  -- a burst of it) and the rest (debt) carries on as the current count.
  local function sliding_view(lim, sw, sp, sc, idx0, e0)
    if not sw or (sp == 0 and sc == 0) then return idx0, e0, 0, 0 end
    if sw == idx0 then return idx0, e0, sp, sc end
    if sw > idx0 then return sw, 0, sp, sc end
    local rolled = idx0 - sw
    local prev = carried(lim, sc, rolled - 1)
    if prev > lim.B then prev = lim.B end
    return idx0, e0, prev, carried(lim, sc, rolled)
  end

  -- The first instant the estimate leaves room, `base` units after the start
  -- of this window, with `slack` and `div` as sluice-core has them, in its
  -- own units (g times ours): e' = len - min(floor(g slack / div), len).
  local function sliding_pass(lim, e, base, slack, div)
    if div < 1 then div = 1 end
    local qs, rs = divmod(slack, div)
    if qs >= lim.L then return dur(lim, base - e, 0) end
    local f = floor_div(lim.g * rs, div)
    local y = base + lim.L - e - qs
    if y <= 0 then return 0, 0 end
    return dur(lim, y - 1, lim.g - f)
  end

  local function sliding(lim, k, ki, cost)
    local idx0, e0 = window_pos(lim, now)
    local sw, sp, sc, exp = read(ki)
    local idx, e, prev, cur = sliding_view(lim, sw, sp, sc, idx0, e0)
    local B, L = lim.B - lim.R, lim.L
    local capacity = B * L
    local used = cur + cost
    local weighted = prev * (L - e) + used * L
    if weighted <= capacity then
      local r_us, r_ns = 0, 0
      if used > 0 then
        r_us, r_ns = dur(lim, 2 * L - e, 0)
      elseif prev > 0 then
        r_us, r_ns = dur(lim, L - e, 0)
      end
      if cost > 0 then
        admit(k, ki, idx, prev, used, ceil_div((idx - idx0 + 2) * L - e0, lim.M), exp)
      end
      return 1, floor_div(capacity - weighted, L), r_us, r_ns, 0, 0, 0, 0
    end
    local t_us, t_ns
    if cur + cost <= B then
      t_us, t_ns = sliding_pass(lim, e, 0, (B - cur - cost) * L, prev)
    elseif cur <= lim.B then
      t_us, t_ns = sliding_pass(lim, e, L, (B - cost) * L, cur)
    else
      -- In debt: in the first later window whose carried count leaves room.
      local j = to_clear(lim, cur + cost + lim.R - lim.B)
      local pj = carried(lim, cur, j - 1)
      if pj > lim.B then pj = lim.B end
      local cj = carried(lim, cur, j)
      t_us, t_ns = sliding_pass(lim, e, j * L, (B - cj - cost) * L, pj)
    end
    if cost > B then
      -- Above the burst less the reserve: it never fits; answer the time
      -- until both windows have passed.
      t_us, t_ns = dur(lim, 2 * L - e, 0)
    end
    if t_us == 0 and t_ns == 0 then t_ns = 1 end
    local free = capacity - prev * (L - e) - cur * L
    if free < 0 then free = 0 end
    local r_us, r_ns = 0, 0
    if cur > 0 then
      r_us, r_ns = dur(lim, (to_clear(lim, cur) + 1) * L - e, 0)
    elseif prev > 0 then
      r_us, r_ns = dur(lim, L - e, 0)
    end
    return 0, floor_div(free, L), r_us, r_ns, t_us, t_ns, 0, 0
  end

  local function refund_fixed(lim, ki, cost)
    local idx = window_pos(lim, now)
    local sw, sc, _, exp = read(ki)
    if not sw then return end
    if sw < idx then
      -- Only debt carried into this window is left to give back; the state
      -- moves to this window even for nothing given back, as sluice-core's.
      sc = carried(lim, sc, idx - sw)
      if sc <= 0 then return end
      sw = idx
    elseif cost <= 0 then
      return
    end
    sc = sc - cost
    if sc < 0 then sc = 0 end
    states[ki] = pack('<dddd', sw, sc, 0, exp)
    call('SET', KEYS[ki], states[ki], 'KEEPTTL')
  end

  local function refund_sliding(lim, ki, cost)
    local idx = window_pos(lim, now)
    local sw, sp, sc, exp = read(ki)
    if not sw then return end
    -- While the stored window weighs, or debt carried from it does.
    if sw + 1 < idx and carried(lim, sc, idx - sw - 1) <= 0 then return end
    sc = sc - cost
    if sc < 0 then sc = 0 end
    states[ki] = pack('<dddd', sw, sp, sc, exp)
    call('SET', KEYS[ki], states[ki], 'KEEPTTL')
  end

  local MAX_COUNT = 4294967295

  local function debit_fixed(lim, ki, amount, max_debt)
    local idx0, e0 = window_pos(lim, now)
    local sw, sc, _, exp = read(ki)
    local idx, _, count = fixed_view(lim, sw, sc, idx0, e0)
    local charged = clamp(clamp(lim.B + max_debt, MAX_COUNT) - count, amount)
    if charged > 0 then
      local c = count + charged
      local need = ceil_div((idx - idx0 + to_clear(lim, c)) * lim.L - e0, lim.M)
      store(ki, idx, c, 0, need, exp)
    end
    return charged
  end

  local function debit_sliding(lim, ki, amount, max_debt)
    local idx0, e0 = window_pos(lim, now)
    local sw, sp, sc, exp = read(ki)
    local idx, e, prev, cur = sliding_view(lim, sw, sp, sc, idx0, e0)
    local L = lim.L
    -- estimate + x <= B + max_debt, for whole x: x <= B + max_debt - ceil(estimate).
    local estimate = ceil_div(prev * (L - e) + cur * L, L)
    local charged = clamp(clamp(lim.B + max_debt - estimate, MAX_COUNT - cur), amount)
    if charged > 0 then
      local c = cur + charged
      local need = ceil_div((idx - idx0 + to_clear(lim, c) + 1) * L - e0, lim.M)
      store(ki, idx, prev, c, need, exp)
    end
    return charged
  end
  return {
    { fixed, write_state, refund_fixed, debit_fixed },
    { sliding, write_state, refund_sliding, debit_sliding },
  }
end

local function make_log()

  -- Sliding log (2): a list of (at_us, cost), oldest first, at most B entries,
  -- after its debt ('<d') while it has some.
  local function read_log(ki)
    local raw = call('LRANGE', KEYS[ki], 0, -1)
    local ats, cs = {}, {}
    local debt, from = 0, 1
    if #raw > 0 and #raw[1] == 8 then
      debt = unpack('<d', raw[1])
      from = 2
    end
    local n = 0
    for j = from, #raw do
      n = n + 1
      ats[n], cs[n] = unpack('<dd', raw[j])
    end
    return ats, cs, n, debt
  end

  -- The log with the debt due by t logged (sluice-core's log_debt.rs): every
  -- entry leaving the window is logged again when it leaves (a window, a
  -- whole number of microseconds, after its time), for as much of its cost
  -- as there is debt. t = math.huge: once all of the debt is logged. Returns
  -- new entries and the debt left.
  local function renew(lim, ats, cs, n, debt, t)
    if debt <= 0 or n == 0 then return ats, cs, debt end
    local period = lim.L / lim.M
    if t < ats[1] + period then return ats, cs, debt end
    if lim.F == 1 then return ats, cs, 0 end
    local total = 0
    for j = 1, n do total = total + cs[j] end
    if total <= 0 then return ats, cs, debt end
    local full, extra
    local rounds = math.huge
    if t ~= math.huge then rounds = floor_div(t - ats[1], period) end
    local due = 0
    for j = 1, n do
      if ats[j] + rounds * period > t then break end
      due = due + cs[j]
    end
    local needed = (rounds - 1) * total + due
    if debt >= needed then
      debt, full, extra = debt - needed, rounds - 1, due
    else
      full, extra = divmod(debt, total)
      debt = 0
    end
    -- Each entry is logged again `full` times, the oldest once more for
    -- `extra` of their cost; those are then the newest.
    local left, moved = extra, 0
    local mats, mcs = {}, {}
    for j = 1, n do
      local times, c = full, cs[j]
      if left > 0 then
        times = times + 1
        moved = moved + 1
        if c > left then c = left end
        left = left - c
      end
      mats[j], mcs[j] = ats[j] + times * period, c
    end
    local nats, ncs = {}, {}
    for j = 1, n do
      local from = (j + moved - 1) % n + 1
      nats[j], ncs[j] = mats[from], mcs[from]
    end
    return nats, ncs, debt
  end

  -- The list holding `vals` (packed), living `ttl` ms.
  local function put_log(ki, vals, ttl)
    call('DEL', KEYS[ki])
    if #vals == 0 then return end
    for from = 1, #vals, 1000 do
      call('RPUSH', KEYS[ki], unpack_list(vals, from, math.min(from + 999, #vals)))
    end
    call('PEXPIRE', KEYS[ki], ttl)
  end

  -- An admission's write: the new entry `val` (merged into the newest
  -- entry if `merge`) after dropping the `drop` oldest, or the whole list
  -- `full` where it is written again; the list lives `ttl` ms.
  local function put_entry(ki, val, ttl, drop, merge, full)
    if full then return put_log(ki, full, ttl) end
    if drop > 0 then call('LTRIM', KEYS[ki], drop, -1) end
    if merge then call('LSET', KEYS[ki], -1, val) else call('RPUSH', KEYS[ki], val) end
    call('PEXPIRE', KEYS[ki], ttl)
  end

  -- Writes a log in full, its debt first: it lives until its newest entry,
  -- once the debt is all logged, has left the window.
  local function rewrite_log(lim, ki, ats, cs, n, debt)
    if n == 0 then debt = 0 end
    local vals = {}
    if debt > 0 then vals[1] = pack('<d', debt) end
    for j = 1, n do vals[#vals + 1] = pack('<dd', ats[j], cs[j]) end
    local newest = ats[n]
    if debt > 0 then
      local pats = renew(lim, ats, cs, n, debt, math.huge)
      newest = pats[n]
    end
    if newest then newest = newest - now + ceil_div(lim.L, lim.M) end
    put_log(ki, vals, ttl_ms(newest or 0))
  end

  -- A log still in debt at t (renewed to t): refused, nothing remaining; the
  -- retry waits until the debt is all logged, then until the cost fits.
  local function log_in_debt(lim, ats, cs, n, debt, t, cost)
    local L, M = lim.L, lim.M
    local pats, pcs, pdebt = renew(lim, ats, cs, n, debt, math.huge)
    local far = 2 ^ 62
    local paid, cleared = far, far
    if pdebt <= 0 and lim.F == 1 then
      paid, cleared = (pats[1] - t) * M + L, (pats[n] - t) * M + L
    elseif pdebt <= 0 then
      paid, cleared = (pats[n] - t) * M, (pats[n] - t) * M + L
    end
    local used = 0
    for j = 1, n do
      if (t - pats[j]) * M < L then used = used + pcs[j] end
    end
    local to_free = used + cost - (lim.B - lim.R)
    local pass = 0
    for j = 1, n do
      if to_free <= 0 then break end
      if (t - pats[j]) * M < L then
        pass = (pats[j] - t) * M + L
        to_free = to_free - pcs[j]
      end
    end
    if paid > pass then pass = paid end
    local r_us, r_ns = dur(lim, cleared, 0)
    local t_us, t_ns = dur(lim, pass, 0)
    return 0, 0, r_us, r_ns, t_us, t_ns, 0, 0
  end

  local function log(lim, k, ki, cost)
    local ats, cs, n, debt = read_log(ki)
    local t = now
    if n > 0 and ats[n] > t then t = ats[n] end
    local renewed = debt > 0
    if renewed then
      ats, cs, debt = renew(lim, ats, cs, n, debt, t)
      if debt > 0 then return log_in_debt(lim, ats, cs, n, debt, t, cost) end
    end
    local B, L, M = lim.B - lim.R, lim.L, lim.M
    local first = n + 1
    for j = 1, n do
      if (t - ats[j]) * M < L then
        first = j
        break
      end
    end
    local used = 0
    for j = first, n do used = used + cs[j] end
    local newest = 0
    if first <= n then newest = L - (t - ats[n]) * M end
    if used + cost <= B then
      local r_us, r_ns
      if cost > 0 then
        r_us, r_ns = dur(lim, L, 0)
        local merge = n > 0 and ats[n] == t
        local val
        if merge then
          val = pack('<dd', t, cs[n] + cost)
        else
          val = pack('<dd', t, cost)
        end
        local full
        if renewed then
          -- Its debt is all logged: the list is written again, without it.
          full = {}
          for j = first, n do full[#full + 1] = pack('<dd', ats[j], cs[j]) end
          if merge then full[#full] = val else full[#full + 1] = val end
        end
        local ttl = ttl_ms(t - now + ceil_div(L, M))
        if k == 0 then
          put_entry(ki, val, ttl, first - 1, merge, full)
        else
          w_val[k], w_ttl[k], w_drop[k], w_merge[k], w_full[k] = val, ttl, first - 1, merge, full
        end
      else
        r_us, r_ns = dur(lim, newest, 0)
      end
      return 1, B - used - cost, r_us, r_ns, 0, 0, 0, 0
    end
    local to_free = used + cost - B
    local pass = 0
    for j = first, n do
      pass = L - (t - ats[j]) * M
      to_free = to_free - cs[j]
      if to_free <= 0 then break end
    end
    -- Above the burst less the reserve: it never fits; answer a window.
    if to_free > 0 then pass = L end
    local r_us, r_ns = dur(lim, newest, 0)
    local t_us, t_ns = dur(lim, pass, 0)
    local free = B - used
    if free < 0 then free = 0 end
    return 0, free, r_us, r_ns, t_us, t_ns, 0, 0
  end

  local function refund_log(lim, ki, cost)
    local ats, cs, n, debt = read_log(ki)
    if debt > 0 then
      -- From the debt first, then the newest entries.
      local t = now
      if ats[n] and ats[n] > t then t = ats[n] end
      ats, cs, debt = renew(lim, ats, cs, n, debt, t)
      local from_debt = cost
      if from_debt > debt then from_debt = debt end
      debt = debt - from_debt
      local left = clamp(cost - from_debt, lim.B)
      while left > 0 and n > 0 do
        if cs[n] > left then
          cs[n] = cs[n] - left
          left = 0
        else
          left = left - cs[n]
          ats[n], cs[n] = nil, nil
          n = n - 1
        end
      end
      rewrite_log(lim, ki, ats, cs, n, debt)
      return
    end
    local left = clamp(cost, lim.B)
    local j = n
    while j >= 1 and left > 0 do
      if cs[j] <= left then
        left = left - cs[j]
        call('RPOP', KEYS[ki])
      else
        call('LSET', KEYS[ki], j - 1, pack('<dd', ats[j], cs[j] - left))
        left = 0
      end
      j = j - 1
    end
  end

  local function debit_log(lim, ki, amount, max_debt)
    if amount <= 0 then return 0 end
    local ats, cs, n, debt = read_log(ki)
    local had_debt = debt > 0
    local t = now
    if n > 0 and ats[n] > t then t = ats[n] end
    ats, cs, debt = renew(lim, ats, cs, n, debt, t)
    -- Only what weighs stays: it is what the debt is logged behind.
    local kats, kcs, m, logged = {}, {}, 0, 0
    for j = 1, n do
      if (t - ats[j]) * lim.M < lim.L then
        m = m + 1
        kats[m], kcs[m] = ats[j], cs[j]
        logged = logged + cs[j]
      end
    end
    local used = logged + debt
    local charged = clamp(lim.B + max_debt - used, amount)
    local now_logged = clamp(lim.B - used, charged)
    if now_logged > 0 then
      if m > 0 and kats[m] == t then
        kcs[m] = kcs[m] + now_logged
      else
        m = m + 1
        kats[m], kcs[m] = t, now_logged
      end
    end
    debt = debt + charged - now_logged
    if charged > 0 or had_debt then rewrite_log(lim, ki, kats, kcs, m, debt) end
    return charged
  end

  local function write_log(k, ki)
    put_entry(ki, w_val[k], w_ttl[k], w_drop[k], w_merge[k], w_full[k])
  end
  return { log, write_log, refund_log, debit_log }
end

local function make_slots()

  -- Concurrency (7): the entries of a slots state, live (expiry > now) ones
  -- only; the slots they hold; and the caller's index among them (or nil).
  local function slots_read(lim, ki)
    local v = get(ki)
    local ids, held, exps, n, total, mine = {}, {}, {}, 0, 0, nil
    if not v or #v % 24 ~= 0 then return ids, held, exps, 0, 0, nil end
    local pos = 1
    while pos <= #v do
      local id, h, exp
      id, h, exp, pos = unpack('<ddd', v, pos)
      if exp > now and h > 0 then
        n = n + 1
        ids[n], held[n], exps[n] = id, h, exp
        total = total + h
        if id == lim.L2 then mine = n end
      end
    end
    return ids, held, exps, n, total, mine
  end

  -- The state of `n` entries, packed, and how long it must live (ms); nil
  -- when no entry holds a slot.
  local function slots_pack(ids, held, exps, n)
    local parts, latest = {}, 0
    for j = 1, n do
      if held[j] > 0 then
        parts[#parts + 1] = pack('<ddd', ids[j], held[j], exps[j])
        if exps[j] > latest then latest = exps[j] end
      end
    end
    if #parts == 0 then return nil, 0 end
    return table.concat(parts), ttl_ms(latest - now)
  end

  local function slots_put(ki, v, ttl)
    if v then
      call('SET', KEYS[ki], v, 'PX', ttl)
    else
      call('DEL', KEYS[ki])
    end
    states[ki] = v or false
  end

  -- The caller's entry gains `cost` slots (created if need be), leased anew.
  local function slots_take(lim, ids, held, exps, n, mine, cost)
    if not mine then
      n = n + 1
      mine = n
      ids[n], held[n] = lim.L2, 0
    end
    held[mine] = held[mine] + cost
    -- A lease is never shortened (a test clock may step back).
    if not exps[mine] or exps[mine] < now + lim.L then exps[mine] = now + lim.L end
    return slots_pack(ids, held, exps, n)
  end

  local function slots(lim, k, ki, cost)
    local ids, held, exps, n, total, mine = slots_read(lim, ki)
    local B = lim.B - lim.R
    local r_us, r_ns = 0, 0
    if total + cost <= B then
      if total + cost > 0 then r_us, r_ns = lim.P, lim.g end
      if cost > 0 then
        local v, ttl = slots_take(lim, ids, held, exps, n, mine, cost)
        if k == 0 then slots_put(ki, v, ttl) else w_val[k], w_ttl[k] = v, ttl end
      elseif mine and mode == 'c' then
        slots_put(ki, slots_take(lim, ids, held, exps, n, mine, 0))
      end
      return 1, B - total - cost, r_us, r_ns, 0, 0, 0, 0
    end
    if cost == 0 and mine and mode == 'c' then
      slots_put(ki, slots_take(lim, ids, held, exps, n, mine, 0))
    end
    if total > 0 then r_us, r_ns = lim.P, lim.g end
    local t_us, t_ns = lim.P, lim.g
    if t_us >= 1000000 then t_us, t_ns = 1000000, 0 end
    local free = B - total
    if free < 0 then free = 0 end
    return 0, free, r_us, r_ns, t_us, t_ns, 0, 0
  end

  -- Holder ids at least this are leases (below it, instances).
  local LEASES = 4503599627370496

  -- A release: the cost comes off the caller's entry first; what an
  -- instance does not hold comes off the other live entries, the one whose
  -- lease ends soonest first (ties: the first in the state), none below 0.
  -- A lease frees nothing beyond its own entry.
  local function refund_slots(lim, ki, cost)
    local ids, held, exps, n, _, mine = slots_read(lim, ki)
    if n == 0 then return end
    local left = cost
    if mine then
      local c = clamp(left, held[mine])
      held[mine], left = held[mine] - c, left - c
    end
    -- A lease frees its own slots only.
    if lim.L2 >= LEASES then left = 0 end
    while left > 0 do
      local pick = nil
      for j = 1, n do
        if held[j] > 0 and (not pick or exps[j] < exps[pick]) then pick = j end
      end
      if not pick then break end
      local c = clamp(left, held[pick])
      held[pick], left = held[pick] - c, left - c
    end
    slots_put(ki, slots_pack(ids, held, exps, n))
  end

  local function debit_slots(lim, ki, amount, max_debt)
    local ids, held, exps, n, total, mine = slots_read(lim, ki)
    local charged = clamp(lim.B + max_debt - total, amount)
    if charged > 0 then
      slots_put(ki, slots_take(lim, ids, held, exps, n, mine, charged))
    end
    return charged
  end

  local function write_slots(k, ki)
    slots_put(ki, w_val[k], w_ttl[k])
  end
  return { slots, write_slots, refund_slots, debit_slots }
end

-- Per algorithm, its operations once made.
local ops = {}
local function make(alg)
  if not alg or ops[alg] then return ops[alg] ~= nil end
  if alg == 1 or alg == 3 then
    local w = make_windows()
    ops[1], ops[3] = w[1], w[2]
  elseif alg >= 4 and alg <= 6 then
    local m = make_meter()
    ops[4], ops[5], ops[6] = m, m, m
  elseif alg == 2 then
    ops[2] = make_log()
  elseif alg == 7 then
    ops[7] = make_slots()
  end
  return ops[alg] ~= nil
end


-- Check k of a group of several: its decision, kept until the group's.
local function decide(k, lim, ki, cost)
  w_val[k] = nil
  w_need[k] = nil
  w_full[k] = nil
  d_ok[k], d_rem[k], d_rus[k], d_rns[k], d_tus[k], d_tns[k], d_dus[k], d_dns[k] =
    ops[lim.alg][1](lim, k, ki, cost)
end

-- Parse the limits and the checks before touching anything.
local lims = {}
local lp = ARGV[3]
if not lp or #lp % 96 ~= 0 then
  return redis.error_reply('ERR sluice: malformed arguments')
end
local lpos = 1
for j = 1, #lp / 96 do
  local alg, B, P, M, g, a, L, L2, M2, queue, R, F
  alg, B, P, M, g, a, L, L2, M2, queue, R, F, lpos = unpack('<dddddddddddd', lp, lpos)
  if R < 0 or R > B or (F ~= 0 and F ~= 1) or not make(alg) then
    return redis.error_reply('ERR sluice: malformed arguments')
  end
  lims[j] = {
    alg = alg, B = B, P = P, M = M, g = g, a = a, L = L, L2 = L2, M2 = M2,
    queue = queue, R = R, F = F, g2 = M / M2,
  }
end

-- The checks: one packed record per check, '<BHHd': 1 if it opens a group,
-- its limit (1-based), its key (1-based), its cost; unpacked at most 1000
-- records per struct.unpack. Check c's fields are recs[4c - 3 .. 4c].
local packed = ARGV[4]
if not packed or #packed % 13 ~= 0 then
  return redis.error_reply('ERR sluice: malformed arguments')
end
local n = #packed / 13
local recs = {}
local pos = 1
for from = 1, n, 1000 do
  local m = math.min(n - from + 1, 1000)
  local part = { unpack('<' .. string.rep('BHHd', m), packed, pos) }
  pos = part[4 * m + 1]
  if from == 1 then
    recs = part
  else
    for j = 1, 4 * m do recs[4 * (from - 1) + j] = part[j] end
  end
end
-- A refund or a debit may be larger than the burst (debt).
local capped = mode == 'c' or mode == 'd'
local nk = #KEYS
for b = 0, 4 * n - 4, 4 do
  local lim, ki, cost = lims[recs[b + 2]], recs[b + 3], recs[b + 4]
  if not lim or ki < 1 or ki > nk or cost < 0 then
    return redis.error_reply('ERR sluice: malformed arguments')
  end
  if capped and cost > lim.B then
    return redis.error_reply('ERR sluice: cost exceeds capacity')
  end
end

-- Debit mode charges each check's cost and answers what it charged.
if mode == 'b' then
  local max_debt = tonumber(ARGV[5])
  if not max_debt or max_debt < 0 then
    return redis.error_reply('ERR sluice: malformed arguments')
  end
  local charged = {}
  for c = 1, n do
    local b = 4 * c - 4
    local lim = lims[recs[b + 2]]
    charged[c] = ops[lim.alg][4](lim, recs[b + 3], recs[b + 4], max_debt)
  end
  return charged
end

-- Refund mode gives the costs back, then answers peeks (cost 0): the
-- state as it now stands.
if mode == 'r' then
  for c = 1, n do
    local b = 4 * c - 4
    local lim = lims[recs[b + 2]]
    -- Nothing given back changes nothing, but for debt: a fixed window
    -- moves debt carried into this window, and a log logs debt due, as
    -- sluice-core's refunds do (a clock that steps back then sees it).
    if recs[b + 4] > 0 or lim.alg <= 2 then ops[lim.alg][3](lim, recs[b + 3], recs[b + 4]) end
    recs[b + 4] = 0
  end
end

-- Prefetch every key's string state (lists answer false to MGET and are
-- read with LRANGE).
if n > 0 and nk > 0 then
  if nk <= 1000 then
    states = call('MGET', unpack_list(KEYS))
  else
    for from = 1, nk, 1000 do
      local to = math.min(from + 999, nk)
      local vs = call('MGET', unpack_list(KEYS, from, to))
      for j = from, to do states[j] = vs[j - from + 1] end
    end
  end
end

local out = {}
local o = 0

local function push_dur(us, ns)
  if us < 9000000000000 then
    o = o + 1
    out[o] = us * 1000 + ns
  else
    out[o + 1] = -(us + 1)
    out[o + 2] = ns
    o = o + 2
  end
end

local single = mode == 'c'
-- The limit of the last group of one and its decide: consecutive checks
-- of one limit (the usual call) look them up once.
local li_prev, lim, decide1
local first = 1
while first <= n do
  -- The group: checks first .. last (the next one opens a group).
  local last = first
  while last < n and recs[4 * last + 1] ~= 1 do last = last + 1 end
  if first == last and single then
    -- A group of one check (the common case): its own decision is the
    -- group's, so it writes as it is decided (k = 0) and nothing needs
    -- keeping for a second pass.
    local b = 4 * first - 4
    local li = recs[b + 2]
    if li ~= li_prev then
      li_prev = li
      lim = lims[li]
      decide1 = ops[lim.alg][1]
    end
    local ok, rem, rus, rns, tus, tns, dus, dns = decide1(lim, 0, recs[b + 3], recs[b + 4])
    out[o + 1] = rem * 2 + ok
    if rus < 9000000000000 then
      -- push_dur's common case, inline: a Lua call here was 2.6 % of
      -- Redis's instructions per decision (docs/benchmarks.md).
      out[o + 2] = rus * 1000 + rns
      o = o + 2
    else
      o = o + 1
      push_dur(rus, rns)
    end
    if ok == 0 then push_dur(tus, tns) end
    if lim.queue == 1 then push_dur(dus, dns) end
  else
    if not d_ok then group_tables() end
    local ok = true
    for c = first, last do
      local b = 4 * c - 4
      local k = c - first + 1
      decide(k, lims[recs[b + 2]], recs[b + 3], recs[b + 4])
      if d_ok[k] == 0 then ok = false end
    end
    local group_ok = ok
    if mode == 'd' then ok = false end
    for c = first, last do
      local b = 4 * c - 4
      local k, lim, ki = c - first + 1, lims[recs[b + 2]], recs[b + 3]
      if ok then
        if w_val[k] or w_need[k] then ops[lim.alg][2](k, ki) end
      elseif d_ok[k] == 1 then
        -- Refused: nothing is written; the limits that would have allowed
        -- it report their state as it stands.
        decide(k, lim, ki, 0)
      end
    end
    if last > first then
      o = o + 1
      if group_ok then out[o] = 1 else out[o] = 0 end
    end
    for c = first, last do
      local k, lim = c - first + 1, lims[recs[4 * c - 2]]
      o = o + 1
      out[o] = d_rem[k] * 2 + d_ok[k]
      push_dur(d_rus[k], d_rns[k])
      if d_ok[k] == 0 then push_dur(d_tus[k], d_tns[k]) end
      if lim.queue == 1 then push_dur(d_dus[k], d_dns[k]) end
    end
  end
  first = last + 1
end
return out
