--- Classification of a stream entry before anything runs:
-- schedule occurrence, targeted replay, malformed, unmatched or matched.
-- Precedence: relay_schedule, then relay_target, then event.
-- An entry larger than the daemon may hold (RELAY_MAX_EVENT_BYTES) is
-- malformed before anything else looks at it, and so is a poison stub.
local build = require("relay.core.build")
local core_redis = require("relay.core.redis")
local fs = require("relay.fs")
local redis = require("relay.redis")

local _M = {}

-- Room for an entry's fields besides its event (Relay's own fields take a
-- few hundred bytes), and what each reply object costs the daemon's client
-- on top of its bytes: an entry costs its bytes plus one object per id,
-- field name, value and array. relay.scripts.take_pending counts the same.
_M.OTHER_FIELDS_BYTES = 64 * 1024
_M.OBJECT_BYTES = core_redis.reply_object_bytes
-- What a dead letter keeps of an event too large to keep whole.
_M.KEPT_EVENT_BYTES = 4096

-- Test builds only: the daemon kills itself while classifying an event
-- holding this text, so that specs can crash it for real on one entry.
local CRASH_ON = build.test_constants and os.getenv("RELAY_TEST_CRASH_ON") or nil
_M.TEST_CRASH = CRASH_ON ~= nil  -- every event must then come through here


local function crash_if_marked(event)
    if CRASH_ON and event and event:find(CRASH_ON, 1, true) then
        fs.kill(fs.getpid(), 9)
    end
end

-- Fields only Relay's own publishers may write (`relay dlq replay`, the
-- scheduler); on an entry they did not record as trusted, a producer wrote
-- them, and honouring them would run any handler on the producer's input.
local RESERVED = { relay_schedule = true, relay_target = true, relay_replay_of = true, relay_occurrence = true }
_M.UNTRUSTED = "reserved field from a producer"


--- True when an entry's flat field list (or redis.null) carries a reserved
-- field, under any occurrence of the name.
function _M.reserved(flat)
    if type(flat) ~= "table" then
        return false
    end
    for i = 1, #flat - 1, 2 do
        if RESERVED[flat[i]] then
            return true
        end
    end
    return false
end


--- The largest entry cost (bytes plus objects) the daemon reads whole.
function _M.entry_limit(max_event_bytes)
    return max_event_bytes + _M.OTHER_FIELDS_BYTES
end


--- An entry's `event` size (its first occurrence, as everywhere) and its
-- cost, from its flat field list.
function _M.measure(flat)
    local event, bytes = 0, 0
    for i = 1, #flat do
        bytes = bytes + #flat[i]
    end
    for i = 1, #flat - 1, 2 do
        if flat[i] == "event" then
            event = #flat[i + 1]
            break
        end
    end
    return event, bytes + (#flat + 3) * _M.OBJECT_BYTES
end


--- The reason for an entry too large to hold, or nil.
function _M.too_large(event_bytes, cost, max_bytes)
    if event_bytes > max_bytes then
        return string.format("event too large (%d bytes > %d)", event_bytes, max_bytes)
    elseif cost > _M.entry_limit(max_bytes) then
        return string.format("event too large (entry of %d bytes > %d)", cost, _M.entry_limit(max_bytes))
    end
    return nil
end


-- entry[3], set only by relay.scripts.take_pending, stands for a body the
-- daemon was not given: {"oversized", event bytes, cost} or {"poison", crashes}.
local function stub(msg, info, max_bytes)
    msg.kind = "malformed"
    if info[1] == "poison" then
        msg.reason = string.format("poison: crashed the worker %d times", info[2])
    else
        msg.reason = _M.too_large(info[2], info[3], max_bytes) or "event too large"
        msg.truncated = true
    end
    return msg
end


--- Matches an event: the message of an entry whose fields held nothing
-- but the event is made here in one go (a table grown key by key costs
-- its rehashes on every entry of the unmatched path). msg: the message
-- so far, or nil.
local function match(id, event, m, msg)
    local ids, reason = m.matcher:match(event, m.max_bytes, m.now_ms())
    local kind, labels = "unmatched", ids
    if not ids then
        kind, labels = "malformed", nil
    elseif #ids > 0 then
        kind, labels = "matched", {}
        for i, rule in ipairs(ids) do
            labels[i] = m.labels[rule + 1]
        end
    end
    if not msg then
        return { id = id, kind = kind, event = event, labels = labels, reason = reason }
    end
    msg.kind, msg.labels, msg.reason = kind, labels, reason
    return msg
end


--- An entry with fields besides its event: reserved fields (honoured
-- only when trusted), lineage, schedule occurrences and targets.
local function classify_fields(id, flat, m)
    local msg = { id = id }
    local fields = redis.pairs_to_table(flat)
    msg.event = fields.event
    crash_if_marked(msg.event)
    if _M.reserved(flat) and not (m.trusted and m.trusted[id]) then
        msg.kind = m.trusted and "malformed" or "unverified"
        msg.reason = _M.UNTRUSTED
        return msg
    end
    if fields.relay_replay_of then
        msg.lineage = { replay_of = fields.relay_replay_of }
    end
    if fields.relay_schedule then
        msg.kind = "schedule"
        msg.schedule = fields.relay_schedule
        msg.occurrence = fields.relay_occurrence
        return msg
    end
    if msg.event == nil then
        msg.kind, msg.reason = "malformed", "missing event field"
        return msg
    end
    if fields.relay_target then
        local ok, reason = m.validate(msg.event, m.max_bytes)
        if not ok then
            msg.kind, msg.reason = "malformed", reason
            return msg
        end
        msg.kind, msg.target = "targeted", fields.relay_target
        msg.labels = { fields.relay_target }
        return msg
    end
    return match(id, msg.event, m, msg)
end


--- entry = { id, flat fields or redis.null[, stub] }; m = { matcher, labels,
-- max_bytes, now_ms, trusted = set of trusted ids | false (unknown) }.
-- Returns a message table:
--   { id, kind = "missing"|"unverified"|"schedule"|"targeted"|"malformed"|"unmatched"|"matched",
--     event, reason, labels = {"<app>/<handler>"…}, target, lineage, truncated }
-- "unverified": it carries reserved fields and the trusted set could not be read.
-- truncated: too large to keep; its dead letter keeps KEPT_EVENT_BYTES of the event.
-- A repeated field counts with its first value, as in the scripts.
function _M.classify(entry, m)
    local id, flat = entry[1], entry[2]
    if type(entry[3]) == "table" then
        return stub({ id = id }, entry[3], m.max_bytes)
    elseif type(flat) ~= "table" then
        return { id = id, kind = "missing" }
    end
    local event_bytes, cost = _M.measure(flat)
    local reason = _M.too_large(event_bytes, cost, m.max_bytes)
    if reason then
        return { id = id, kind = "malformed", reason = reason, truncated = true }
    end
    if #flat ~= 2 or flat[1] ~= "event" then
        return classify_fields(id, flat, m)
    end
    crash_if_marked(flat[2])
    return match(id, flat[2], m)
end


return _M
