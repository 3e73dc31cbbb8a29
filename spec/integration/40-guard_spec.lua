-- The consumer-name guard against a real redis-server (no daemon): a clean
-- stop gives the consumer name and the instance key up for good, even when
-- the heartbeat was asleep at that moment (41-worker_faults' drain spec saw
-- the name back after the stop).
local constants = require("relay.constants")
local guard = require("relay.guard")
local keys = require("relay.keys")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")
local tables = require("helpers.tables")

local EVERY_MS = 20


describe("the consumer guard", function()
    local server, r

    before_each(function()
        server = redis_server.start()
        r = assert(redis.connect(server.cfg))
    end)

    after_each(function()
        r:close()
        server:stop()
    end)

    it("beats no more once released, so the name stays given up", function()
        local c = tables.merged(constants, { heartbeat_every_ms = EVERY_MS, heartbeat_ttl_ms = 60 * 1000 })
        local g = guard.new({ client = r, stream = "events", consumer = "c1", instance = "i1", constants = c,
            shutdown = {} })
        g:claim()
        g:start_heartbeat()
        local k = keys.for_stream("events")
        assert.are.equal(1, r:call("EXISTS", k.consumer("c1")))
        assert.are.equal(1, r:call("EXISTS", k.instance("i1")))
        g:release() -- while the heartbeat sleeps
        assert.are.equal(0, r:call("EXISTS", k.consumer("c1")))
        -- what must not happen is a beat after the release: wait out several
        -- heartbeat periods, then look again
        loop.sleep(10 * EVERY_MS / 1000)
        assert.are.equal(0, r:call("EXISTS", k.consumer("c1")))
        assert.are.equal(0, r:call("EXISTS", k.instance("i1")))
    end)
end)
