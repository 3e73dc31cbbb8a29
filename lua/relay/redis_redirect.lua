--- A daemon's client on a Redis Cluster: the interface of a relay.core.redis
-- async client (call, call_timeout, connected, info, close) that follows the
-- stream's slot. MOVED: the slot has a new owner (a reshard, a failover);
-- reconnect there and send the command again. ASK: the slot is migrating
-- and this key already moved; send ASKING and the command on a connection
-- of its own to the importing node (ASKING holds for the next command of
-- its connection only, which a shared one cannot promise). TRYAGAIN: the
-- keys are split by the migration for a moment; wait and send again. None
-- of these replies means the command ran, so sending it again is safe.
local cluster = require("relay.redis_cluster")
local loop = require("relay.core.loop")

local _M = {}

local Client = {}
Client.__index = Client

local MAX_REDIRECTS = 5
local TRYAGAIN_S = 0.1  -- times the attempt number: 1.5 s in all, a migration's usual moment
local MOVE_WAIT_S = 0.02  -- how often a task looks whether another one's move is done
local RETIRE_S = 5  -- a replaced connection is closed once its commands have had their replies


--- inner: a connected core client at addr; connect(addr) → client | nil, err.
function _M.wrap(inner, addr, connect)
    return setmetatable({ inner = inner, addr = addr, connect = connect, retired_reconnects = 0, scripts = {} },
        Client)
end


local function node_key(node)
    return node.host .. ":" .. node.port
end


--- Replaces the connection with one to node, once, however many tasks saw
-- the MOVED. @return true | nil, err
function Client:move_to(node)
    while self.moving do
        loop.sleep(MOVE_WAIT_S)
    end
    if self.addr.host == node.host and self.addr.port == node.port then
        return true  -- another task moved already
    end
    self.moving = true
    local addr = cluster.at(self.addr, node)
    local fresh, err = self.connect(addr)
    self.moving = false
    if not fresh then
        return nil, "cannot follow MOVED to " .. node_key(node) .. ": " .. tostring(err)
    end
    local old = self.inner
    self.retired_reconnects = self.retired_reconnects + old:info().reconnects
    self.inner, self.addr = fresh, addr
    loop.spawn(function()
        loop.sleep(RETIRE_S)
        old:close()
    end)
    return true
end


--- The script text behind an EVALSHA command, when this client loaded it.
function Client:script_of(args)
    local argv = type(args[1]) == "table" and args[1] or args
    if argv[1] == "EVALSHA" then
        return self.scripts[argv[2]]
    end
    return nil
end


local function asking(once, method, args)
    local ok, err, kind = once:call("ASKING")
    if ok == nil then
        return nil, err, kind
    end
    return once[method](once, unpack(args, 1, args.n))
end


--- One command on the importing node of a migrating slot. An EVALSHA
-- there may meet an empty script cache: the script is loaded and sent again.
function Client:ask(node, method, args)
    local once, err = self.connect(cluster.at(self.addr, node))
    if not once then
        return nil, "cannot follow ASK to " .. node_key(node) .. ": " .. tostring(err), "io"
    end
    local value, cerr, ckind = asking(once, method, args)
    local script = value == nil and tostring(cerr):find("^NOSCRIPT") and self:script_of(args)
    if script and once:call("SCRIPT", "LOAD", script) then
        value, cerr, ckind = asking(once, method, args)
    end
    once:close()
    return value, cerr, ckind
end


function Client:send(method, ...)
    local args = { n = select("#", ...), ... }
    local value, err, kind
    for attempt = 1, MAX_REDIRECTS do
        value, err, kind = self.inner[method](self.inner, unpack(args, 1, args.n))
        if value ~= nil and args[1] == "SCRIPT" and args[2] == "LOAD" then
            self.scripts[value] = args[3]  -- for a node met through ASK, whose cache may lack it
        end
        if value ~= nil or kind ~= "reply" then
            return value, err, kind
        end
        local code, node = cluster.redirection(err)
        if code == "MOVED" then
            local ok, merr = self:move_to(node)
            if not ok then
                return nil, merr, "io"
            end
        elseif code == "ASK" then
            return self:ask(node, method, args)
        elseif code == "TRYAGAIN" then
            loop.sleep(TRYAGAIN_S * attempt)
        else
            return value, err, kind
        end
    end
    return value, err, kind
end


require("relay.redis_wrapping").install(Client)


function Client:close()
    self.inner:close()
end


return _M
