-- relay.redis_failover: a daemon's client on a Sentinel-managed Redis
-- follows a switch of the primary even while every command still succeeds
-- on the old one (the watcher), and stops asking once closed.
local failover = require("relay.redis_failover")
local loop = require("relay.core.loop")

describe("redis_failover", function()
    local real_every

    before_each(function()
        real_every = failover.WATCH_EVERY_S
        failover.WATCH_EVERY_S = 0.02
    end)

    after_each(function()
        failover.WATCH_EVERY_S = real_every
    end)

    -- Sentinels on port 26379 name `primary.port`; every other port is a
    -- server that says it is a primary and answers every command.
    local function fake_world()
        local world = { primary = { port = 7001 }, asked = 0, closed = {}, closed_clients = {}, connects = {} }
        function world.connect(addr)
            local client = { port = addr.port }
            world.connects[addr.port] = (world.connects[addr.port] or 0) + 1
            if addr.port == 26379 then
                world.last_sentinel = client
            end
            function client.call(self, cmd)
                if self == world.broken then
                    return nil, "connection lost", "io"
                end
                if addr.port == 26379 and cmd == "SENTINEL" then
                    world.asked = world.asked + 1
                    return { "127.0.0.1", tostring(world.primary.port) }
                elseif cmd == "ROLE" then
                    return { "master" }
                end
                return "OK"
            end
            function client.close(self)
                world.closed[addr.port] = true
                world.closed_clients[self] = true
            end
            function client.info() return { reconnects = 0 } end
            return client
        end
        return world
    end

    local ADDR = { sentinels = { { host = "127.0.0.1", port = 26379 } }, master = "m", db = 0 }

    it("moves to the primary the Sentinels name, with no command failing first", function()
        local world = fake_world()
        local client = assert(failover.connect(ADDR, world.connect))
        assert.are.equal(7001, client.node.port)
        world.primary.port = 7002
        local deadline = loop.monotonic() + 5
        while client.node.port ~= 7002 and loop.monotonic() < deadline do
            loop.sleep(0.01)
        end
        assert.are.equal(7002, client.node.port)
        assert.are.equal("OK", client:call("PING"))
        client:close()
        local asked = world.asked
        loop.sleep(0.1)
        assert.are.equal(asked, world.asked, "the watcher stopped asking once closed")
    end)

    it("asks the Sentinel on one kept connection, and connects again when it stops answering", function()
        local world = fake_world()
        local client = assert(failover.connect(ADDR, world.connect))
        local first = world.connects[26379]
        local function wait_for(what, ok)
            local deadline = loop.monotonic() + 10
            while not ok() and loop.monotonic() < deadline do
                loop.sleep(0.01)
            end
            assert.is_true(ok(), what)
        end
        wait_for("the watcher asked 4 more times", function() return world.asked >= first + 4 end)
        assert.are.equal(first + 1, world.connects[26379], "one connection for all of the watcher's asks")
        world.broken = world.last_sentinel
        wait_for("a new connection after the kept one failed", function() return world.connects[26379] == first + 2 end)
        local asked = world.asked
        wait_for("the watcher asks on the new one", function() return world.asked >= asked + 2 end)
        assert.are.equal(first + 2, world.connects[26379])
        assert.is_true(world.closed_clients[world.broken], "the failed connection was closed")
        client:close()
        assert.is_true(world.closed_clients[world.last_sentinel], "closing the client closes its Sentinel connection")
    end)
end)
