--- Relay's Redis key names (relay.md section 5), built in one place.
local _M = {}


--- All keys of one stream's namespace.
function _M.for_stream(stream)
    local base = "relay:" .. stream .. ":"
    return {
        dlq = base .. "dlq",
        paused = base .. "paused",
        stats = base .. "stats",
        -- Sorted set of the entry ids Relay's own publishers wrote (score:
        -- the id's milliseconds); only those may carry reserved fields.
        trusted = base .. "trusted",
        inv = function(message_id) return base .. "inv:" .. message_id end,
        sched = function(app, name) return base .. "sched:" .. app .. "/" .. name end,
        consumer = function(name) return base .. "consumer:" .. name end,
        instance = function(id) return base .. "instance:" .. id end,
    }
end


return _M
