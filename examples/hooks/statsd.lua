--- StatsD over UDP (RELAY_HOOKS=examples/hooks/statsd.lua).
--
--   STATSD_HOST (default 127.0.0.1), STATSD_PORT (default 8125),
--   STATSD_PREFIX (default "relay")
--
-- relay.udp resolves a host name only here, while the file loads; its
-- send never blocks: a datagram the kernel cannot take is dropped.
-- luacheck: globals relay
local host = os.getenv("STATSD_HOST") or "127.0.0.1"
local port = tonumber(os.getenv("STATSD_PORT") or "8125")
local prefix = os.getenv("STATSD_PREFIX") or "relay"

local sock = assert(relay.udp(host, port))


local function name(s)
    return (tostring(s or "-"):gsub("[^%w_%-]", "_"))
end


local function count(metric)
    sock:send(prefix .. "." .. metric .. ":1|c")
end


return {
    on_event = function(e)
        count("events." .. name(e.outcome))
    end,

    on_attempt = function(a)
        local base = "attempts." .. name(a.app) .. "." .. name(a.handler)
        count(base .. "." .. name(a.outcome))
        if a.duration_ms then
            sock:send(string.format("%s.%s.duration:%d|ms", prefix, base, a.duration_ms))
        end
    end,

    on_dlq = function(d)
        count("dlq." .. name(d.app) .. "." .. name(d.handler))
    end,
}
