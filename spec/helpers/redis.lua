--- A private redis-server on a unix socket in a temp dir, for specs.
--   local server = redis_server.start()
--   server.cfg     -- a relay.config table pointing at it (stream "events")
--   server.url     -- "unix:///tmp/…/redis.sock"
--   server:stop()
local config = require("relay.config")
local tmp = require("helpers.tmp")

local _M = {}

local Server = {}
Server.__index = Server


local sh = require("helpers.shell").ok


local function wait_for(path, seconds)
    local loop = require("relay.core.loop")
    local deadline = loop.monotonic() + seconds
    while loop.monotonic() < deadline do
        -- io.open cannot open a socket, so ask test(1).
        if sh("test -e " .. path) then
            return true
        end
        loop.sleep(0.02)
    end
    return false
end


--- Starts redis-server; extra is a string of additional config arguments.
function _M.start(extra)
    -- 0755: specs keep daemon state, which handlers' containers mount, in it.
    local dir = tmp.mkdtemp("relay-redis-", 493)
    local self = setmetatable({ dir = dir, sock = dir .. "/redis.sock", pidfile = dir .. "/redis.pid" }, Server)
    local cmd = string.format(
        "redis-server --port 0 --unixsocket %s --unixsocketperm 700 --save '' --appendonly no " ..
        "--daemonize yes --pidfile %s --logfile %s/redis.log --dir %s %s",
        self.sock, self.pidfile, dir, dir, extra or "")
    assert(sh(cmd), "cannot start redis-server: " .. cmd)
    if not (wait_for(self.sock, 5) and wait_for(self.pidfile, 5)) then
        local f = io.open(dir .. "/redis.log", "r")
        local log_text = f and f:read("*a") or ""
        if f then
            f:close()
        end
        self:stop()  -- never leave a daemonized server behind
        error("redis-server did not start on " .. self.sock .. ":\n" .. log_text, 2)
    end
    self.url = "unix://" .. self.sock
    self.cfg = self:config()
    return self
end


--- A relay config for this server; overrides are environment variables.
function Server:config(env)
    local vars = { REDIS_URL = self.url }
    for k, v in pairs(env or {}) do
        vars[k] = v
    end
    return assert(config.load(vars))
end


function Server:pid()
    local f = io.open(self.pidfile, "r")
    local pid = f and f:read("*n")
    if f then
        f:close()
    end
    return pid
end


--- Runs redis-cli against this server and returns its trimmed output.
function Server:cli(args)
    local p = io.popen("redis-cli -s " .. self.sock .. " " .. args .. " 2>&1")
    local out = p:read("*a")
    p:close()
    return (out:gsub("%s+$", ""))
end


function Server:stop()
    local pid = self:pid()
    if pid then
        sh("kill -9 " .. pid .. " 2>/dev/null")
    end
    sh("rm -rf " .. self.dir)
end


return _M
