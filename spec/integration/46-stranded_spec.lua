-- Deleted and dead consumers: a retry whose consumer an operator deleted
-- (XGROUP DELCONSUMER) is in no pending list; a live replica's sweep
-- re-queues it with its state, and it runs to success. A dead consumer's
-- name is removed by a live replica once idle past the bound, and `relay
-- status` tells live consumers from dead ones. Test build (compressed
-- constants), real redis-server and runc.
local cjson = require("cjson")
local cli = require("helpers.cli")
local constants = require("relay.constants")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local redis = require("relay.redis")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local APPS = "spec/fixtures/stall-apps"
local TOKEN = "[0-9a-f]+%.%d+"
local DEAD_AFTER_S = 10 * constants.heartbeat_ttl_ms / 1000  -- relay.lifecycle's bound


--- The entry that re-queued id (its relay_replay_of), or nil.
local function requeued(w, id)
    for _, e in ipairs(w:call("XRANGE", "events", "-", "+")) do
        local f = redis.pairs_to_table(e[2])
        if f.relay_replay_of == id then
            return e[1], f
        end
    end
end


local function status(w)
    local r = cli.run({ "status", "--json" }, { REDIS_URL = w.server.url })
    assert.are.equal(0, r.code, r.stderr)
    local s = assert(cjson.decode(r.stdout))
    local by = {}
    for _, c in ipairs(s.consumers) do
        by[c.name] = c
    end
    return by
end


maybe("relay run with deleted and dead consumers #compressed", function()
    local w

    before_each(function()
        w = world.new({ apps = assert(fs.realpath(APPS)) })
    end)

    after_each(function()
        w:close()
        w = nil
    end)

    it("re-queues a retry whose consumer was deleted, and it runs to success with its attempts counted", function()
        local c1 = w:started("c1")
        local id = w:publish('{"t":"flaky"}')
        c1:wait_until(function() return (w:inv(id)["st/flaky"] or ""):find("^waiting:1:") end, 10, "attempt 1 failed")
        c1:kill9()
        assert(w:call("XGROUP", "DELCONSUMER", "events", "relay", w:consumer("c1")))
        assert.are.equal(0, w:pending())  -- in no pending list: nothing would ever redeliver it

        local c2 = w:started("c2")
        local new_id = c2:wait_until(function()
            local nid = requeued(w, id)
            return nid and w:inv(nid)["~retained"] and nid
        end, 15, "the re-queued invocation settled")

        local _, fields = requeued(w, id)
        assert.are.same({ event = '{"t":"flaky"}', relay_target = "st/flaky", relay_replay_of = id }, fields)
        assert.matches("^succeeded:2:" .. TOKEN .. "$", w:inv(new_id)["st/flaky"])
        assert.are.equal("1", w:inv(id)["~retained"])
        assert.is_true(w:pttl("relay:events:inv:" .. id) > 0)
        assert.are.same({}, w:dlq())
        assert.are.equal(0, w:pending())
        local starts = daemon.by_invocation({ c2 })[new_id .. " st/flaky"].starts
        assert.are.equal(1, #starts)
        assert.are.equal(2, starts[1].attempt)  -- its first attempt stays counted
        assert.are.equal(1, c2:count("re-queued an invocation whose message was in no pending list"))
    end)

    it("removes a dead consumer's name after its entries were taken over; status tells live from dead", function()
        local c1 = w:started("c1")
        local id = w:publish('{"t":"slow"}')
        c1:wait_until(function() return (w:inv(id)["st/slow"] or ""):find("^running:") end, 10, "running")
        c1:kill9()
        local c2 = w:started("c2")
        local dead, live = w:consumer("c1"), w:consumer("c2")
        local seen = c2:wait_until(function()
            local s = status(w)
            return s[dead] and s[live] and not s[dead].alive and s
        end, 10, "c1 shown dead")
        assert.is_true(seen[live].alive)
        c2:wait_until(function() return status(w)[dead] == nil end, DEAD_AFTER_S + 10, "c1 removed")
        c2:wait_until(function() return c2:count("removed a dead consumer") == 1 end, 5, "its log line")
        c2:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message settled")
        assert.matches("^succeeded:2:", w:inv(id)["st/slow"])
        assert.are.equal(0, w:pending())
        local r = cli.run({ "status" }, { REDIS_URL = w.server.url })
        assert.matches("\nconsumer\t" .. live:gsub("%-", "%%-") .. "\tpending 0\tidle %d+%.%ds\talive\n", r.stdout)
    end)
end)
