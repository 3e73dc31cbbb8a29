-- `relay run` under faults, on the test build's
-- compressed constants (backoff 1/2/5/10 s, MinPendingIdle 1 s, reclaim
-- every 250 ms, heartbeat TTL 1 s): a poison handler (14), SIGKILL and
-- restart with the same (1) or a new (2) consumer name, the SIGTERM drain
-- (3) and a Redis outage (6). Real redis-server, real runc.
local daemon = require("helpers.daemon")
local loop = require("relay.core.loop")
local world = require("helpers.world")

local maybe = world.usable({ compressed = true }) and describe or pending

local RFC3339 = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.?%d*Z$"
local TOKEN = "[0-9a-f]+%.%d+"


local function sorted(t)
    local copy = {}
    for i, v in ipairs(t) do
        copy[i] = v
    end
    table.sort(copy)
    return copy
end


--- ms part of a stream id, as µs.
local function id_us(id)
    return tonumber(id:match("^(%d+)")) * 1000
end


--- Publishes n sleep events; returns their ids.
local function publish_sleeps(w, n, seconds)
    local ids = {}
    for i = 1, n do
        ids[i] = w:publish(string.format('{"t":"sleep","s":%s,"i":%d}', seconds, i))
    end
    return ids
end


--- Starts c1 on two long sleeps and sends the first SIGTERM once both run;
-- returns the draining daemon and the ids.
local function draining_with_two_running(w)
    local d = w:started("c1")
    local ids = publish_sleeps(w, 2, 19.7)
    d:wait_until(function() return #d:runs("start") == 2 end, 10, "two running")
    d:signal("TERM")
    d:wait_until(function() return d:count("draining") == 1 end, 5, "draining")
    return d, ids
end


--- The invocations whose marker is `running:` now (interrupted attempts).
local function running_markers(w, ids)
    local out = {}
    for _, id in ipairs(ids) do
        local m = w:inv(id)["wa/sleep"]
        if m and m:find("^running:") then
            out[#out + 1] = id
        end
    end
    return sorted(out)
end


--- Starts c1 on n sleep events and SIGKILLs it a quarter of the way, with
-- handlers running. Returns the daemon, the ids and the interrupted ids.
local function killed_midway(w, n)
    local d1 = w:started("c1")
    local ids = publish_sleeps(w, n, 0.5)
    d1:wait_until(function()
        local ends = #d1:runs("end")
        return ends >= n / 4 and #d1:runs("start") - ends >= 2
    end, 30, "a quarter done, handlers running")
    d1:kill9()
    local interrupted = running_markers(w, ids)
    assert.is_true(#interrupted >= 1, "nothing was running at the kill")
    return d1, ids, interrupted
end


--- Checks the aftermath of a crash and recovery: every invocation succeeded;
-- exactly the interrupted ones (`running` at the kill) ran again, as attempt
-- 2 after the lost attempt 1, all others ran once; nothing is pending.
-- Returns how many duplicate runs the start lines show.
local function assert_recovered(w, first, second, ids, interrupted)
    local is_interrupted = {}
    for _, id in ipairs(interrupted) do
        is_interrupted[id] = true
    end
    local r1, r2 = daemon.by_invocation({ first }), daemon.by_invocation({ second })
    local duplicates = 0
    for _, id in ipairs(ids) do
        local key = id .. " wa/sleep"
        local s1, s2 = r1[key] and r1[key].starts or {}, r2[key] and r2[key].starts or {}
        local marker = w:inv(id)["wa/sleep"]
        if is_interrupted[id] then
            -- the lost attempt 1 (its start line may have died with the
            -- daemon before it was read) and exactly one rerun
            assert.is_true(#s1 <= 1, id)
            assert.are.equal(1, #s2, id)
            assert.are.equal(2, s2[1].attempt)
            if s1[1] then
                assert.are.equal(1, s1[1].attempt)
                duplicates = duplicates + 1
            end
            assert.matches("^succeeded:2:" .. TOKEN .. "$", marker)
        else
            assert.are.equal(1, #s1 + #s2, "runs of " .. id)
            assert.are.equal(1, (s1[1] or s2[1]).attempt)
            assert.matches("^succeeded:1:" .. TOKEN .. "$", marker)
        end
        assert.are.equal("1", w:inv(id)["~retained"])
    end
    assert.are.equal(0, w:pending())
    assert.are.same({}, w:dlq())
    return duplicates
end


maybe("relay run faults #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("dead-letters a poison handler after exactly its attempts, on the backoff ladder (R14)", function()
        w = world.new()
        local d = w:started("c1")
        local id = w:publish('{"t":"exit3"}')
        -- other messages keep flowing meanwhile
        local others, feeding = {}, true
        loop.spawn(function()
            while feeding do
                others[#others + 1] = w:publish('{"t":"ok"}')
                loop.sleep(0.4)
            end
        end)
        d:wait_until(function() return #w:dlq() > 0 end, 15, "the dead letter")
        d:wait_until(function() return w:pending() == 0 end, 5, "the ACK")
        loop.sleep(0.5)
        feeding = false
        d:wait_until(function() return w:all_retained(others) end, 10, "the other messages")
        loop.sleep(1.5)  -- nothing more happens to the poison message

        local starts = daemon.by_invocation({ d })[id .. " wa/exit3"].starts
        assert.are.equal(3, #starts)
        assert.are.same({ 1, 2, 3 }, { starts[1].attempt, starts[2].attempt, starts[3].attempt })
        local gap1, gap2 = (starts[2].us - starts[1].us) / 1e6, (starts[3].us - starts[2].us) / 1e6
        assert.is_true(gap1 >= 1 and gap1 < 2.5, "gap 1: " .. gap1)
        assert.is_true(gap2 >= 2 and gap2 < 3.5, "gap 2: " .. gap2)

        local dlq = w:dlq()
        assert.are.equal(1, #dlq)
        local f = dlq[1].fields
        assert.are.same(sorted({ "original_stream", "original_id", "group", "consumer", "event", "reason", "app",
            "handler", "deliveries", "handler_attempts", "timestamp", "output" }), sorted(dlq[1].names))
        assert.are.equal(id, f.original_id)
        assert.are.equal("events", f.original_stream)
        assert.are.equal("relay", f.group)
        assert.are.equal(w:consumer("c1"), f.consumer)
        assert.are.equal('{"t":"exit3"}', f.event)
        assert.are.equal("exit status 3", f.reason)
        assert.are.equal("wa", f.app)
        assert.are.equal("exit3", f.handler)
        assert.are.equal("3", f.handler_attempts)
        assert.is_true(tonumber(f.deliveries) >= 1)
        assert.matches(RFC3339, f.timestamp)
        assert.are.equal("exit3 says no\nexit3 last words", f.output)
        -- the dead letter came after the third start
        assert.is_true(id_us(dlq[1].id) >= math.floor(starts[3].us / 1000) * 1000)

        local inv = w:inv(id)
        assert.matches("^exhausted:3:" .. TOKEN .. ":dlq$", inv["wa/exit3"])
        assert.are.equal("1", inv["~retained"])
        assert.are.equal(0, w:pending())

        -- every other message started promptly, never behind the backoff
        assert.is_true(#others >= 8)
        local runs = daemon.by_invocation({ d })
        for _, oid in ipairs(others) do
            local r = runs[oid .. " wa/ok"]
            assert.is_truthy(r, oid)
            assert.are.equal(1, #r.starts)
            local lag = (r.starts[1].us - id_us(oid)) / 1e6
            assert.is_true(lag < 1, "message " .. oid .. " started " .. lag .. " s after publishing")
        end
    end)

    it("kills a hung handler at its timeout and retries it; a flaky one succeeds on its retry (R17)", function()
        w = world.new()
        local d = w:started("c1")
        local hang = w:publish('{"t":"hang"}')
        local flaky = w:publish('{"t":"flaky","k":1}')
        d:wait_until(function() return #w:dlq() == 1 and w:inv(flaky)["~retained"] end, 20, "settled")
        d:wait_until(function() return w:pending() == 0 end, 5, "the ACKs")

        local runs = daemon.by_invocation({ d })
        local starts = runs[hang .. " wa/hang"].starts
        assert.are.equal(2, #starts)
        assert.are.equal(0, #runs[hang .. " wa/hang"].ends)
        -- 1 s timeout, 0.5 s grace at most, then the 1 s backoff step
        local gap = (starts[2].us - starts[1].us) / 1e6
        assert.is_true(gap >= 2 and gap < 4, "gap " .. gap)
        local f = w:dlq()[1].fields
        assert.are.equal(hang, f.original_id)
        assert.are.equal("timeout after 1s", f.reason)
        assert.are.equal("2", f.handler_attempts)
        assert.matches("^exhausted:2:" .. TOKEN .. ":dlq$", w:inv(hang)["wa/hang"])
        -- the whole container was killed, not only its first process
        assert.are.same({}, daemon.procs_matching("sleep 31.5"))

        local fl = runs[flaky .. " wa/flaky"]
        assert.are.same({ 1, 2 }, { fl.starts[1].attempt, fl.starts[2].attempt })
        assert.are.equal(1, #fl.ends)
        assert.are.equal(2, fl.ends[1].attempt)
        assert.is_true(fl.starts[2].us - fl.starts[1].us >= 1e6)
        assert.matches("^succeeded:2:" .. TOKEN .. "$", w:inv(flaky)["wa/flaky"])
        local fails = d:grep("flaky fails")
        assert.are.equal(1, #fails)
        assert.truthy(fails[1]:find("INFO  [wa/flaky " .. flaky .. "#1] flaky fails", 1, true), fails[1])
    end)

    it("recovers after SIGKILL with the same consumer name: re-runs only interrupted attempts (R1)", function()
        w = world.new()
        local d1, ids, interrupted = killed_midway(w, 120)
        -- every start without an end was interrupted (an end printed just
        -- before the kill may not have been recorded yet)
        local is_interrupted = {}
        for _, id in ipairs(interrupted) do
            is_interrupted[id] = true
        end
        local running_lines = 0
        for key, inv in pairs(daemon.by_invocation({ d1 })) do
            if #inv.ends == 0 then
                running_lines = running_lines + 1
                assert.is_true(is_interrupted[key:match("^(%S+)")], "start without end not marked running: " .. key
                    .. " " .. tostring(w:inv(key:match("^(%S+)"))["wa/sleep"]))
            end
        end
        assert.is_true(running_lines >= 1)
        local pel_before = w:pending_entries()

        local mon = w:monitor()
        local t0 = loop.monotonic()
        local d2 = w:started("c1")
        local ready_at = loop.monotonic()
        d2:wait_until(function() return #d2:runs("start") > 0 end, 5, "the first start after the restart")
        -- the own PEL is re-read at once, not after MinPendingIdle
        assert.is_true(loop.monotonic() - ready_at < 1, "first start " .. (loop.monotonic() - ready_at))
        d2:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 60, "everything settled")
        mon.stop()

        -- the first read is of c1's own pending list (the take_pending script
        -- lists it with XPENDING), before any read of new entries
        local own_pel = '"XPENDING" "events" "relay" "%-" "%+" "%d+" "' .. w:consumer("c1"):gsub("%-", "%%-") .. '"$'
        local first_read
        for _, l in ipairs(mon.lines) do
            if l:find('"XREADGROUP"', 1, true) or l:find(own_pel) then
                first_read = l
                break
            end
        end
        assert.is_truthy(first_read, "no read after the restart")
        assert.truthy(first_read:find(own_pel), first_read)
        assert.is_true(next(pel_before) ~= nil)

        local duplicates = assert_recovered(w, d1, d2, ids, interrupted)
        -- the start lines show the duplicates: one per attempt running at the kill
        assert.is_true(duplicates >= running_lines and duplicates <= #interrupted)
        -- the interrupted containers were swept, and none is left
        assert.are.same({}, d2:containers_but_pool())
        assert.is_true(loop.monotonic() - t0 < 60)
        assert.are.equal(0, d2:stop("TERM").code)
        assert.are.same({}, d2:runc_list())
    end)

    it("recovers a killed consumer's entries by XAUTOCLAIM under a new name (R2)", function()
        w = world.new()
        local d1, ids, interrupted = killed_midway(w, 64)
        local running_lines = 0
        for _, inv in pairs(daemon.by_invocation({ d1 })) do
            running_lines = running_lines + (#inv.ends == 0 and 1 or 0)
        end
        local owned = {}
        for id, e in pairs(w:pending_entries()) do
            if e.consumer == w:consumer("c1") then
                owned[#owned + 1] = id
            end
        end
        assert.is_true(#owned >= 1)

        local d2 = w:started("c2")
        local ready_at = loop.monotonic()
        d2:wait_until(function()
            for _, id in ipairs(owned) do
                for _, r in ipairs(d2:runs("start")) do
                    if r.id == id then
                        return true
                    end
                end
            end
        end, 10, "a start of the dead consumer's entries")
        -- MinPendingIdle (1 s) + a sweep (250 ms) + a start
        assert.is_true(loop.monotonic() - ready_at < 3, "took " .. (loop.monotonic() - ready_at))
        d2:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 60, "everything settled")

        local duplicates = assert_recovered(w, d1, d2, ids, interrupted)
        assert.is_true(duplicates >= running_lines and duplicates <= #interrupted)
        local pend = w:consumers_pending()
        assert.are.equal(0, pend[w:consumer("c1")] or 0)
        assert.are.equal(0, pend[w:consumer("c2")])
        assert.are.same({}, d2:containers_but_pool())
    end)

    it("drains on SIGTERM: stops reading, finishes running handlers once, exits 0 (R3)", function()
        w = world.new()
        local d1 = w:started("c1")
        local ids = publish_sleeps(w, 8, 2)
        d1:wait_until(function() return #d1:runs("start") == 4 end, 10, "four running")
        local t0 = loop.monotonic()
        d1:signal("TERM")
        d1:wait_until(function() return d1:count("draining") == 1 end, 5, "draining")
        loop.sleep(0.4)  -- longer than one read BLOCK
        local late = w:publish('{"t":"ok"}')
        local report = d1:wait(15)
        assert.is_truthy(report, "no exit")
        assert.are.equal(0, report.code)
        -- it waited for the running handlers (2 s), no longer
        assert.is_true(loop.monotonic() - t0 < 5)

        local started = {}
        for _, r in ipairs(d1:runs("start")) do
            started[r.id] = (started[r.id] or 0) + 1
        end
        assert.are.equal(4, #d1:runs("start"))
        assert.are.equal(4, #d1:runs("end"))
        local pend = w:pending_entries()
        for _, id in ipairs(ids) do
            if started[id] then
                assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["wa/sleep"])
                assert.are.equal("1", w:inv(id)["~retained"])
                assert.is_nil(pend[id])
            else
                assert.are.same({}, w:inv(id))
                assert.is_truthy(pend[id])
            end
        end
        -- reading stopped: the late entry was never delivered
        assert.is_nil(pend[late])
        -- a clean stop gives the consumer name up
        assert.are.equal(0, w:call("EXISTS", "relay:events:consumer:" .. w:consumer("c1")))

        -- a clean bounce: the restart runs the rest, never the finished ones
        local d2 = w:started("c1")
        d2:wait_until(function() return w:all_retained(ids) and w:inv(late)["~retained"] end, 20, "the rest")
        local runs = daemon.by_invocation({ d1, d2 })
        for _, id in ipairs(ids) do
            assert.are.equal(1, #runs[id .. " wa/sleep"].starts, id)
        end
        assert.are.equal(5, #d2:runs("start"))  -- the four left and the late one
        assert.are.equal(0, d2:stop("TERM").code)
    end)

    it("exits 128+signal at once on a second signal, killing containers, leaving state for recovery (R3)",
        function()
        w = world.new()
        local d, ids = draining_with_two_running(w)
        loop.sleep(0.3)
        assert.is_true(d:alive())
        local t0 = loop.monotonic()
        d:signal("TERM")
        local report = d:wait(5)
        assert.is_truthy(report, "no exit after the second signal")
        assert.are.equal(128 + 15, report.code)
        assert.is_true(loop.monotonic() - t0 < 3)
        -- killed handlers may take a moment to be gone after relay exits
        daemon.wait_until(function() return #daemon.procs_matching("sleep 19.7") == 0 end, 3,
            "the killed handlers to be gone")
        for _, id in ipairs(ids) do
            assert.matches("^running:1:" .. TOKEN .. ":%d+$", w:inv(id)["wa/sleep"])
            assert.is_truthy(w:pending_entries()[id])
        end
        assert.are.same({}, w:dlq())
        -- its killed containers were gone before it exited: it declared
        -- itself dead, so other replicas need not wait out the leases
        local instance = w:inv(ids[1])["wa/sleep"]:match("^running:1:(.+)%.%d+:%d+$")
        assert.is_true(w:pttl("relay:events:dead:" .. instance) > 0, "the forced stop declared its instance dead")
        assert.are.equal(1, d:count("declared this instance dead"))
    end)

    it("records its death on a forced stop while Redis holds writes back (R3)", function()
        w = world.new()
        local d, ids = draining_with_two_running(w)
        -- Writes wait 300 ms from here: the death record is answered late,
        -- and the process must not end before it is.
        w:call("CLIENT", "PAUSE", "300", "WRITE")
        d:signal("TERM")
        local report = d:wait(5)
        assert.is_truthy(report, "no exit after the second signal")
        assert.are.equal(128 + 15, report.code)
        local instance = w:inv(ids[1])["wa/sleep"]:match("^running:1:(.+)%.%d+:%d+$")
        assert.is_true(w:pttl("relay:events:dead:" .. instance) > 0, "the forced stop declared its instance dead")
        assert.are.equal(1, d:count("declared this instance dead"))
    end)

    it("waits out a Redis outage: running handlers' results are recorded after it (R6)", function()
        w = world.new({ redis_args = "--appendonly yes --appendfsync always" })
        local d = w:started("c1")
        local ids = publish_sleeps(w, 4, 1.5)
        d:wait_until(function() return #d:runs("start") == 4 end, 10, "four running")
        w:stop_redis()
        -- every handler finishes while Redis is away
        d:wait_until(function() return #d:runs("end") == 4 end, 10, "four ends during the outage")
        loop.sleep(1.5)
        assert.is_true(d:alive())
        assert.is_true(d:count("redis unreachable; retrying error=") == 1)  -- once, not per retry
        w:start_redis()
        d:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 20, "results recorded")
        for _, id in ipairs(ids) do
            assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["wa/sleep"])
        end
        assert.are.equal(4, #d:runs("start"))
        assert.are.same({}, w:dlq())
        -- the reader came back too
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "a message after the outage")
        assert.is_true(d:alive())
        assert.are.equal(0, d:stop("TERM").code)
    end)
end)
