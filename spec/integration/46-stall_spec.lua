-- False dead letters after a Redis stall or rollback: a TryStart that Redis
-- ran after the daemon gave up on its reply, and running markers a rolled
-- back Redis brought back, are this live daemon's own claims on attempts it
-- is not running. It takes them back uncharged instead of waiting for the
-- lease and charging them as lost. Test build (compressed constants), real
-- redis-server and runc; the client's watchdog is 10 s in every build.
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local APPS = "spec/fixtures/stall-apps"
local WATCHDOG_S = 10
local TOKEN = "[0-9a-f]+%.%d+"


local function signal_redis(w, sig)
    assert(os.execute("kill -" .. sig .. " " .. w.server:pid()) == 0)
end


local function starts_of(d, id, label)
    local inv = daemon.by_invocation({ d })[id .. " " .. label]
    return inv and inv.starts or {}
end


maybe("relay run after a Redis stall or rollback #compressed", function()
    local w

    before_each(function()
        w = world.new({ apps = assert(fs.realpath(APPS)) })
    end)

    after_each(function()
        pcall(signal_redis, w, "CONT")
        w:close()
        w = nil
    end)

    it("runs an attempt whose TryStart Redis executed after the watchdog reset the connection", function()
        local d = w:started("c1")
        local id = w:publish('{"t":"flaky"}')
        d:wait_until(function() return (w:inv(id)["st/flaky"] or ""):find("^waiting:1:") end, 10, "attempt 1 failed")
        -- The retry's TryStart is sent 1 s after the failure (the first
        -- backoff step) and sits in the socket until the watchdog resets the
        -- connection; Redis runs it on SIGCONT, for a claim nobody acts on.
        loop.sleep(0.3)
        signal_redis(w, "STOP")
        loop.sleep(WATCHDOG_S + 2)
        signal_redis(w, "CONT")
        d:wait_until(function() return w:inv(id)["~retained"] end, 30, "the message settled")

        assert.are.same({}, w:dlq())
        assert.matches("^succeeded:2:" .. TOKEN .. "$", w:inv(id)["st/flaky"])
        local starts = starts_of(d, id, "st/flaky")
        assert.are.equal(2, #starts)
        assert.are.same({ 1, 2 }, { starts[1].attempt, starts[2].attempt })
        assert.are.equal(0, w:pending())
    end)

    it("runs again, uncharged, invocations a Redis restart from an older snapshot shows as running", function()
        local d = w:started("c1", { MAX_CONCURRENCY = 4 })
        local ids = {}
        for i = 1, 4 do
            ids[i] = w:publish('{"t":"once","s":1.5,"i":' .. i .. '}')
        end
        d:wait_until(function()
            for _, id in ipairs(ids) do
                if not (w:inv(id)["st/once"] or ""):find("^running:") then
                    return false
                end
            end
            return true
        end, 15, "all four running")
        w:call("SAVE")  -- the snapshot the restart goes back to
        d:wait_until(function()
            for _, id in ipairs(ids) do
                if not w:inv(id)["~retained"] then
                    return false
                end
            end
            return true
        end, 15, "all four succeeded")
        w:stop_redis()
        w:start_redis()
        for _, id in ipairs(ids) do
            assert.matches("^running:1:", w:inv(id)["st/once"])  -- the rollback happened
        end
        d:wait_until(function()
            for _, id in ipairs(ids) do
                if not w:inv(id)["~retained"] then
                    return false
                end
            end
            return true
        end, 30, "all four settled again")

        assert.are.same({}, w:dlq())
        for _, id in ipairs(ids) do
            assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["st/once"])
            local starts = starts_of(d, id, "st/once")
            assert.are.equal(2, #starts, id)  -- at least once: the success was lost with the rollback
            assert.are.same({ 1, 1 }, { starts[1].attempt, starts[2].attempt })
        end
        assert.are.equal(0, w:pending())
    end)
end)
