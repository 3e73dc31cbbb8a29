--- The consumer-name guard and the instance heartbeat (relay.md section 5):
-- two live daemons must never read as the same consumer, and other
-- replicas must be able to tell a live instance from a dead one.
local exit = require("relay.exit")
local fs = require("relay.fs")
local log = require("relay.log")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}


local function hostname()
    local f = io.open("/proc/sys/kernel/hostname", "r")
    local name = f and f:read("*l") or "localhost"
    if f then
        f:close()
    end
    return name
end


local function parse_holder(value)
    local host, pid, instance = tostring(value):match("^(.*):(%d+):([^:]*)$")
    return host, tonumber(pid), instance
end


local function pid_alive(pid)
    return fs.exists("/proc/" .. pid)
end


local function try_claim(w, value, expected)
    return redis.eval(w.client, scripts.claim_consumer, { w.keys.consumer(w.cfg.consumer) },
        { value, w.constants.heartbeat_ttl_ms, expected or "" })
end


--- Claims the consumer name or exits 2 while another live process holds it.
-- A dead holder on this host is taken over at once; a holder on another
-- host once its key expires (waiting up to one TTL).
function _M.claim(w)
    local host = hostname()
    local value = string.format("%s:%d:%s", host, loop.getpid(), w.instance)
    local deadline = loop.monotonic() + w.constants.heartbeat_ttl_ms / 1000 + 1
    local expected = ""
    while true do
        local reply, err = try_claim(w, value, expected)
        if not reply then
            exit.env("cannot claim consumer name " .. w.cfg.consumer .. ": " .. tostring(err))
        end
        if reply[1] == "ok" then
            w.guard_value = value
            return
        end
        local holder = reply[2]
        local h_host, h_pid = parse_holder(holder)
        if h_host == host and h_pid and not pid_alive(h_pid) then
            log.warn("taking over the consumer name from a dead process", { consumer = w.cfg.consumer,
                holder = holder })
            expected = holder
            -- Its instance is dead too: say so now, so that its running
            -- markers count as lost at once instead of after the key's TTL.
            local _, _, dead_instance = parse_holder(holder)
            if dead_instance and dead_instance ~= "" then
                w.client:call("DEL", w.keys.instance(dead_instance))
            end
        elseif h_host == host then
            exit.env(string.format("consumer name %s is held by a live relay (pid %d); set RELAY_CONSUMER",
                w.cfg.consumer, h_pid or -1))
        elseif loop.monotonic() > deadline then
            exit.env(string.format("consumer name %s is held by a live relay on %s; set RELAY_CONSUMER",
                w.cfg.consumer, tostring(h_host)))
        else
            expected = ""
            loop.sleep(0.5)
        end
    end
end


--- Refreshes the instance and consumer keys every heartbeat period.
function _M.start_heartbeat(w)
    local function beat()
        local ok, err = redis.eval(w.client, scripts.heartbeat,
            { w.keys.instance(w.instance), w.keys.consumer(w.cfg.consumer) },
            { w.guard_value, w.constants.heartbeat_ttl_ms })
        if ok == nil then
            log.warn("heartbeat failed", { error = err })
        elseif ok == 0 then
            log.error("another process took over this consumer name", { consumer = w.cfg.consumer })
        end
    end
    beat()
    loop.spawn(function()
        while not w.killed do
            loop.sleep(w.constants.heartbeat_every_ms / 1000)
            beat()
        end
    end)
end


--- Gives the consumer name and instance key up on a clean stop.
function _M.release(w)
    w.killed = true
    redis.eval(w.client, [[
        if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
        redis.call('DEL', KEYS[2])
        return 1
    ]], { w.keys.consumer(w.cfg.consumer), w.keys.instance(w.instance) }, { w.guard_value })
end


return _M
