--- Classification of a stream entry before anything runs:
-- schedule occurrence, targeted replay, malformed, unmatched or matched.
-- Precedence: relay_schedule, then relay_target, then event.
local redis = require("relay.redis")

local _M = {}

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


--- entry = { id, flat fields or redis.null }; m = { matcher, labels,
-- max_bytes, now_ms, trusted = set of trusted ids | false (unknown) }.
-- Returns a message table:
--   { id, kind = "missing"|"unverified"|"schedule"|"targeted"|"malformed"|"unmatched"|"matched",
--     event, reason, labels = {"<app>/<handler>"…}, target, lineage, fields }
-- "unverified": it carries reserved fields and the trusted set could not be read.
function _M.classify(entry, m)
    local msg = { id = entry[1] }
    if type(entry[2]) ~= "table" then
        msg.kind = "missing"
        return msg
    end
    local fields = redis.pairs_to_table(entry[2])
    msg.fields = fields
    msg.event = fields.event
    if _M.reserved(entry[2]) and not (m.trusted and m.trusted[msg.id]) then
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
    local ids, reason = m.matcher:match(msg.event, m.max_bytes, m.now_ms())
    if not ids then
        msg.kind, msg.reason = "malformed", reason
        return msg
    end
    if #ids == 0 then
        msg.kind, msg.labels = "unmatched", {}
        return msg
    end
    local labels = {}
    for i, id in ipairs(ids) do
        labels[i] = m.labels[id + 1]
    end
    msg.kind, msg.labels = "matched", labels
    return msg
end


return _M
