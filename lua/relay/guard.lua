--- The consumer-name guard and the instance heartbeat: two live daemons
-- must never read as the same consumer, and other replicas must be able to
-- tell a live instance from a dead one.
local apps = require("relay.apps")
local config = require("relay.config")
local exit = require("relay.exit")
local fs = require("relay.fs")
local keys = require("relay.keys")
local log = require("relay.log")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local scripts = require("relay.scripts")

local _M = {}
local Guard = {}
Guard.__index = Guard


local function parse_holder(value)
    local host, pid, instance = tostring(value):match("^(.*):(%d+):([^:]*)$")
    return host, tonumber(pid), instance
end


local function pid_alive(pid)
    return fs.exists("/proc/" .. pid)
end


--- parts: { client, stream, consumer, instance, constants, shutdown }. The
-- heartbeat stops on release() or a forced shutdown.
function _M.new(parts)
    local self = setmetatable({}, Guard)
    self.client = parts.client
    self.keys = keys.for_stream(parts.stream)
    self.consumer = parts.consumer
    self.instance = parts.instance
    self.constants = parts.constants
    self.shutdown = parts.shutdown
    self.released = false
    return self
end


function Guard:try_claim(value, expected)
    return redis.eval(self.client, scripts.claim_consumer, { self.keys.consumer(self.consumer) },
        { value, self.constants.heartbeat_ttl_ms, expected or "" })
end


--- A dead holder's instance is dead too. Its instance key goes now; it is
-- declared dead (declare_dead) only once the start-up sweep has removed its
-- containers: until then one may still run.
function Guard:forget_instance(holder)
    local _, _, dead_instance = parse_holder(holder)
    if dead_instance and dead_instance ~= "" then
        self.client:call("DEL", self.keys.instance(dead_instance))
        self.taken_from = dead_instance
    end
end


--- Declares instances dead (relay:<stream>:dead:<instance>) after their
-- containers were removed on this host: TryStart then charges their running
-- attempts at once instead of waiting out the leases (relay.scripts). The
-- key outlives every lease an instance can have set, and no longer: after
-- that, every lease says as much. Returns how many could not be declared.
function Guard:declare_dead(instances)
    local failed = 0
    for _, instance in ipairs(instances) do
        if instance ~= self.instance then
            local ok = self.client:call("SET", self.keys.dead(instance), "1", "PX", self:dead_ttl_ms())
            failed = failed + (ok == nil and 1 or 0)
        end
    end
    return failed
end


function Guard:dead_ttl_ms()
    return apps.MAX_TIMEOUT_MS + self.constants.kill_grace_ms + self.constants.lease_margin_ms
end


--- A forced stop whose killed containers are all gone declares its own
-- instance dead: nothing of it runs any more, so other replicas charge its
-- running attempts at once instead of waiting out the leases. Bounded, as
-- the process is about to exit. @return true when recorded
function Guard:declare_self_dead(timeout_s)
    return self.client:call_timeout(timeout_s, "SET", self.keys.dead(self.instance), "1", "PX",
        self:dead_ttl_ms()) ~= nil
end


--- Claims the consumer name or exits 2 while another live process holds it.
-- A dead holder on this host is taken over at once; a holder on another
-- host once its key expires (waiting up to one TTL).
function Guard:claim()
    local host = config.hostname()
    local value = string.format("%s:%d:%s", host, loop.getpid(), self.instance)
    local deadline = loop.monotonic() + self.constants.heartbeat_ttl_ms / 1000 + 1
    local expected = ""
    while true do
        local reply, err = self:try_claim(value, expected)
        if not reply then
            exit.env("cannot claim consumer name " .. self.consumer .. ": " .. tostring(err))
        end
        if reply[1] == "ok" then
            self.value = value
            return
        end
        local holder = reply[2]
        local h_host, h_pid = parse_holder(holder)
        if h_host == host and h_pid and not pid_alive(h_pid) then
            log.warn("taking over the consumer name from a dead process", { consumer = self.consumer,
                holder = holder })
            expected = holder
            self:forget_instance(holder)
        elseif h_host == host then
            exit.env(string.format("consumer name %s is held by a live relay (pid %d); set RELAY_CONSUMER",
                self.consumer, h_pid or -1))
        elseif loop.monotonic() > deadline then
            exit.env(string.format("consumer name %s is held by a live relay on %s; set RELAY_CONSUMER",
                self.consumer, tostring(h_host)))
        else
            expected = ""
            loop.sleep(0.5)
        end
    end
end


function Guard:beat()
    local ok, err = redis.eval(self.client, scripts.heartbeat,
        { self.keys.instance(self.instance), self.keys.consumer(self.consumer) },
        { self.value, self.constants.heartbeat_ttl_ms })
    if ok == nil then
        log.failing("heartbeat", "heartbeat failed", { error = err })
    elseif ok == 0 then
        log.error("another process took over this consumer name", { consumer = self.consumer })
    else
        log.recovered("heartbeat", "heartbeat works again")
    end
end


--- Refreshes the instance and consumer keys every heartbeat period.
function Guard:start_heartbeat()
    self:beat()
    loop.spawn(function()
        local function stopped()
            return self.released or self.shutdown.forced
        end
        while not stopped() do
            loop.sleep(self.constants.heartbeat_every_ms / 1000)
            -- a release during the sleep is final: a beat now would set the
            -- consumer and instance keys again after they were given up
            if not stopped() then
                self:beat()
            end
        end
    end)
end


--- Gives the consumer name and instance key up on a clean stop.
function Guard:release()
    self.released = true
    redis.eval(self.client, scripts.release_consumer,
        { self.keys.consumer(self.consumer), self.keys.instance(self.instance) }, { self.value })
end


return _M
