--- The consumer group's consumers as an operator sees them: a consumer is
-- alive while a running daemon's heartbeat holds its consumer key.
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}

-- Pending entries handed over per call of the removal script.
local HANDOVER_BATCH = 1000


--- Every consumer of the group, in Redis's order.
-- @return { {name, pending, idle_ms, alive}… } | nil, err, kind
function _M.list(client, stream, group, k)
    local reply, err, kind = client:call("XINFO", "CONSUMERS", stream, group)
    if type(reply) ~= "table" then
        return nil, err, kind
    end
    local list = {}
    for _, flat in ipairs(reply) do
        local c = redis.pairs_to_table(flat)
        local held, herr, hkind = client:call("EXISTS", k.consumer(c.name))
        if held == nil then
            return nil, herr, hkind
        end
        list[#list + 1] = { name = c.name, pending = c.pending, idle_ms = c.idle, alive = held == 1 }
    end
    return list
end


--- Removes the dead consumer `name`, its pending entries first claimed by
-- `heir` and made idle enough for the next reclaim sweep to take them: a
-- consumer deleted with entries would drop them from every PEL.
-- @return "deleted"|"alive", entries handed over | nil, err, kind
function _M.remove(client, stream, group, k, name, heir, reclaim_idle_ms)
    local handed = 0
    while true do
        local r, err, kind = redis.eval(client, scripts.reap_consumer, { stream, k.consumer(name) },
            { group, name, heir, 0, HANDOVER_BATCH, reclaim_idle_ms })
        if r == nil then
            return nil, err, kind
        end
        handed = handed + r[2]
        if r[1] ~= "claimed" then
            return r[1], handed
        end
    end
end


return _M
