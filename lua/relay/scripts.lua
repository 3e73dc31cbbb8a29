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
-- callers never ship event bytes on the hot path just in case. Two ctx
-- keys steer the write and are not written: keep_event_bytes (an entry too
-- large to keep: only that many bytes of its event, plus event_bytes, its
-- size) and dlq_maxlen (RELAY_DLQ_MAXLEN: an approximate trim of the DLQ).
local DLQ_CONTROL = { group = true, original_stream = true, original_id = true, app = true, handler = true,
    event = true, consumer = true, keep_event_bytes = true, dlq_maxlen = true }

local function dlq_event(ctx, fields)
    local event = ctx.event or stream_event(ctx.original_stream, ctx.original_id)
    local keep = tonumber(ctx.keep_event_bytes)
    if keep then
        fields[#fields + 1] = 'event_bytes'
        fields[#fields + 1] = tostring(#event)
        if #event > keep then
            event = string.sub(event, 1, keep)
            collectgarbage()  -- the whole event was copied in to be cut: let it go now
        end
    end
    return event
end

local function write_dlq(dlq, ctx, reason, attempts, now)
    local fields = {}
    for k, v in pairs(ctx) do
        if not DLQ_CONTROL[k] then
            fields[#fields + 1] = k
            fields[#fields + 1] = v
        end
    end
    local event = dlq_event(ctx, fields)
    local args = { dlq }
    if ctx.dlq_maxlen then
        args = { dlq, 'MAXLEN', '~', ctx.dlq_maxlen }
    end
    for _, v in ipairs({ '*',
        'original_stream', ctx.original_stream, 'original_id', ctx.original_id,
        'group', ctx.group, 'consumer', ctx.consumer, 'event', event,
        'reason', reason, 'app', ctx.app, 'handler', ctx.handler,
        'deliveries', tostring(deliveries(ctx.original_stream, ctx.group, ctx.original_id)),
        'handler_attempts', tostring(attempts), 'timestamp', rfc3339(now) }) do
        args[#args + 1] = v
    end
    for _, v in ipairs(fields) do
        args[#args + 1] = v
    end
    return redis.call('XADD', unpack(args))
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

-- A token is <instance>.<seq>: the daemon process that issued it, and its
-- count of tokens so far.
local function token_instance(token)
    return string.match(token, '^(.*)%.[^.]*$')
end

local function instance_alive(prefix, token)
    local instance = token_instance(token)
    return instance ~= nil and redis.call('EXISTS', prefix .. instance) == 1
end

-- The marker an uncharged release of attempt n leaves: none before the
-- first attempt, else attempt n-1's wait, over now.
local function uncharged(attempt, now)
    if attempt <= 1 then
        return nil
    end
    return 'waiting:' .. (attempt - 1) .. ':' .. now
end

local function set_or_delete(inv, field, marker)
    if marker then
        redis.call('HSET', inv, field, marker)
    else
        redis.call('HDEL', inv, field)
    end
end

-- XADDs an entry Relay itself writes and records its id as trusted. The
-- score is the id's milliseconds, so forgetting gone entries is one range
-- removal.
local function xadd_trusted(stream, trusted, fields, at_id)
    local id = redis.call('XADD', stream, at_id or '*', unpack(fields))
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


--- TryStart. KEYS: inv, dlq, stream (read for a dead letter's event), the
-- paused set, then the instance key and the dead key
-- (relay:<stream>:dead:<instance>) of the holder named in ARGV[5], when one
-- is named. ARGV: field, token, lease_ms,
-- max_attempts, holder ("" = none), backoff_csv, own ("1": this daemon
-- holds no other claim on the invocation), then DLQ context pairs.
-- Returns {"start", attempt, previous_marker} | {"skip", why, wait_ms[, lost attempt]} |
-- {"exhausted", attempt, dlq_id} (a lost last attempt, dead-lettered now) |
-- {"check", holder} (an attempt of another instance runs within its lease:
-- call again with that holder's keys, so that every key is declared).
-- Nothing starts while the field's app is in the paused set ("paused"):
-- a pause holds on every replica from the moment it is written.
-- A `running` marker under this very token is the claim of an earlier
-- TryStart whose reply was lost (the caller retries with the token of the
-- unanswered call): it is ours, and starts. One of the caller's own
-- instance under another token, when the caller holds no claim on this
-- invocation, is an attempt that daemon is not running (a TryStart Redis
-- ran after the caller gave up on it, a rolled back Redis): it is released
-- uncharged and claimed again, never left to lapse and be charged as lost.
-- Another instance's attempt counts as lost once its lease is over or once
-- its dead key says a daemon on its host found the holder dead and removed
-- its containers. A holder whose instance key merely lapsed may be frozen
-- or cut off with its container still running: its attempt is not charged
-- before the lease ("lease"), by when the container has ended itself.
_M.try_start = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, token, lease_ms, max_attempts = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local declared, ladder, own = ARGV[5], ARGV[6], ARGV[7] == '1'
if redis.call('HEXISTS', inv, '~retained') == 1 then
    return {'skip', 'retained', 0}
end
local function paused()
    return redis.call('SISMEMBER', KEYS[4], string.match(field, '^([^/]*)/') or field) == 1
end
local now = now_ms()
local marker = redis.call('HGET', inv, field)
local attempt = 0
local function claim(n, previous)
    redis.call('HSET', inv, field, 'running:' .. n .. ':' .. token .. ':' .. (now + lease_ms))
    return {'start', n, previous or ''}
end
if marker then
    local p = parse_marker(marker)
    attempt = tonumber(p[2])
    if p[1] == 'succeeded' or (p[1] == 'exhausted' and p[4] == 'dlq') then
        return {'skip', 'terminal', 0}
    end
    if p[1] == 'exhausted' then
        local id = write_dlq(dlq, pairs_from(8), 'exhausted', attempt, now)
        redis.call('HSET', inv, field, marker .. ':dlq')
        return {'exhausted', attempt, id}
    end
    if p[1] == 'running' then
        if p[3] == token or (own and token_instance(p[3]) == token_instance(token)) then
            if paused() then
                return {'skip', 'paused', 0}
            end
            return claim(attempt, uncharged(attempt, now))
        end
        local lease_left = tonumber(p[4]) - now
        if lease_left > 0 then
            local holder = token_instance(p[3]) or ''
            if holder ~= '' and holder ~= declared then
                return {'check', holder}
            end
            if holder == '' or redis.call('EXISTS', KEYS[6]) == 0 then
                local alive = holder ~= '' and redis.call('EXISTS', KEYS[5]) == 1
                return {'skip', alive and 'running' or 'lease', lease_left}
            end
        end
        if attempt >= max_attempts then
            local ctx = pairs_from(8)
            local id = write_dlq(dlq, ctx, 'worker lost during attempt', attempt, now)
            redis.call('HSET', inv, field, 'exhausted:' .. attempt .. ':' .. p[3] .. ':dlq')
            return {'exhausted', attempt, id}
        end
        local wait = backoff(ladder, attempt)
        redis.call('HSET', inv, field, 'waiting:' .. attempt .. ':' .. (now + wait))
        return {'skip', 'lost', wait, attempt}
    end
    if p[1] == 'waiting' and now < tonumber(p[3]) then
        return {'skip', 'waiting', tonumber(p[3]) - now}
    end
end
if paused() then
    return {'skip', 'paused', 0}
end
return claim(attempt + 1, marker)
]==]


--- Success. KEYS: inv. ARGV: field, token, attempt.
-- Returns "succeeded" (also to a retry of a call that already wrote it) or
-- "stale" (the attempt no longer holds the token).
_M.succeed = PRELUDE .. [==[
local inv, field, token, attempt = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if not holds_claim(inv, field, attempt, token) then
    if redis.call('HGET', inv, field) == 'succeeded:' .. attempt .. ':' .. token then
        return 'succeeded'
    end
    return 'stale'
end
redis.call('HSET', inv, field, 'succeeded:' .. attempt .. ':' .. token)
return 'succeeded'
]==]


--- Failure. KEYS: inv, dlq, stream. ARGV: field, token, attempt, max_attempts,
-- backoff_csv, reason, then DLQ context pairs.
-- Returns {"waiting", wait_ms} | {"exhausted", dlq_id} | {"stale"}. A retry
-- of a call that already wrote its outcome gets that outcome again
-- ({"exhausted"} without the id); a `waiting` marker of this attempt counts
-- as written, since it carries no token (another replica charging the
-- attempt as lost leaves the same state).
_M.fail = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, token, attempt, max_attempts = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local ladder, reason = ARGV[5], ARGV[6]
local now = now_ms()
if not holds_claim(inv, field, attempt, token) then
    local marker = redis.call('HGET', inv, field) or ''
    if marker == 'exhausted:' .. attempt .. ':' .. token .. ':dlq' then
        return {'exhausted'}
    end
    local p = parse_marker(marker)
    if p[1] == 'waiting' and p[2] == attempt then
        return {'waiting', math.max(0, tonumber(p[3]) - now)}
    end
    return {'stale'}
end
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
-- attempt, previous marker ("" = none). Returns "released" (also to a retry
-- of a call that already released) or "stale".
_M.release = PRELUDE .. [==[
local inv, field, token, attempt, previous = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not holds_claim(inv, field, attempt, token) then
    if (redis.call('HGET', inv, field) or '') == previous then
        return 'released'
    end
    return 'stale'
end
set_or_delete(inv, field, previous ~= '' and previous or nil)
return 'released'
]==]


--- Releases, uncharged, whatever attempt runs under a token whose TryStart
-- got no answer (the daemon stops before it could retry it). KEYS: inv.
-- ARGV: field, token. Returns "released" or "stale".
_M.unclaim = PRELUDE .. [==[
local inv, field, token = KEYS[1], ARGV[1], ARGV[2]
local marker = redis.call('HGET', inv, field)
local p = parse_marker(marker or '')
if redis.call('HEXISTS', inv, '~retained') == 1 or p[1] ~= 'running' or p[3] ~= token then
    return 'stale'
end
set_or_delete(inv, field, uncharged(tonumber(p[2]), now_ms()))
return 'released'
]==]


--- The stranded-invocation sweep over a batch of message ids (found by
-- SCAN in housekeeping). For each non-retained invocation hash:
--  * a `running` marker of the caller's own instance whose token it does
--    not hold (not in the held list, and issued before the batch was
--    built) is released uncharged: that daemon is not running it;
--  * a message that is in no PEL, though the group delivered it (its
--    consumer was deleted, or it was acknowledged outside Relay), is
--    settled: retained when every invocation is terminal; counted in
--    missing_payload_total and retained when its entry is gone; otherwise
--    each open invocation is re-queued as a trusted entry targeted at its
--    handler (a schedule occurrence as itself) carrying its marker, so its
--    attempts and backoff go on, and the old hash is retained. One whose
--    attempt still runs live is left for a later pass.
-- Every key is declared (Redis Cluster): the hash of each id; the instance
-- keys of the live claims met, and the hashes of the entries a re-queue
-- adds, whose ids the script proposes (from base_ms, ahead of the stream's
-- last id, so that XADD can take them): until all of those are among KEYS
-- it answers {"declare", base_ms, keys…} having written nothing, and the
-- caller runs it again with them and that base.
-- KEYS: stream, trusted, stats, the hash of each id, then the keys asked
-- for. ARGV: group, inv_prefix, instance_prefix, own instance, own seq
-- watermark, retention_ms, held count, base_ms ("0" at first), held
-- tokens…, ids…. Returns {released, retained, missing, {id, field, new id}…}
-- or {"declare", base_ms, keys…}.
_M.sweep = PRELUDE .. [==[
local stream, trusted, stats = KEYS[1], KEYS[2], KEYS[3]
local group, inv_prefix, instance_prefix, own = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local watermark, retention_ms, n_held = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local base_ms = tonumber(ARGV[8])
local PROPOSAL_AHEAD_MS = 1000  -- room for a producer's entries before the caller's next call
local held = {}
for i = 9, 8 + n_held do
    held[ARGV[i]] = true
end
local first_id = 9 + n_held
local now = now_ms()

local function parse_id(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return tonumber(ms), tonumber(seq)
end

if redis.call('EXISTS', stream) == 0 then
    return {0, 0, 0}
end
local last_ms, last_seq
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = {}
    for i = 1, #g, 2 do
        info[g[i]] = g[i + 1]
    end
    if info['name'] == group then
        last_ms, last_seq = parse_id(info['last-delivered-id'])
    end
end
if not last_ms then
    return {0, 0, 0}
end

local function delivered(id)
    local ms, seq = parse_id(id)
    return ms ~= nil and (ms < last_ms or (ms == last_ms and seq <= last_seq))
end

-- The keys this batch may touch besides its hashes, with the base of the
-- re-queued ids, before anything is written (see the header).
local function undeclared_keys()
    local declared, needed, requeue_bound = {}, {}, 0
    for _, k in ipairs(KEYS) do
        declared[k] = true
    end
    for i = first_id, #ARGV do
        local inv = KEYS[i - first_id + 4]
        if redis.call('HEXISTS', inv, '~retained') == 0 and redis.call('EXISTS', inv) == 1 then
            local all, open = redis.call('HGETALL', inv), 0
            for j = 1, #all, 2 do
                local f, marker = all[j], all[j + 1]
                if string.sub(f, 1, 1) ~= '~' and f ~= '-/-' and not is_terminal(marker) then
                    open = open + 1
                    local p = parse_marker(marker)
                    local instance = p[1] == 'running' and token_instance(p[3])
                    if instance and now < tonumber(p[4]) then
                        needed[#needed + 1] = instance_prefix .. instance
                    end
                end
            end
            if delivered(ARGV[i]) then
                requeue_bound = requeue_bound + open
            end
        end
    end
    if requeue_bound > 0 then
        local info = redis.call('XINFO', 'STREAM', stream)
        local last_id
        for j = 1, #info - 1, 2 do
            if info[j] == 'last-generated-id' then
                last_id = info[j + 1]
            end
        end
        local last_ms = parse_id(last_id)
        if base_ms <= last_ms then
            base_ms = math.max(now, last_ms) + PROPOSAL_AHEAD_MS
        end
        for k = 0, requeue_bound - 1 do
            needed[#needed + 1] = inv_prefix .. base_ms .. '-' .. k
        end
    end
    local missing = {}
    for _, k in ipairs(needed) do
        if not declared[k] then
            missing[#missing + 1] = k
        end
    end
    return missing
end

local undeclared = undeclared_keys()
if #undeclared > 0 then
    return {'declare', tostring(base_ms), unpack(undeclared)}
end
local requeued = 0
local function next_requeued_id()
    local id = base_ms .. '-' .. requeued
    requeued = requeued + 1
    return id
end

local function held_here(token)
    local seq = tonumber(string.match(token, '%.(%d+)$'))
    return held[token] or seq == nil or seq > watermark
end

-- The open (non-terminal) fields after releasing this daemon's strays;
-- false when an attempt still runs live.
local function open_fields(inv)
    local all, open, released = redis.call('HGETALL', inv), {}, 0
    for i = 1, #all, 2 do
        local f, marker = all[i], all[i + 1]
        local p = parse_marker(marker)
        if string.sub(f, 1, 1) ~= '~' and f ~= '-/-' and not is_terminal(marker) then
            if p[1] == 'running' and token_instance(p[3]) == own and not held_here(p[3]) then
                marker = uncharged(tonumber(p[2]), now)
                set_or_delete(inv, f, marker)
                released = released + 1
                p = parse_marker(marker or '')
            end
            if p[1] == 'running' and now < tonumber(p[4]) and instance_alive(instance_prefix, p[3]) then
                return false, released
            end
            open[#open + 1] = {f, marker or false}
        end
    end
    return open, released
end

local function entry_fields(id)
    local entry = redis.call('XRANGE', stream, id, id)[1]
    if not entry then
        return nil
    end
    local t = {}
    for i = 1, #entry[2], 2 do
        if t[entry[2][i]] == nil then
            t[entry[2][i]] = entry[2][i + 1]
        end
    end
    return t
end

local function carry(id, fields, f, marker)
    local new_id = xadd_trusted(stream, trusted, fields, next_requeued_id())
    if marker then
        redis.call('HSET', inv_prefix .. new_id, f, marker)
    end
    return {id, f, new_id}
end

-- Re-queues the open invocations of a message in no PEL; nil when its
-- entry is gone.
local function requeue(id, open)
    local e = entry_fields(id)
    if not e then
        return nil
    end
    local out = {}
    if e.relay_schedule and redis.call('ZSCORE', trusted, id) then
        out[1] = carry(id, {'relay_schedule', e.relay_schedule, 'relay_occurrence', e.relay_occurrence or '',
            'relay_replay_of', id}, open[1][1], open[1][2])
        for i = 2, #open do
            if open[i][2] then
                redis.call('HSET', inv_prefix .. out[1][3], open[i][1], open[i][2])
            end
        end
    elseif e.event then
        for _, o in ipairs(open) do
            out[#out + 1] = carry(id, {'event', e.event, 'relay_target', o[1], 'relay_replay_of', id}, o[1], o[2])
        end
    end
    return out
end

local result = {0, 0, 0}
for i = first_id, #ARGV do
    local id = ARGV[i]
    local inv = KEYS[i - first_id + 4]
    if redis.call('HEXISTS', inv, '~retained') == 0 and redis.call('EXISTS', inv) == 1 then
        local open, released = open_fields(inv)
        result[1] = result[1] + released
        if open and delivered(id) and not redis.call('XPENDING', stream, group, id, id, 1)[1] then
            local moved = {}
            if #open > 0 then
                moved = requeue(id, open)
            end
            if not moved then
                moved = {}
                result[3] = result[3] + 1
                redis.call('HINCRBY', stats, 'missing_payload_total', 1)
            end
            for _, m in ipairs(moved) do
                result[#result + 1] = m
            end
            retain(inv, retention_ms)
            result[2] = result[2] + 1
        end
    end
end
return result
]==]


--- Removes a dead consumer of the group: one whose consumer key (held by a
-- live daemon's heartbeat) is gone and which has been idle for at least
-- min_idle_ms. Its pending entries are first claimed for the caller (up
-- to count per call, ids only: no delivery is counted) with their idle
-- time set so that the reclaim sweep takes them at once; the name is
-- deleted only once it has none left. KEYS: stream, consumer key.
-- ARGV: group, name, caller's consumer name, min_idle_ms, count,
-- reclaim idle_ms. Returns {"alive"|"recent"|"claimed"|"deleted", n claimed}.
_M.reap_consumer = [==[
local stream, key = KEYS[1], KEYS[2]
local group, name, to, min_idle, count, idle = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
if redis.call('EXISTS', key) == 1 or name == to then
    return {'alive', 0}
end
local found = false
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
    local info = {}
    for i = 1, #c, 2 do
        info[c[i]] = c[i + 1]
    end
    if info['name'] == name then
        found = true
        if tonumber(info['idle']) < min_idle then
            return {'recent', 0}
        end
    end
end
if not found then
    return {'deleted', 0}
end
local args = {'XCLAIM', stream, group, to, 0}
for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', count, name)) do
    args[#args + 1] = p[1]
end
local claimed = 0
if #args > 5 then
    args[#args + 1] = 'IDLE'
    args[#args + 1] = idle
    args[#args + 1] = 'JUSTID'
    claimed = #redis.call(unpack(args))
end
if not redis.call('XPENDING', stream, group, '-', '+', 1, name)[1] then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, name)
    return {'deleted', claimed}
end
return {'claimed', claimed}
]==]


--- Dead-letters a recorded invocation at once (its handler was removed).
-- KEYS: inv, dlq, stream, then the instance key of the running claim's
-- holder named in ARGV[3], when one is named. ARGV: field, reason, holder
-- ("" = none), then DLQ pairs.
-- Returns {"exhausted", dlq_id}, "terminal", "running" or {"check", holder}
-- (call again with that holder named and its instance key declared).
_M.exhaust = PRELUDE .. [==[
local inv, dlq = KEYS[1], KEYS[2]
local field, reason, declared = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HEXISTS', inv, '~retained') == 1 then
    return 'terminal'
end
local marker = redis.call('HGET', inv, field)
if not marker or is_terminal(marker) then
    return 'terminal'
end
local p = parse_marker(marker)
local now = now_ms()
if p[1] == 'running' and now < tonumber(p[4]) then
    local holder = token_instance(p[3]) or ''
    if holder ~= '' and holder ~= declared then
        return {'check', holder}
    end
    if holder ~= '' and redis.call('EXISTS', KEYS[4]) == 1 then
        return 'running'
    end
end
local token = p[1] == 'waiting' and 'removed' or p[3]
local id = write_dlq(dlq, pairs_from(4), reason, tonumber(p[2]), now)
redis.call('HSET', inv, field, 'exhausted:' .. p[2] .. ':' .. token .. ':dlq')
return {'exhausted', id}
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
-- KEYS: stream, then the invocation hash of each id. ARGV: group,
-- retention_ms, ids…
-- Returns the ids that were NOT acknowledged.
_M.ack_unmatched = PRELUDE .. [==[
local stream = KEYS[1]
local group, retention_ms = ARGV[1], tonumber(ARGV[2])
local kept, acked = {}, {}
for i = 3, #ARGV do
    local id = ARGV[i]
    local inv = KEYS[i - 1]
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


--- Pending entries for the daemon, in PEL order: its own (mode "own", after
-- a restart or a read whose reply was too large to take) or any consumer's
-- idle ones (mode "idle", the reclaim sweep), claimed for it with the
-- delivery count raised as XREADGROUP and XAUTOCLAIM would. Each entry is
-- read here, one at a time, and handed over only if the daemon may hold it:
-- an event over max_event bytes, or an entry costing more than max_entry
-- (its bytes plus object_bytes per reply object, as relay.classify counts),
-- comes as {id, false, {"oversized", event bytes, cost}}.
--
-- Crash fence: an entry handed over with its body is marked (mark_prefix ..
-- id, a count) until the daemon has classified it and deletes the mark. A
-- mark found here means a daemon died holding the entry: such an entry is
-- handed over alone, so that a crash is charged to the entry that caused
-- it, and once its count reaches poison_after with no attempt running it
-- comes as {id, false, {"poison", crashes}}, its body withheld.
-- Entries whose body is gone leave the PEL (XCLAIM drops them) and are
-- counted in missing_payload_total here, so a crash cannot lose the count.
-- KEYS: stream, stats, then the invocation hash and the mark of each entry
-- the caller expects (its own XPENDING just before): an entry not declared
-- so (it came in between) ends the step before it. ARGV: group, consumer,
-- mode, cursor ("-" or the last id handed over), count, max_event,
-- max_entry, object_bytes, retention_ms, poison_after, min_idle_ms.
-- Returns {cursor, done (1 = the PEL was scanned to its end), deleted count, entries}.
_M.take_pending = PRELUDE .. [==[
local stream, stats = KEYS[1], KEYS[2]
local group, consumer, mode, cursor, count = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local max_event, max_entry, object_bytes = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local retention_ms, poison_after, min_idle = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11]
local declared = {}  -- id → {inv, mark}
for i = 3, #KEYS - 1, 2 do
    declared[string.match(KEYS[i], '^.*:inv:([^:]*)$')] = {KEYS[i], KEYS[i + 1]}
end

local start = cursor == '-' and '-' or '(' .. cursor
local pel
if mode == 'own' then
    pel = redis.call('XPENDING', stream, group, start, '+', count, consumer)
else
    pel = redis.call('XPENDING', stream, group, 'IDLE', min_idle, start, '+', count)
end

local function body(id)
    local entry = redis.call('XRANGE', stream, id, id)[1]
    local fields, event, bytes = entry[2], 0, 0
    for i = 1, #fields do
        bytes = bytes + #fields[i]
    end
    for i = 1, #fields - 1, 2 do
        if fields[i] == 'event' then
            event = #fields[i + 1]
            break
        end
    end
    local cost = bytes + (#fields + 3) * object_bytes
    if event <= max_event and cost <= max_entry then
        return entry
    end
    entry, fields = nil, nil
    collectgarbage()  -- a batch of large entries is never held here at once either
    return {id, false, {'oversized', event, cost}}
end

local function running(inv)
    local all = redis.call('HGETALL', inv)
    for i = 2, #all, 2 do
        if string.sub(all[i], 1, 8) == 'running:' then
            return true
        end
    end
    return false
end

local out, deleted, last, stopped = {}, 0, nil, false
for _, p in ipairs(pel) do
    local id = p[1]
    if not declared[id] then
        stopped = true  -- the caller did not expect it: the next step takes it
        break
    end
    local inv, mark = declared[id][1], declared[id][2]
    local crashes = tonumber(redis.call('GET', mark) or '0')
    if crashes > 0 and #out > 0 then
        stopped = true
        break
    end
    last = id
    if #redis.call('XCLAIM', stream, group, consumer, 0, id, 'RETRYCOUNT', p[4] + 1, 'JUSTID') == 0 then
        deleted = deleted + 1
        if redis.call('EXISTS', inv) == 1 then
            retain(inv, retention_ms)
        end
    elseif crashes >= poison_after and not running(inv) then
        out[#out + 1] = {id, false, {'poison', crashes}}
    else
        local entry = body(id)
        if entry[2] then
            redis.call('SET', mark, crashes + 1, 'PX', retention_ms)
        end
        out[#out + 1] = entry
    end
    if crashes > 0 then
        stopped = true
        break
    end
end
if deleted > 0 then
    redis.call('HINCRBY', stats, 'missing_payload_total', deleted)
end
return {last or cursor, (not stopped and #pel < count) and 1 or 0, deleted, out}
]==]


--- Entries trimmed from the stream before the group read them. Redis
-- counts a group's lag as entries added minus entries read, so entries a
-- trim (a producer's MAXLEN or MINID, an XTRIM) removed unread stay in the
-- lag for ever although no consumer will ever see them. With a valid read
-- counter (Redis drops it after an XDEL it cannot account for) two states
-- are exact: nothing is left to read (the whole lag is gone), and every
-- entry left is past the last delivered one (the lag minus the length is
-- gone); other states count nothing until the group reads on into one of
-- those. Mode "count" (the daemon) counts them once in the stats and sets
-- the group's read counter past them, so that its lag is true again; mode
-- "peek" (`relay status`) only tells how many there are now.
-- KEYS: stream, stats. ARGV: group, mode. Returns how many.
_M.count_trimmed = [==[
local stream, stats, group, mode = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local function record(flat)
    local t = {}
    for i = 1, #flat - 1, 2 do
        t[flat[i]] = flat[i + 1]
    end
    return t
end
local function id_less(a, b)
    local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
    local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
    a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
    return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end
if redis.call('EXISTS', stream) == 0 then
    return 0
end
local g
for _, flat in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local t = record(flat)
    if t['name'] == group then
        g = t
    end
end
local lag, read = g and tonumber(g['lag']), g and tonumber(g['entries-read'])
if not lag or not read or lag <= 0 then
    return 0
end
local s = record(redis.call('XINFO', 'STREAM', stream))
local delivered, length, gone = g['last-delivered-id'], tonumber(s['length']), 0
if not id_less(delivered, s['last-generated-id']) then
    gone = lag
elseif length > 0 and id_less(delivered, s['recorded-first-entry-id']) then
    gone = math.max(0, lag - length)
end
if gone > 0 and mode == 'count' then
    redis.call('XGROUP', 'SETID', stream, group, delivered, 'ENTRIESREAD', read + gone)
    redis.call('HINCRBY', stats, 'trimmed_undelivered_total', gone)
end
return gone
]==]


return _M
