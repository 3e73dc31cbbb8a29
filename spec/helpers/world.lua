--- One worker scenario's world: a private redis-server, an async client on
-- it, the daemons started against it, and the cleanup of all of them
-- (daemons, their leftover runc containers and cgroups, the state dir).
--   local w = world.new({ redis_args = "--appendonly yes" })
--   local d = w:daemon("c1", { MAX_CONCURRENCY = 4 })
--   local id = w:publish('{"t":"ok"}')
--   w:close()
local build = require("relay.core.build")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")
local runtime = require("relay.runtime")

local _M = {}
local World = {}
World.__index = World

local seq = 0


local function absolute(path)
    if path:sub(1, 1) == "/" then
        return path
    end
    local p = io.popen("pwd")
    local cwd = p:read("*l")
    p:close()
    return cwd .. "/" .. path
end

_M.APPS = absolute("spec/fixtures/worker-apps")


--- Whether this host can run the daemon suites: root, cgroups and every
-- tool named (default runc); compressed = true also needs the test build's
-- compressed lifecycle constants. A suite is `usable and describe or pending`.
function _M.usable(opts)
    opts = opts or {}
    if fs.geteuid() ~= 0 or runtime.cgroup_mode() == nil or (opts.compressed and not build.test_constants) then
        return false
    end
    for _, tool in ipairs(opts.tools or { "runc" }) do
        if not fs.which(tool) then
            return false
        end
    end
    return true
end


--- Closes a spec's world if it has one; returns nil, for
-- `after_each(function() w = world.close(w) end)`.
function _M.close(w)
    if w then
        w:close()
    end
    return nil
end


--- opts: redis_args (extra redis-server arguments), apps (default the
-- worker fixtures).
function _M.new(opts)
    opts = opts or {}
    seq = seq + 1
    local self = setmetatable({ daemons = {}, roots = {}, opts = opts }, World)
    self.tag = string.format("w%d-%d", loop.getpid(), seq)
    self.server = redis_server.start(opts.redis_args)
    self.r = assert(redis.connect(self.server.cfg))
    self.state_dir = daemon.tmpdir("state")
    self.apps = opts.apps or _M.APPS
    return self
end


--- A consumer name unique to this world (cgroups and runc roots are per
-- consumer name, so parallel or leftover runs never collide).
function World:consumer(name)
    return self.tag .. "-" .. name
end


--- Starts `relay run` as consumer `name` (made unique); env adds variables.
function World:daemon(name, env, opts)
    opts = opts or {}
    local consumer = self:consumer(name)
    env = env or {}
    -- a daemon's runtime root is named after its consumer, stream and group
    self.roots[#self.roots + 1] = { consumer = consumer, stream = env.REDIS_STREAM or "events",
        group = env.REDIS_GROUP or "relay" }
    local d = daemon.start({
        url = self.server.url, consumer = consumer, apps = opts.apps or self.apps,
        state_dir = self.state_dir, env = env, bin = opts.bin, args = opts.args,
    })
    self.daemons[#self.daemons + 1] = d
    return d
end


--- Waits until the daemon logged "relay started".
function World.ready(_, d, timeout)
    return d:wait_until(function() return d:count("relay started") > 0 end, timeout or 15, "relay started")
end


--- daemon(), then ready(): a daemon that has started.
function World:started(name, env, opts)
    local d = self:daemon(name, env, opts)
    self:ready(d)
    return d
end


--- Runs a command on the test client; raises on an error reply.
function World:call(...)
    local v, err = self.r:call(...)
    if v == nil then
        error("redis " .. tostring((...)) .. ": " .. tostring(err), 2)
    end
    return v
end


--- XADD events * event <text>; returns the id. A generous timeout: a
-- loaded host takes longer than the client's default 10 s to write a
-- 200 MB event.
function World:publish(event, stream)
    local id, err = self.r:call_timeout(120, "XADD", stream or "events", "*", "event", event)
    if id == nil then
        error("redis XADD: " .. tostring(err), 2)
    end
    return id
end


--- XADD with explicit fields.
function World:xadd(...)
    return self:call("XADD", "events", "*", ...)
end


--- Number of entries pending in the group (0 when the group is gone).
function World:pending(group)
    local v = self.r:call("XPENDING", "events", group or "relay")
    if type(v) ~= "table" then
        return 0
    end
    return tonumber(v[1]) or 0
end


--- The pending entries: { [id] = { consumer, idle, deliveries } }.
function World:pending_entries()
    local out = {}
    local v = self.r:call("XPENDING", "events", "relay", "-", "+", 100000)
    for _, e in ipairs(type(v) == "table" and v or {}) do
        out[e[1]] = { consumer = e[2], idle = e[3], deliveries = e[4] }
    end
    return out
end


--- The invocation hash of a message as a table (empty when absent).
function World:inv(id)
    return redis.pairs_to_table(self:call("HGETALL", "relay:events:inv:" .. id))
end


--- Whether every message of ids is settled (its state retained) and, with
-- label, has that invocation.
function World:all_retained(ids, label)
    for _, id in ipairs(ids) do
        local inv = self:inv(id)
        if not inv["~retained"] or (label and not inv[label]) then
            return false
        end
    end
    return true
end


function World:pttl(key)
    return self:call("PTTL", key)
end


--- DLQ entries, oldest first: { id, fields = {…}, names = {ordered field names} }.
function World:dlq()
    local out = {}
    for _, e in ipairs(self:call("XRANGE", "relay:events:dlq", "-", "+")) do
        local names = {}
        for i = 1, #e[2], 2 do
            names[#names + 1] = e[2][i]
        end
        out[#out + 1] = { id = e[1], fields = redis.pairs_to_table(e[2]), names = names }
    end
    return out
end


--- Redis TIME in ms.
function World:time_ms()
    local t = self:call("TIME")
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end


--- XINFO CONSUMERS as { [name] = pending }.
function World:consumers_pending()
    local out = {}
    local v = self.r:call("XINFO", "CONSUMERS", "events", "relay")
    for _, c in ipairs(type(v) == "table" and v or {}) do
        local t = redis.pairs_to_table(c)
        out[t.name] = tonumber(t.pending)
    end
    return out
end


--- Restarts redis-server on the same socket and directory (its data comes
-- back from the AOF/RDB there). kill9 = true kills it instead of SHUTDOWN.
function World:stop_redis()
    local pid = self.server:pid()
    os.execute("kill -9 " .. pid)
    daemon.wait_until(function() return not fs.exists("/proc/" .. pid) end, 5, "redis-server exit")
    os.remove(self.server.pidfile)
end


function World:start_redis()
    local s = self.server
    local cmd = string.format(
        "redis-server --port 0 --unixsocket %s --unixsocketperm 700 --save '' --appendonly no " ..
        "--daemonize yes --pidfile %s --logfile %s/redis.log --dir %s %s",
        s.sock, s.pidfile, s.dir, s.dir, self.opts.redis_args or "")
    assert(os.execute(cmd) == 0, cmd)
    daemon.wait_until(function() return self.server:pid() ~= nil end, 5, "redis-server pid file")
    daemon.wait_until(function()
        local c = redis.connect(s.cfg)
        if c then
            local ok = c:call("PING")
            c:close()
            return ok ~= nil and not tostring(ok):find("LOADING")
        end
    end, 10, "redis-server up")
    self.r:close()
    self.r = assert(redis.connect(s.cfg))
end


--- Starts `redis-cli MONITOR`; returns { lines = {…}, stop = function }.
function World:monitor()
    local proc = require("relay.core.proc")
    local m = { lines = {} }
    local h = assert(proc.spawn({
        argv = { "redis-cli", "-s", self.server.sock, "MONITOR" },
        on_line = function(stream, line)
            if stream == "stdout" then
                m.lines[#m.lines + 1] = line
            end
        end,
    }))
    daemon.wait_until(function() return m.lines[1] == "OK" end, 5, "MONITOR started")
    function m.stop()
        h:kill("KILL")
        h:wait(5)
    end
    self.monitors = self.monitors or {}
    self.monitors[#self.monitors + 1] = m
    return m
end


function World:close()
    for _, m in ipairs(self.monitors or {}) do
        pcall(m.stop)
    end
    for _, d in ipairs(self.daemons) do
        if not d.report then
            d:kill9()
        end
    end
    for _, root in ipairs(self.roots) do
        local rt = runtime.new({ runtime = "runc", state_dir = self.state_dir, consumer = root.consumer,
            stream = root.stream, group = root.group })
        pcall(function() rt:sweep() end)
        runtime.remove_cgroup_dirs(rt.cgroup_parent)
    end
    pcall(function() self.r:close() end)
    self.server:stop()
    fs.rm_rf(self.state_dir)
end


return _M
