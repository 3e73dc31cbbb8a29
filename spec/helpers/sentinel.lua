--- A private Sentinel-managed Redis on free local ports, for specs: a
-- primary, its replica and three Sentinels (redis-server --sentinel)
-- watching it as "relaymaster".
--   local s = sentinel.start()
--   s.url                 -- "redis+sentinel://127.0.0.1:<p>,…/relaymaster"
--   s:cli(port, "ROLE")   -- redis-cli against any of its ports
--   s:primary_port()      -- the port the Sentinels name now
--   s:stop()
local fs = require("relay.fs")
local http = require("relay.core.http")
local daemon = require("helpers.daemon")
local shell = require("helpers.shell")
local tmp = require("helpers.tmp")

local _M = {}
local Sentinels = {}
Sentinels.__index = Sentinels

local MASTER = "relaymaster"
local SENTINELS = 3


local function free_port(taken)
    for _ = 1, 100 do
        local s = assert(http.listen("127.0.0.1", 0, function() return 500, "text/plain", "" end))
        local port = s:port()
        s:close()
        if not taken[port] then
            taken[port] = true
            return port
        end
    end
    error("no free port")
end


local output = shell.output


-- Each look runs redis-cli: every 0.1 s is often enough.
local function wait_until(fn, seconds, what)
    return daemon.wait_until(fn, seconds, "sentinel: " .. what, 0.1)
end


function Sentinels:spawn(name, port, args)
    local dir = self.dir .. "/" .. name
    assert(fs.mkdir_p(dir, 493))
    local pidfile = dir .. "/redis.pid"
    self.pidfiles[#self.pidfiles + 1] = pidfile
    local cmd = string.format("redis-server %s --port %d --bind 127.0.0.1 --daemonize yes --pidfile %s " ..
        "--logfile %s/redis.log --dir %s", args, port, pidfile, dir, dir)
    assert(os.execute(cmd), cmd)
    wait_until(function() return self:cli(port, "PING") == "PONG" end, 10, name)
end


--- Starts the primary, the replica and the Sentinels, and waits until
-- every Sentinel knows the replica and the other Sentinels (a failover
-- needs both).
function _M.start()
    local self = setmetatable({ dir = tmp.mkdtemp("relay-sentinel-", 493), pidfiles = {}, sentinels = {} }, Sentinels)
    local ok, err = pcall(function()
        local taken = {}
        self.primary, self.replica = free_port(taken), free_port(taken)
        -- min-replicas-to-write: a primary cut off from its replica refuses writes (NOREPLICAS), so
        -- that nothing is written to an old primary after the failover promoted the replica
        local data = "--save '' --appendonly no --repl-diskless-sync-delay 0 --min-replicas-to-write 1 " ..
            "--min-replicas-max-lag 10"
        self:spawn("primary", self.primary, data)
        self:spawn("replica", self.replica, data .. " --replicaof 127.0.0.1 " .. self.primary)
        wait_until(function()
            return self:cli(self.replica, "INFO replication"):find("master_link_status:up", 1, true)
        end, 30, "the replica in sync")
        local addrs = {}
        for i = 1, SENTINELS do
            local port = free_port(taken)
            self.sentinels[i] = port
            addrs[i] = "127.0.0.1:" .. port
            local conf = self.dir .. "/sentinel" .. i .. ".conf"
            assert(fs.write_file(conf, table.concat({
                "sentinel monitor " .. MASTER .. " 127.0.0.1 " .. self.primary .. " 2",
                "sentinel down-after-milliseconds " .. MASTER .. " 1000",
                "sentinel failover-timeout " .. MASTER .. " 10000",
                "sentinel parallel-syncs " .. MASTER .. " 1", "",
            }, "\n")))
            self:spawn("sentinel" .. i, port, conf .. " --sentinel")
        end
        self.url = "redis+sentinel://" .. table.concat(addrs, ",") .. "/" .. MASTER
        for _, port in ipairs(self.sentinels) do
            wait_until(function()
                return self:cli(port, "SENTINEL replicas " .. MASTER):find(tostring(self.replica), 1, true)
                    and #self:cli(port, "SENTINEL sentinels " .. MASTER):gsub("[^\n]", "") > 0
            end, 30, "sentinel on " .. port .. " to know the replica and its peers")
        end
    end)
    if not ok then
        self:stop()
        error(err, 0)
    end
    return self
end


function Sentinels.cli(_, port, args)
    return output(string.format("redis-cli -p %d %s", port, args))
end


--- The port of the primary the Sentinels name now.
function Sentinels:primary_port()
    local reply = self:cli(self.sentinels[1], "SENTINEL get-master-addr-by-name " .. MASTER)
    return tonumber(reply:match("\n(%d+)$"))
end


--- Starts a failover (SENTINEL FAILOVER), without waiting for it.
function Sentinels:failover()
    return self:cli(self.sentinels[1], "SENTINEL FAILOVER " .. MASTER)
end


function Sentinels:stop()
    for _, pidfile in ipairs(self.pidfiles) do
        local pid = (fs.read_file(pidfile) or ""):match("%d+")
        if pid then
            os.execute("kill -9 " .. pid .. " 2>/dev/null")
        end
    end
    fs.rm_rf(self.dir)
end


return _M
