--- Classification of a stream entry before anything runs (events.md):
-- schedule occurrence, targeted replay, malformed, unmatched or matched.
-- Precedence (relay.md section 5): relay_schedule, then relay_target, then event.
local _M = {}


local function field_map(flat)
    local fields = {}
    for i = 1, #flat - 1, 2 do
        if fields[flat[i]] == nil then
            fields[flat[i]] = flat[i + 1]
        end
    end
    return fields
end
_M.field_map = field_map


--- entry = { id, flat fields or redis.null }; m = { matcher, labels,
-- max_bytes, now_ms }. Returns a message table:
--   { id, kind = "missing"|"schedule"|"targeted"|"malformed"|"unmatched"|"matched",
--     event, reason, labels = {"<app>/<handler>"…}, target, lineage, fields }
function _M.classify(entry, m)
    local msg = { id = entry[1] }
    if type(entry[2]) ~= "table" then
        msg.kind = "missing"
        return msg
    end
    local fields = field_map(entry[2])
    msg.fields = fields
    msg.event = fields.event
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
