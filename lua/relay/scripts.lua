--- The server-side Redis scripts: every invocation-state transition is one of
-- these, run atomically with Redis TIME as the only clock (docs/lifecycle.md has
-- the transition table). Each does all its reads and checks first and its
-- writes last, because Redis scripts have no rollback.
--
-- Markers (field `<app>/<handler>` of relay:<stream>:inv:<id>):
--   running:<attempt>:<token>:<lease-until-ms>   waiting:<attempt>:<next-attempt-at-ms>
--   succeeded:<attempt>:<token>   exhausted:<attempt>:<token>   exhausted:<attempt>:<token>:dlq
-- Reserved fields: `~retained` (terminal retention), `-/-` (dead letter without invocation).
--
-- Trusted entries: the reserved stream fields (relay_target, relay_schedule,
-- relay_replay_of, relay_occurrence) count only on entries Relay's own
-- publishers wrote. Those XADD through xadd_trusted, which records the new
-- id in relay:<stream>:trusted in the same script, so no reader can see the
-- entry without its record; producers, allowed only XADD on the stream,
-- cannot write that key (README, Redis ACLs).
local rfc3339 = require("relay.rfc3339")

local _M = {}

-- Shared helpers, prepended to every script; rfc3339(ms) is relay.rfc3339's
-- writer, so a dead letter's timestamp reads like every other.
local PRELUDE = rfc3339.SOURCE .. [==[
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function parse_marker(marker)
    local parts = {}
    for part in string.gmatch(marker, '[^:]+') do
        parts[#parts + 1] = part
    end
    return parts
end

local function is_terminal(marker)
    if not marker then
        return false
    end
    if string.sub(marker, 1, 10) == 'succeeded:' then
        return true
    end
    return string.sub(marker, 1, 10) == 'exhausted:' and string.sub(marker, -4) == ':dlq'
end

local function deliveries(stream, group, id)
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    if p[1] then
        return p[1][4]
    end
    return 0
end

local function retain(inv, retention_ms)
    redis.call('HSET', inv, '~retained', '1')
    redis.call('PEXPIRE', inv, retention_ms)
end

-- The `event` field of a stream entry ('' when the entry or field is gone).
local function stream_event(stream, id)
    local entry = redis.call('XRANGE', stream, id, id)[1]
    if entry then
        for i = 1, #entry[2], 2 do
            if entry[2][i] == 'event' then
                return entry[2][i + 1]
            end
        end
    end
    return ''
end

-- Writes one DLQ entry. ctx fields come from ARGV pairs; the script adds
-- reason, handler_attempts, deliveries and timestamp. The event is read
-- from the stream here unless ctx carries one (a schedule's payload), so
-- callers never ship event bytes on the hot path just in case.
local function write_dlq(dlq, ctx, reason, attempts, now)
    local fields = {}
    for k, v in pairs(ctx) do
        if k ~= 'group' and k ~= 'original_stream' and k ~= 'original_id' and k ~= 'app' and k ~= 'handler'
            and k ~= 'event' and k ~= 'consumer' then
            fields[#fields + 1] = k
            fields[#fields + 1] = v
        end
    end
    return redis.call('XADD', dlq, '*',
        'original_stream', ctx.original_stream, 'original_id', ctx.original_id,
        'group', ctx.group, 'consumer', ctx.consumer,
        'event', ctx.event or stream_event(ctx.original_stream, ctx.original_id),
        'reason', reason, 'app', ctx.app, 'handler', ctx.handler,
        'deliveries', tostring(deliveries(ctx.original_stream, ctx.group, ctx.original_id)),
        'handler_attempts', tostring(attempts), 'timestamp', rfc3339(now), unpack(fields))
end

local function pairs_from(first)
    local t = {}
    for i = first, #ARGV - 1, 2 do
        t[ARGV[i]] = ARGV[i + 1]
    end
    return t
end

-- The fence of every outcome write: the invocation is still running this
-- attempt under this token, and the message state is not retained.
local function holds_claim(inv, field, attempt, token)
    if redis.call('HEXISTS', inv, '~retained') == 1 then
        return false
    end
    local marker = redis.call('HGET', inv, field)
    if not marker then
        return false
    end
    local p = parse_marker(marker)
    return p[1] == 'running' and p[2] == attempt and p[3] == token
end

local function instance_alive(prefix, token)
    local instance = string.match(token, '^(.*)%.[^.]*$')
    return instance ~= nil and redis.call('EXISTS', prefix .. instance) == 1
end

-- XADDs an entry Relay itself writes and records its id as trusted. The
-- score is the id's milliseconds, so forgetting gone entries is one range
-- removal.
local function xadd_trusted(stream, trusted, fields)
    local id = redis.call('XADD', stream, '*', unpack(fields))
    redis.call('ZADD', trusted, tonumber(string.match(id, '^(%d+)')), id)
    return id
end

local function backoff(ladder_csv, failed)
    local ladder = {}
    for step in string.gmatch(ladder_csv, '[^,]+') do
        ladder[#ladder + 1] = tonumber(step)
    end
    return ladder[math.min(failed, #ladder)]
end
]==]


--- TryStart. KEYS: inv, dlq, stream (read for a dead letter's event). ARGV: field, token, lease_ms, max_attempts,
-- instance_prefix, backoff_csv, then DLQ context pairs.
-- Returns {"start", attempt, previous_marker} | {"skip", why, wait_ms[, lost attempt]} |
-- {"exhausted", attempt} (a lost last attempt, dead-lettered now).
_M.try_start = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, token, lease_ms, max_attempts = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local instance_prefix, ladder = ARGV[5], ARGV[6]
if redis.call('HEXISTS', inv, '~retained') == 1 then
    return {'skip', 'retained', 0}
end
local now = now_ms()
local marker = redis.call('HGET', inv, field)
local attempt = 0
if marker then
    local p = parse_marker(marker)
    attempt = tonumber(p[2])
    if p[1] == 'succeeded' or (p[1] == 'exhausted' and p[4] == 'dlq') then
        return {'skip', 'terminal', 0}
    end
    if p[1] == 'exhausted' then
        write_dlq(dlq, pairs_from(7), 'exhausted', attempt, now)
        redis.call('HSET', inv, field, marker .. ':dlq')
        return {'exhausted', attempt}
    end
    if p[1] == 'running' then
        if now < tonumber(p[4]) and instance_alive(instance_prefix, p[3]) then
            return {'skip', 'running', tonumber(p[4]) - now}
        end
        if attempt >= max_attempts then
            local ctx = pairs_from(7)
            write_dlq(dlq, ctx, 'worker lost during attempt', attempt, now)
            redis.call('HSET', inv, field, 'exhausted:' .. attempt .. ':' .. p[3] .. ':dlq')
            return {'exhausted', attempt}
        end
        local wait = backoff(ladder, attempt)
        redis.call('HSET', inv, field, 'waiting:' .. attempt .. ':' .. (now + wait))
        return {'skip', 'lost', wait, attempt}
    end
    if p[1] == 'waiting' and now < tonumber(p[3]) then
        return {'skip', 'waiting', tonumber(p[3]) - now}
    end
end
attempt = attempt + 1
redis.call('HSET', inv, field, 'running:' .. attempt .. ':' .. token .. ':' .. (now + lease_ms))
return {'start', attempt, marker or ''}
]==]


--- Success. KEYS: inv. ARGV: field, token, attempt.
-- Returns "succeeded" or "stale" (the attempt no longer holds the token).
_M.succeed = PRELUDE .. [==[
local inv, field, token, attempt = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if not holds_claim(inv, field, attempt, token) then
    return 'stale'
end
redis.call('HSET', inv, field, 'succeeded:' .. attempt .. ':' .. token)
return 'succeeded'
]==]


--- Failure. KEYS: inv, dlq, stream. ARGV: field, token, attempt, max_attempts,
-- backoff_csv, reason, then DLQ context pairs.
-- Returns {"waiting", wait_ms} | {"exhausted", dlq_id} | {"stale"}.
_M.fail = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, token, attempt, max_attempts = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local ladder, reason = ARGV[5], ARGV[6]
if not holds_claim(inv, field, attempt, token) then
    return {'stale'}
end
local now = now_ms()
local n = tonumber(attempt)
if n >= max_attempts then
    local id = write_dlq(dlq, pairs_from(7), reason, n, now)
    redis.call('HSET', inv, field, 'exhausted:' .. attempt .. ':' .. token .. ':dlq')
    return {'exhausted', id}
end
local wait = backoff(ladder, n)
redis.call('HSET', inv, field, 'waiting:' .. attempt .. ':' .. (now + wait))
return {'waiting', wait}
]==]


--- Releases a claim the host could not act on (the container never
-- started): the attempt is not charged. KEYS: inv. ARGV: field, token,
-- attempt, previous marker ("" = none). Returns "released" or "stale".
_M.release = PRELUDE .. [==[
local inv, field, token, attempt, previous = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not holds_claim(inv, field, attempt, token) then
    return 'stale'
end
if previous == '' then
    redis.call('HDEL', inv, field)
else
    redis.call('HSET', inv, field, previous)
end
return 'released'
]==]


--- Dead-letters a recorded invocation at once (its handler was removed).
-- KEYS: inv, dlq, stream. ARGV: field, reason, instance_prefix, then DLQ pairs.
-- Returns "exhausted", "terminal" or "running".
_M.exhaust = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, reason, instance_prefix = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HEXISTS', inv, '~retained') == 1 then
    return 'terminal'
end
local marker = redis.call('HGET', inv, field)
if not marker or is_terminal(marker) then
    return 'terminal'
end
local p = parse_marker(marker)
local now = now_ms()
if p[1] == 'running' and now < tonumber(p[4]) and instance_alive(instance_prefix, p[3]) then
    return 'running'
end
local token = p[1] == 'waiting' and 'removed' or p[3]
write_dlq(dlq, pairs_from(4), reason, tonumber(p[2]), now)
redis.call('HSET', inv, field, 'exhausted:' .. p[2] .. ':' .. token .. ':dlq')
return 'exhausted'
]==]


--- Acknowledges a message once every invocation is terminal, then retains
-- its state. KEYS: stream, inv. ARGV: group, id, retention_ms, fields…
-- Returns {"acked"} | {"pending", non-terminal fields…}.
_M.ack_if_terminal = PRELUDE .. [==[
local stream, inv = KEYS[1], KEYS[2]
local group, id, retention_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HEXISTS', inv, '~retained') == 1 then
    redis.call('XACK', stream, group, id)
    return {'acked'}
end
local open = {}
for i = 4, #ARGV do
    if not is_terminal(redis.call('HGET', inv, ARGV[i])) then
        open[#open + 1] = ARGV[i]
    end
end
local all = redis.call('HGETALL', inv)
for i = 1, #all, 2 do
    local f = all[i]
    if f ~= '-/-' and not is_terminal(all[i + 1]) then
        local listed = false
        for _, o in ipairs(open) do
            listed = listed or o == f
        end
        if not listed then
            open[#open + 1] = f
        end
    end
end
if #open > 0 then
    table.insert(open, 1, 'pending')
    return open
end
redis.call('XACK', stream, group, id)
if redis.call('EXISTS', inv) == 1 then
    retain(inv, retention_ms)
end
return {'acked'}
]==]


--- Acknowledges unmatched messages of one batch, except those whose state
-- records non-terminal invocations (a redelivery must still run them).
-- KEYS: stream. ARGV: group, inv_prefix, retention_ms, ids…
-- Returns the ids that were NOT acknowledged.
_M.ack_unmatched = PRELUDE .. [==[
local stream = KEYS[1]
local group, inv_prefix, retention_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local kept, acked = {}, {}
for i = 4, #ARGV do
    local id = ARGV[i]
    local inv = inv_prefix .. id
    local open = false
    if redis.call('EXISTS', inv) == 1 and redis.call('HEXISTS', inv, '~retained') == 0 then
        local all = redis.call('HGETALL', inv)
        for j = 1, #all, 2 do
            if all[j] ~= '-/-' and not is_terminal(all[j + 1]) then
                open = true
            end
        end
        if not open then
            retain(inv, retention_ms)
        end
    end
    if open then
        kept[#kept + 1] = id
    else
        acked[#acked + 1] = id
    end
end
if #acked > 0 then
    redis.call('XACK', stream, group, unpack(acked))
end
return kept
]==]


--- Acknowledges an obsolete schedule occurrence without running it and
-- retains whatever state it has. KEYS: stream, inv. ARGV: group, id,
-- retention_ms. Returns 1.
_M.ack_obsolete = PRELUDE .. [==[
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
    retain(KEYS[2], tonumber(ARGV[3]))
end
return 1
]==]


--- A dead letter with no invocation (malformed, replay target not found):
-- written, acknowledged and retained in one step, once per message.
-- KEYS: stream, inv, dlq. ARGV: group, id, retention_ms, reason, DLQ pairs…
-- Returns the DLQ entry id (the existing one on a redelivery).
_M.dead_letter_message = PRELUDE .. [==[
local stream, inv, dlq = KEYS[1], KEYS[2], KEYS[3]
local group, id, retention_ms, reason = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local existing = redis.call('HGET', inv, '-/-')
if existing then
    redis.call('XACK', stream, group, id)
    return existing
end
local dlq_id = write_dlq(dlq, pairs_from(5), reason, 0, now_ms())
redis.call('HSET', inv, '-/-', dlq_id)
retain(inv, retention_ms)
redis.call('XACK', stream, group, id)
return dlq_id
]==]


--- A pending entry whose body is gone: counted once (XACK returns 1 only
-- to one caller), cleared from the PEL, its state retained.
-- KEYS: stream, stats. ARGV: group, inv_prefix, retention_ms, ids…
-- Returns how many were counted.
_M.clear_missing = PRELUDE .. [==[
local stream, stats = KEYS[1], KEYS[2]
local group, inv_prefix, retention_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local counted = 0
for i = 4, #ARGV do
    if redis.call('XACK', stream, group, ARGV[i]) == 1 then
        counted = counted + 1
        local inv = inv_prefix .. ARGV[i]
        if redis.call('EXISTS', inv) == 1 then
            retain(inv, retention_ms)
        end
    end
end
if counted > 0 then
    redis.call('HINCRBY', stats, 'missing_payload_total', counted)
end
return counted
]==]


--- One XAUTOCLAIM step; deleted entries are counted in the same script so
-- that a crash cannot lose the count. KEYS: stream, stats.
-- ARGV: group, consumer, min_idle_ms, cursor, count, inv_prefix, retention_ms.
-- Returns {next_cursor, claimed entries, deleted count}.
_M.reclaim = PRELUDE .. [==[
local stream, stats = KEYS[1], KEYS[2]
local group, consumer, min_idle, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local inv_prefix, retention_ms = ARGV[6], tonumber(ARGV[7])
local r = redis.call('XAUTOCLAIM', stream, group, consumer, min_idle, cursor, 'COUNT', count)
local deleted = r[3] or {}
for _, id in ipairs(deleted) do
    local inv = inv_prefix .. id
    if redis.call('EXISTS', inv) == 1 then
        retain(inv, retention_ms)
    end
end
if #deleted > 0 then
    redis.call('HINCRBY', stats, 'missing_payload_total', #deleted)
end
return {r[1], r[2], #deleted}
]==]


--- Trims acknowledged entries older than the retention (aged by entry id
-- against Redis TIME), never one that any group has pending or has not yet
-- delivered. KEYS: stream. ARGV: retention_ms. Returns entries removed.
_M.trim = PRELUDE .. [==[
local stream = KEYS[1]
local cutoff = now_ms() - tonumber(ARGV[1])
local function parse_id(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return tonumber(ms), tonumber(seq)
end
local function less(a_ms, a_seq, b_ms, b_seq)
    return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end
if redis.call('EXISTS', stream) == 0 then
    return 0
end
local min_ms, min_seq = cutoff, 0
local groups = redis.call('XINFO', 'GROUPS', stream)
for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g, 2 do
        info[g[i]] = g[i + 1]
    end
    local ms, seq = parse_id(info['last-delivered-id'])
    if less(ms, seq, min_ms, min_seq) then
        min_ms, min_seq = ms, seq
    end
    if tonumber(info['pending']) > 0 then
        local summary = redis.call('XPENDING', stream, info['name'])
        ms, seq = parse_id(summary[2])
        if less(ms, seq, min_ms, min_seq) then
            min_ms, min_seq = ms, seq
        end
    end
end
return redis.call('XTRIM', stream, 'MINID', min_ms .. '-' .. min_seq)
]==]


--- Publishes one schedule occurrence exactly once across all replicas.
-- Due-ness is decided here on Redis TIME. A schedule seen for the first
-- time only records the latest past occurrence, so it first fires at its
-- next one; after downtime only the latest missed occurrence fires.
-- KEYS: sched key, stream, trusted. ARGV: occurrence_ms, "<app>/<name>", RFC3339.
-- Returns the entry id, "initialized", "published" (already) or "not-due".
_M.publish_occurrence = PRELUDE .. [==[
local key, stream, trusted = KEYS[1], KEYS[2], KEYS[3]
local occurrence = tonumber(ARGV[1])
if occurrence > now_ms() then
    return 'not-due'
end
local last = tonumber(redis.call('GET', key) or '')
if last == nil then
    redis.call('SET', key, ARGV[1])
    return 'initialized'
end
if last >= occurrence then
    return 'published'
end
redis.call('SET', key, ARGV[1])
return xadd_trusted(stream, trusted, {'relay_schedule', ARGV[2], 'relay_occurrence', ARGV[3]})
]==]


--- Publishes an entry carrying reserved fields (a DLQ replay) as trusted.
-- KEYS: stream, trusted. ARGV: field/value pairs. Returns the entry id.
_M.publish_trusted = PRELUDE .. [==[
return xadd_trusted(KEYS[1], KEYS[2], ARGV)
]==]


--- Forgets the trusted records of entries no longer in the stream: every
-- id below the first remaining entry (trimmed by Relay, by a producer's
-- MAXLEN or deleted), all of them once the stream is empty. Records of
-- entries still in the stream stay, so a redelivery, a reclaim or a group
-- recreated at 0 still finds them. KEYS: stream, trusted. Returns how many.
_M.forget_trusted = [==[
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if not first then
    return redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -1)
end
return redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.match(first[1], '^(%d+)'))
]==]


--- The consumer-name guard. KEYS: consumer key. ARGV: value, ttl_ms,
-- expected holder ("" = key must be absent).
-- Returns {"ok"} or {"held", current holder}.
_M.claim_consumer = [==[
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[3] and current ~= ARGV[1] then
    return {'held', current}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'ok'}
]==]


--- Gives the consumer name up (if still ours) and deletes the instance key:
-- a clean stop. KEYS: consumer key, instance key. ARGV: value. Returns 1.
_M.release_consumer = [==[
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
end
redis.call('DEL', KEYS[2])
return 1
]==]


--- Heartbeat: refreshes the instance key and, if still ours, the consumer
-- key. KEYS: instance key, consumer key. ARGV: value, ttl_ms.
-- Returns 1 if the consumer key is still ours, 0 if another took it.
_M.heartbeat = [==[
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
local current = redis.call('GET', KEYS[2])
if current and current ~= ARGV[1] then
    return 0
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
]==]


return _M
