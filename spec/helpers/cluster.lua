--- A private 3-master Redis Cluster on free local ports, for specs:
--   local c = cluster.start()
--   c.nodes[i].port, c.nodes[i].url   -- "redis://127.0.0.1:<port>/0"
--   c:cli(i, "CLUSTER KEYSLOT x")     -- redis-cli against node i
--   c:owner("{orders}")               -- index of the node serving that key
--   c:stop()
local fs = require("relay.fs")
local http = require("relay.core.http")
local loop = require("relay.core.loop")
local daemon = require("helpers.daemon")
local shell = require("helpers.shell")
local tmp = require("helpers.tmp")

local _M = {}
local Cluster = {}
Cluster.__index = Cluster

local MASTERS = 3
local BUS_OFFSET = 10000  -- Redis Cluster's bus listens on port + 10000


local function listenable(port)
    local s = http.listen("127.0.0.1", port, function() return 500, "text/plain", "" end)
    if s then
        s:close()
    end
    return s ~= nil
end


--- A port that is free, and whose bus port is free too.
local function free_port(taken)
    for _ = 1, 200 do
        local s = assert(http.listen("127.0.0.1", 0, function() return 500, "text/plain", "" end))
        local port = s:port()
        s:close()
        if port + BUS_OFFSET < 65536 and not taken[port] and listenable(port + BUS_OFFSET) then
            taken[port] = true
            return port
        end
    end
    error("no free port pair for a cluster node")
end


local sh, output = shell.ok, shell.output


-- Each look runs redis-cli: every 0.1 s is often enough.
local function wait_until(fn, seconds, what)
    return daemon.wait_until(fn, seconds, "cluster: " .. what, 0.1)
end


--- Starts the nodes, joins them with redis-cli --cluster create and waits
-- for cluster_state:ok on every node.
function _M.start()
    local self = setmetatable({ dir = tmp.mkdtemp("relay-cluster-", 493), nodes = {} }, Cluster)
    local taken = {}
    for i = 1, MASTERS do
        local port = free_port(taken)
        local dir = self.dir .. "/n" .. i
        assert(fs.mkdir_p(dir, 493))
        local node = { port = port, dir = dir, pidfile = dir .. "/redis.pid",
            url = "redis://127.0.0.1:" .. port .. "/0" }
        self.nodes[i] = node
        local ok = sh(string.format(
            "redis-server --port %d --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file %s/nodes.conf " ..
            "--cluster-node-timeout 5000 --save '' --appendonly no --daemonize yes --pidfile %s " ..
            "--logfile %s/redis.log --dir %s", port, dir, node.pidfile, dir, dir))
        if not ok then
            self:stop()
            error("cannot start cluster node " .. i)
        end
    end
    for i = 1, MASTERS do
        wait_until(function() return self:cli(i, "PING") == "PONG" end, 10, "node " .. i)
    end
    local addrs = {}
    for i, node in ipairs(self.nodes) do
        addrs[i] = "127.0.0.1:" .. node.port
    end
    local created = output("redis-cli --cluster create " .. table.concat(addrs, " ") .. " --cluster-yes")
    if not created:find("All 16384 slots covered", 1, true) then
        self:stop()
        error("redis-cli --cluster create failed:\n" .. created)
    end
    for i = 1, MASTERS do
        wait_until(function() return self:cli(i, "CLUSTER INFO"):find("cluster_state:ok", 1, true) end, 30,
            "cluster_state:ok on node " .. i)
    end
    return self
end


--- redis-cli against node i; its trimmed output.
function Cluster:cli(i, args)
    return output(string.format("redis-cli -p %d %s", self.nodes[i].port, args))
end


--- The index of the node that serves key's slot.
function Cluster:owner(key)
    for i = 1, #self.nodes do
        local reply = self:cli(i, "EXISTS " .. "'" .. key .. "'")
        if not reply:find("MOVED", 1, true) then
            return i
        end
    end
    error("no node serves " .. key)
end


--- A node that does not serve key's slot.
function Cluster:non_owner(key)
    local owner = self:owner(key)
    return owner % #self.nodes + 1
end


--- The first step of moving a slot from node `from` to node `to`:
-- IMPORTING on the new owner, MIGRATING on the old one.
function Cluster:begin_migration(slot, from, to)
    local from_id, to_id = self:cli(from, "CLUSTER MYID"), self:cli(to, "CLUSTER MYID")
    assert(self:cli(to, string.format("CLUSTER SETSLOT %d IMPORTING %s", slot, from_id)) == "OK")
    assert(self:cli(from, string.format("CLUSTER SETSLOT %d MIGRATING %s", slot, to_id)) == "OK")
end


--- MIGRATE of keys (a list) from node `from` to node `to`.
function Cluster:migrate(from, to, keys)
    local quoted = {}
    for i, key in ipairs(keys) do
        quoted[i] = "'" .. key .. "'"
    end
    local reply = self:cli(from, string.format("MIGRATE 127.0.0.1 %d '' 0 5000 KEYS %s", self.nodes[to].port,
        table.concat(quoted, " ")))
    assert(reply == "OK" or reply == "NOKEY", reply)
end


--- The rest of a slot's move: its keys a few at a time, then the new owner
-- announced to every node (the new owner first, then the old one, then the
-- rest, as redis-cli --cluster reshard does, so that no two nodes send a
-- client back and forth).
function Cluster:finish_migration(slot, from, to)
    while true do
        local keys = {}
        for key in self:cli(from, string.format("CLUSTER GETKEYSINSLOT %d 3", slot)):gmatch("[^\n]+") do
            keys[#keys + 1] = key
        end
        if #keys == 0 then
            break
        end
        self:migrate(from, to, keys)
        loop.sleep(0.05)  -- a reshard takes a while: let the daemon meet ASK and TRYAGAIN meanwhile
    end
    local to_id = self:cli(to, "CLUSTER MYID")
    local order = { to, from }
    for i = 1, #self.nodes do
        if i ~= to and i ~= from then
            order[#order + 1] = i
        end
    end
    for _, i in ipairs(order) do
        assert(self:cli(i, string.format("CLUSTER SETSLOT %d NODE %s", slot, to_id)) == "OK")
    end
end


--- Moves one slot from node `from` to node `to` as a reshard does.
function Cluster:move_slot(slot, from, to)
    self:begin_migration(slot, from, to)
    self:finish_migration(slot, from, to)
end


function Cluster:stop()
    for _, node in ipairs(self.nodes) do
        local pid = fs.read_file(node.pidfile)
        if pid and pid:match("%d+") then
            sh("kill -9 " .. pid:match("%d+") .. " 2>/dev/null")
        end
    end
    fs.rm_rf(self.dir)
end


return _M
