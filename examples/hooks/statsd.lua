--- StatsD over UDP (RELAY_HOOKS=examples/hooks/statsd.lua).
--
-- Edit HOST, PORT and PREFIX below: hooks cannot read the environment,
-- which holds Relay's secrets (the Redis password).
--
-- relay.udp resolves a host name only here, while the file loads; its
-- send never blocks: a datagram the kernel cannot take is dropped.
-- luacheck: globals relay
local HOST = "127.0.0.1"
local PORT = 8125
local PREFIX = "relay"

local sock = assert(relay.udp(HOST, PORT))


local function name(s)
    return (tostring(s or "-"):gsub("[^%w_%-]", "_"))
end


local function count(metric)
    sock:send(PREFIX .. "." .. metric .. ":1|c")
end


return {
    on_event = function(e)
        count("events." .. name(e.outcome))
    end,

    on_attempt = function(a)
        local base = "attempts." .. name(a.app) .. "." .. name(a.handler)
        count(base .. "." .. name(a.outcome))
        if a.duration_ms then
            sock:send(string.format("%s.%s.duration:%d|ms", PREFIX, base, a.duration_ms))
        end
    end,

    on_dlq = function(d)
        count("dlq." .. name(d.app) .. "." .. name(d.handler))
    end,
}
