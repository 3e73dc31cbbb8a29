--- The dead-letter queue relay:<stream>:dlq, read in pages (never whole)
-- and changed entry by entry: replay re-publishes to the entry's original
-- stream first and deletes the entry only after that succeeded, so a crash
-- between the two leaves a duplicate, never a loss.
local keys = require("relay.keys")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}

local PAGE = 200


--- Iterates entries oldest first, matching filters {app=, handler=,
-- after= (an id: start past it)}. The iterator yields entry tables
-- {id=, fields=}; err() tells a failure.
function _M.entries(client, key, filters)
    filters = filters or {}
    local page, index, last_id, failure = {}, 1, filters.after, nil
    local function fetch()
        local start = last_id and ("(" .. last_id) or "-"
        local reply, err = client:call("XRANGE", key, start, "+", "COUNT", PAGE)
        if not reply then
            failure = err
            return false
        end
        page, index = reply, 1
        return #reply > 0
    end
    local function next_entry()
        while true do
            if index > #page and not fetch() then
                return nil
            end
            local raw = page[index]
            index = index + 1
            last_id = raw[1]
            local fields = redis.pairs_to_table(raw[2])
            if (not filters.app or fields.app == filters.app)
                and (not filters.handler or fields.handler == filters.handler) then
                return { id = raw[1], fields = fields, flat = raw[2] }
            end
        end
    end
    return next_entry, function() return failure end
end


--- One entry by id, or nil (missing) / nil, err.
function _M.get(client, key, id)
    local reply, err = client:call("XRANGE", key, id, id)
    if not reply then
        return nil, err
    end
    local raw = reply[1]
    if not raw then
        return nil
    end
    return { id = raw[1], fields = redis.pairs_to_table(raw[2]), flat = raw[2] }
end


--- Why an entry cannot be replayed, or nil.
function _M.refusal(entry)
    local f = entry.fields
    if f.relay_schedule then
        return nil
    end
    if not f.app or f.app == "-" or not f.handler or f.handler == "-" then
        return "it has no handler (a malformed message); fix the producer and publish it again"
    end
    if not f.event then
        return "it has no event"
    end
    return nil
end


--- The fields of an entry's replay: its schedule occurrence, or its event
-- targeted at its handler.
local function replay_fields(entry)
    local f = entry.fields
    if f.relay_schedule then
        return { "relay_schedule", f.relay_schedule, "relay_occurrence", f.relay_occurrence or "",
            "relay_replay_of", entry.id }
    end
    return { "event", f.event, "relay_target", f.app .. "/" .. f.handler, "relay_replay_of", entry.id }
end


--- Re-publishes an entry to its original stream, targeted at its handler
-- (or as its schedule occurrence), then deletes it. The publish is one
-- script that records the new entry as trusted: the daemon dead-letters
-- reserved fields on any entry not recorded so.
-- @return the new stream entry id | nil, err
function _M.replay(client, key, entry)
    local stream = entry.fields.original_stream
    if not stream or stream == "" then
        return nil, "it has no original_stream"
    end
    local new_id, err = redis.eval(client, scripts.publish_trusted, { stream, keys.for_stream(stream).trusted },
        replay_fields(entry))
    if not new_id then
        return nil, "publishing to " .. stream .. " failed: " .. tostring(err)
    end
    local _, del_err = client:call("XDEL", key, entry.id)
    if del_err then
        return nil, string.format("published as %s but could not delete the dead letter: %s", new_id, del_err)
    end
    return new_id
end


return _M
