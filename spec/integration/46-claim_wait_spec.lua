-- RELAY_CLAIM_WAIT=N/timeout against a real primary and replica: a claim
-- starts its container only once N replicas acknowledged it; while they do
-- not, nothing starts and the claim is given back uncharged, then taken
-- again once they do. Test build (compressed constants: the retry comes
-- after one slot wait), real redis-server pair and runc.
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local redis_server = require("helpers.redis")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local APPS = "spec/fixtures/stall-apps"
local TOKEN = "[0-9a-f]+%.%d+"


--- A world whose redis-server also listens on a loopback TCP port (a
-- replica needs one), and that port.
local function world_with_port()
    local last
    for _ = 1, 10 do
        local port = 20000 + math.random(0, 20000)
        local ok, w = pcall(world.new, { apps = assert(fs.realpath(APPS)),
            redis_args = "--port " .. port .. " --bind 127.0.0.1 --repl-diskless-sync-delay 0" })
        if ok then
            return w, port
        end
        last = w
    end
    error(last)
end


local function info_field(server, section, name)
    return server:cli("INFO " .. section):match(name .. ":([^\r\n]*)")
end


maybe("relay run with RELAY_CLAIM_WAIT #compressed", function()
    local w, replica, port

    before_each(function()
        math.randomseed(loop.getpid() + os.time())
        w, port = world_with_port()
        replica = redis_server.start("--replicaof 127.0.0.1 " .. port)
        daemon.wait_until(function() return info_field(replica, "replication", "master_link_status") == "up" end,
            15, "the replica in sync")
    end)

    after_each(function()
        pcall(os.execute, "kill -CONT " .. tostring(replica:pid()))
        replica:stop()
        w:close()
    end)

    it("starts a claim the replica acknowledged", function()
        local d = w:started("c1", { RELAY_CLAIM_WAIT = "1/300ms" })
        local id = w:publish('{"t":"once"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message settled")
        assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["st/once"])
        assert.matches("calls=%d+", info_field(w.server, "commandstats", "cmdstat_wait"))
        assert.are.equal(1, d:count("claims wait for replica acknowledgement"))
    end)

    it("starts nothing while the replica does not acknowledge, and charges nothing", function()
        local d = w:started("c1", { RELAY_CLAIM_WAIT = "1/300ms" })
        assert(os.execute("kill -STOP " .. replica:pid()) == 0)
        local id = w:publish('{"t":"once"}')
        d:wait_until(function() return d:count("replicas do not acknowledge claims; nothing starts") == 1 end, 10,
            "the refused claim")
        d:wait_until(function() return w:inv(id)["st/once"] == nil end, 5, "the claim given back")
        assert.are.same({}, d:runs())
        assert(os.execute("kill -CONT " .. replica:pid()) == 0)
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message settled")
        assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["st/once"])  -- attempt 1: nothing was charged
        local starts = daemon.by_invocation({ d })[id .. " st/once"].starts
        assert.are.equal(1, #starts)
        assert.are.equal(1, d:count("replicas acknowledge claims again"))
        assert.are.equal(1, d:count("replicas do not acknowledge claims; nothing starts"))
        assert.are.same({}, w:dlq())
    end)
end)
