--- A daemon's client on a Sentinel-managed Redis: the interface of a
-- relay.core.redis async client (call, call_timeout, connected, info,
-- close) that follows the primary. A READONLY or MASTERDOWN reply (the
-- server is a replica now), NOREPLICAS (a primary cut off from its
-- replicas, as the old one is during a failover), or a lost connection,
-- makes it ask the Sentinels again; when they name another primary (ROLE
-- confirms it), it reconnects there. A command refused so did not run, so
-- it is sent again on the new primary; after a lost connection the command
-- may have run, so its error goes back to the caller, whose retries are
-- made for that (tokens, idempotent scripts), and only later commands go
-- to the new primary. Besides, a watcher asks the Sentinels every
-- WATCH_EVERY_S, so a switch is followed even while every command still
-- succeeds on the old primary: the binding has no pub/sub for Sentinel's
-- +switch-master message, and this asks the same question it answers.
local loop = require("relay.core.loop")
local sentinel = require("relay.redis_sentinel")

local _M = {}

local Client = {}
Client.__index = Client

local LOOK_EVERY_S = 0.5  -- a dead primary fails every command: ask the Sentinels at most this often
local WAIT_S = 0.02  -- how often a task looks whether another one's look is done
local RETIRE_S = 5  -- a replaced connection is closed once its commands have had their replies
_M.WATCH_EVERY_S = 2


--- connect(addr) → core client | nil, err. @return client | nil, err, kind
function _M.connect(addr, connect)
    local inner, node_or_err, kind = sentinel.connect_primary(addr, connect)
    if not inner then
        return nil, node_or_err, kind
    end
    local self = setmetatable({ inner = inner, addr = addr, node = node_or_err, connect = connect,
        asker = sentinel.asker(addr, connect), retired_reconnects = 0, looked_at = 0 }, Client)
    loop.spawn(function()
        while not self.closed do
            loop.sleep(_M.WATCH_EVERY_S)
            if not self.closed then
                self:follow()
            end
        end
    end)
    return self
end


local function suspect(err, kind)
    local text = tostring(err)
    return kind == "io" or (kind == "reply" and (text:find("^READONLY") or text:find("^MASTERDOWN")
        or text:find("^NOREPLICAS")) ~= nil)
end


--- Asks the Sentinels for the primary and moves there when it changed.
-- @return true when it moved (or another task just did)
function Client:follow()
    local before = self.inner
    while self.looking do
        loop.sleep(WAIT_S)
    end
    if self.inner ~= before then
        return true
    end
    if loop.monotonic() - self.looked_at < LOOK_EVERY_S then
        return false
    end
    self.looking, self.looked_at = true, loop.monotonic()
    local moved = false
    local node = self.asker:primary()
    if node and (node.host ~= self.node.host or node.port ~= self.node.port) then
        local fresh = self.connect(sentinel.at(self.addr, node))
        if fresh and sentinel.is_primary(fresh) then
            local old = self.inner
            self.retired_reconnects = self.retired_reconnects + old:info().reconnects
            self.inner, self.node, moved = fresh, node, true
            loop.spawn(function()
                loop.sleep(RETIRE_S)
                old:close()
            end)
        elseif fresh then
            fresh:close()
        end
    end
    self.looking = false
    return moved
end


function Client:send(method, ...)
    local value, err, kind = self.inner[method](self.inner, ...)
    if value ~= nil or not suspect(err, kind) then
        return value, err, kind
    end
    if self:follow() and kind == "reply" then
        return self.inner[method](self.inner, ...)
    end
    return value, err, kind
end


require("relay.redis_wrapping").install(Client)


function Client:close()
    self.closed = true
    self.asker:close()
    self.inner:close()
end


return _M
