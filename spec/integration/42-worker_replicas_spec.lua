-- `relay run` with several replicas and against outside interference with
-- the stream (replicas sharing the stream, zombie fencing, the consumer guard), on the test
-- build's compressed constants. Real redis-server, real runc.
local daemon = require("helpers.daemon")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local TOKEN = "[0-9a-f]+%.%d+"


local function missing_total(w)
    return tonumber(w:call("HGET", "relay:events:stats", "missing_payload_total")) or 0
end


maybe("relay run replicas and stream interference #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("never overlaps two runs of one invocation across 3 replicas racing to reclaim (R9)", function()
        w = world.new()
        local ds = { w:daemon("r1"), w:daemon("r2"), w:daemon("r3") }
        for _, d in ipairs(ds) do
            w:ready(d)
        end
        local sleeps = { 0, 0.4, 1.3, 2.2, 3 }
        local ids = {}
        for i = 1, 150 do
            ids[i] = w:publish(string.format('{"t":"sleep","s":%s,"i":%d}', sleeps[i % #sleeps + 1], i))
        end
        -- watch the PEL: entries delivered again while their handler runs
        -- elsewhere show that the replicas really race for them
        local redelivered, watching = {}, true
        loop.spawn(function()
            while watching do
                for id, e in pairs(w:pending_entries()) do
                    if e.deliveries >= 2 then
                        redelivered[id] = true
                    end
                end
                loop.sleep(0.1)
            end
        end)
        local t0 = loop.monotonic()
        ds[1]:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 120, "everything settled")
        watching = false
        local took = loop.monotonic() - t0

        local runs = daemon.by_invocation(ds)
        local per_replica, lost = {}, 0
        for _, id in ipairs(ids) do
            local inv = runs[id .. " wa/sleep"]
            assert.is_truthy(inv, "never started: " .. id)
            local marker = w:inv(id)["wa/sleep"]
            if #inv.starts == 1 then
                -- one run, once, as attempt 1: reclaim churn charges nothing
                assert.are.equal(1, #inv.ends, "ends of " .. id)
                assert.are.equal(1, inv.starts[1].attempt)
                assert.are.equal(inv.starts[1].daemon, inv.ends[1].daemon)
                assert.matches("^succeeded:1:" .. TOKEN .. "$", marker)
            else
                -- only a retry after a lost attempt (a stalled heartbeat) may
                -- run it again: each run is a new, charged attempt
                for i = 2, #inv.starts do
                    assert.are.equal(inv.starts[i - 1].attempt + 1, inv.starts[i].attempt, "reruns of " .. id)
                end
                assert.matches("^succeeded:" .. #inv.starts .. ":" .. TOKEN .. "$", marker)
                lost = lost + 1
            end
            per_replica[inv.starts[1].daemon] = (per_replica[inv.starts[1].daemon] or 0) + 1
        end
        -- losses are rare accidents, not the mechanism
        assert.is_true(lost <= 3, lost .. " invocations ran more than once")
        -- I4 over every run of every invocation (also if one ever ran twice)
        for key, inv in pairs(runs) do
            local intervals = {}
            for _, s in ipairs(inv.starts) do
                local e
                for _, x in ipairs(inv.ends) do
                    if x.daemon == s.daemon and x.attempt == s.attempt then
                        e = x
                    end
                end
                intervals[#intervals + 1] = { s.us, e and e.us or math.huge }
            end
            table.sort(intervals, function(a, b) return a[1] < b[1] end)
            for i = 2, #intervals do
                assert.is_true(intervals[i - 1][2] <= intervals[i][1], "overlapping runs of " .. key)
            end
        end
        for _, d in ipairs(ds) do
            assert.is_true((per_replica[d] or 0) >= 1, "a replica ran nothing")
            assert.is_true(d:alive())
        end
        assert.is_true(next(redelivered) ~= nil, "no entry was ever redelivered: the race was not exercised")
        assert.are.same({}, w:dlq())
        assert.are.equal(0, w:pending())
        assert.is_true(took < 120)
    end)

    it("counts pending entries deleted before the ACK exactly once, live and across a restart (R11)", function()
        w = world.new()
        local d1 = w:started("c1")
        local ids = {}
        for i = 1, 3 do
            ids[i] = w:publish(string.format('{"t":"sleep","s":2,"i":%d}', i))
        end
        d1:wait_until(function() return #d1:runs("start") == 3 end, 10, "three running")
        assert.are.equal(2, w:call("XDEL", "events", ids[1], ids[2]))
        d1:wait_until(function() return #d1:runs("end") == 3 and w:pending() == 0 end, 15, "PEL drained")
        d1:wait_until(function() return w:all_retained(ids) end, 5, "states retained")
        assert.are.equal(2, missing_total(w))
        assert.is_true(d1:count("no body") >= 1)
        -- the loss was settled (and the state retained) while the handlers
        -- still ran: their late success is inert, the kept one's
        -- is recorded
        for _, id in ipairs({ ids[1], ids[2] }) do
            assert.matches("^running:1:" .. TOKEN .. ":%d+$", w:inv(id)["wa/sleep"])
        end
        assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(ids[3])["wa/sleep"])

        -- across a crash: deleted while nobody runs it, found by the own-PEL
        -- re-read (or a sweep) of the restarted daemon
        local more = {}
        for i = 1, 2 do
            more[i] = w:publish(string.format('{"t":"sleep","s":2,"j":%d}', i))
        end
        d1:wait_until(function() return #d1:runs("start") == 5 end, 10, "two more running")
        d1:kill9()
        assert.are.equal(1, w:call("XDEL", "events", more[1]))
        local d2 = w:started("c1")
        d2:wait_until(function() return w:pending() == 0 and w:all_retained({ more[2] }) end, 20, "PEL drained")
        loop.sleep(1)  -- more sweeps: nothing is counted twice
        assert.are.equal(3, missing_total(w))
        assert.are.equal(0, w:pending())
        -- the deleted entry is not run again (no body to run), the other one is
        assert.are.equal(1, #d2:runs("start"))
        assert.are.equal(more[2], d2:runs("start")[1].id)
        assert.matches("^succeeded:2:" .. TOKEN .. "$", w:inv(more[2])["wa/sleep"])
        assert.are.same({}, w:dlq())
        assert.is_true(d2:alive())
    end)

    it("recreates a destroyed group and a deleted stream mid-BLOCK without a hot loop (R13)", function()
        w = world.new()
        local d = w:started("c1")
        local first = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(first)["~retained"] end, 15, "a first message")

        local cpu0 = d:cpu_seconds()
        assert.are.equal("OK", w:call("XGROUP", "DESTROY", "events", "relay") == 1 and "OK" or "no group")
        d:wait_until(function() return d:count("recreating it at 0") >= 1 end, 10, "the group recreated")
        local second = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(second)["~retained"] and w:pending() == 0 end, 15, "a message after")
        -- re-reading from 0 finds the first one settled: it does not run again
        assert.are.equal(2, #d:runs("start"))

        assert.are.equal(1, w:call("DEL", "events"))
        d:wait_until(function() return d:count("recreating it at 0") >= 2 end, 10, "the group recreated again")
        local third = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(third)["~retained"] and w:pending() == 0 end, 15, "a message after")
        assert.are.equal(3, #d:runs("start"))
        local groups = w:call("XINFO", "GROUPS", "events")
        assert.are.equal(1, #groups)

        loop.sleep(2)
        local used = d:cpu_seconds() - cpu0
        assert.is_true(used < 0.5, "daemon CPU " .. used .. " s")
        assert.is_true(d:alive())
    end)
end)
