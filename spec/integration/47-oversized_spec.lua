-- Poison entries and oversized events. An entry over RELAY_MAX_EVENT_BYTES
-- is dead-lettered once as `event too large`, keeping the first 4 KiB of
-- its event and its size, without the daemon ever holding it whole (its
-- read is capped; the pending-list script hands it over as a stub); the
-- rest of its batch runs. An entry that crashes the daemon while it is
-- being classified is dead-lettered `poison: …` after 5 counted crashes
-- (the crash is real: test builds honour RELAY_TEST_CRASH_ON). The DLQ
-- obeys RELAY_DLQ_MAXLEN. And the daemon's peak RSS stays under 64 MiB plus
-- 4 × RELAY_MAX_EVENT_BYTES, measured on unsanitized builds (#memory).
local build = require("relay.core.build")
local core_redis = require("relay.core.redis")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local redis_server = require("helpers.redis")
local world = require("helpers.world")

local usable = world.usable()
local maybe = usable and describe or pending
local maybe_compressed = (usable and build.test_constants) and describe or pending
-- ASan's allocator and shadow memory lift the baseline far above release
local maybe_measured = (usable and not build.sanitized) and describe or pending

local MiB = 1024 * 1024
local KEPT = 4096


--- A JSON object of exactly `bytes` bytes that the `ok` handler matches.
local function event_of(bytes, tag)
    local head = string.format('{"t":"ok","tag":"%s","pad":"', tag or "")
    return head .. string.rep("x", bytes - #head - 2) .. '"}'
end


--- DLQ entries by the id of the message they hold: { id, fields }.
local function by_original_id(w)
    local out = {}
    for _, e in ipairs(w:dlq()) do
        out[e.fields.original_id] = e
    end
    return out
end


local function ran_once(d, ids)
    local starts = {}
    for _, r in ipairs(d:runs("start")) do
        starts[r.id] = (starts[r.id] or 0) + 1
    end
    for _, id in ipairs(ids) do
        if starts[id] ~= 1 then
            return false
        end
    end
    return true
end


--- Peak RSS of a live process in bytes (VmHWM).
local function peak_rss(pid)
    local status = assert(fs.read_file("/proc/" .. pid .. "/status"))
    return tonumber(status:match("VmHWM:%s+(%d+) kB")) * 1024
end


--- entries-read of the daemon's group (0 before its first read).
local function group_read(w)
    for _, g in ipairs(w:call("XINFO", "GROUPS", "events")) do
        local t = {}
        for i = 1, #g - 1, 2 do
            t[g[i]] = g[i + 1]
        end
        if t.name == "relay" then
            return tonumber(t["entries-read"]) or 0
        end
    end
    return 0
end


--- Publishes ten ordinary events around one big entry (published by
-- `big`), all before the daemon starts so that they share its first read.
local function batch_around(w, big)
    local ids = {}
    for i = 1, 5 do
        ids[#ids + 1] = w:publish(string.format('{"t":"ok","i":%d}', i))
    end
    local big_id = big()
    for i = 6, 10 do
        ids[#ids + 1] = w:publish(string.format('{"t":"ok","i":%d}', i))
    end
    return ids, big_id
end


describe("a client's reply cap", function()
    local server

    before_each(function()
        server = redis_server.start()
    end)

    after_each(function()
        server:stop()
    end)

    it("fails a reply over it with `reply too large`, resets the connection, and reconnects", function()
        local client = assert(core_redis.connect(server.cfg.redis_url, 5, MiB))
        -- what is sent is not capped, what comes back is
        assert(client:call("SET", "small", string.rep("s", 512 * 1024)))
        assert(client:call("SET", "big", string.rep("b", 3 * MiB)))
        assert(client:call("EVAL", "for i = 1, 20000 do redis.call('RPUSH', KEYS[1], '0123456789') end", 1, "list"))
        assert.are.equal(512 * 1024, #assert(client:call("GET", "small")))
        local value, err, kind = client:call("GET", "big")
        assert.is_nil(value)
        assert.matches("^reply too large", err)
        assert.are.equal("io", kind)
        daemon.wait_until(function() return client:connected() end, 5, "reconnected")
        -- many small strings: each reply object counts besides its bytes
        value, err = client:call("LRANGE", "list", 0, -1)
        assert.is_nil(value)
        assert.matches("^reply too large", err)
        daemon.wait_until(function() return client:connected() end, 5, "reconnected")
        assert.are.equal(10000, #assert(client:call("LRANGE", "list", 0, 9999)))
        client:close()
    end)
end)


maybe("oversized entries", function()
    local w

    after_each(function() w = world.close(w) end)

    it("dead-letters an entry over RELAY_MAX_EVENT_BYTES once with its first 4 KiB and size; its batch runs",
        function()
        w = world.new()
        local big = event_of(50 * 1000 * 1000, "big")
        local ids, big_id = batch_around(w, function() return w:publish(big) end)
        local wide_id = w:xadd("event", '{"t":"ok","tag":"wide"}', "blob", string.rep("y", 3 * MiB))
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "1Mi" })
        d:wait_until(function() return w:all_retained(ids) and #w:dlq() == 2 and w:pending() == 0 end, 60,
            "the ordinary events run and two dead letters")
        assert.is_true(ran_once(d, ids))
        local dlq = by_original_id(w)
        local f = assert(dlq[big_id]).fields
        assert.are.equal("event too large (50000000 bytes > 1048576)", f.reason)
        assert.are.equal(KEPT, #f.event)
        assert.are.equal(big:sub(1, KEPT), f.event)
        assert.are.equal("50000000", f.event_bytes)
        assert.are.equal("-", f.app)
        f = assert(dlq[wide_id]).fields
        assert.matches("^event too large %(entry of %d+ bytes > 1114112%)$", f.reason)
        assert.are.equal('{"t":"ok","tag":"wide"}', f.event)
        -- once: acknowledged with its dead letter, which a redelivery finds
        for _, id in ipairs({ big_id, wide_id }) do
            assert.are.equal(dlq[id].id, w:inv(id)["-/-"])
            assert.are.equal("1", w:inv(id)["~retained"])
        end
        -- nothing of the big event's body went into the DLQ
        assert.is_true(w:call("MEMORY", "USAGE", "relay:events:dlq") < 64 * 1024)
        assert.is_true(d:count("too large to read at once") >= 1)
        -- a deliberate reset: the reader is back at once, no read fails
        assert.are.equal(0, d:count("reading the stream failed"))
        assert.is_true(d:alive())
    end)

    it("reads full batches after small entries; a burst of large ones overflowing one is taken from the "
        .. "pending list, none dead-lettered", function()
        w = world.new()
        local d = w:daemon("c1", { RELAY_MAX_EVENT_BYTES = "1Mi", MAX_CONCURRENCY = "4" })
        w:ready(d)
        local function settled(n)
            return function() return group_read(w) == n and w:pending() == 0 end
        end
        for i = 1, 3 do
            w:publish(string.format('{"t":"none","i":%d}', i))
        end
        d:wait_until(settled(3), 30, "the small events acknowledged")
        -- 16 unmatched events of 700 KiB in one step, so that one read finds them all: 8 (the count that
        -- always fits 1 MiB events) fit under the reply cap, 16 (the batch small entries earned) do not
        local burst = "for i = 1, 16 do redis.call('XADD', KEYS[1], '*', 'event', "
            .. "'{\"t\":\"none\",\"pad\":\"' .. string.rep('x', 700 * 1024) .. '\"}') end return 1"
        w:call("EVAL", burst, 1, "events")
        d:wait_until(settled(19), 60, "the large events acknowledged")
        assert.are.equal(1, d:count("too large to read at once"))
        -- one small read after an overflow does not earn the larger batch back: the next burst fits
        w:publish('{"t":"none","i":4}')
        d:wait_until(settled(20), 30, "the small event acknowledged")
        w:call("EVAL", burst, 1, "events")
        d:wait_until(settled(36), 60, "the second burst acknowledged")
        assert.are.equal(1, d:count("too large to read at once"))
        assert.are.same({}, w:dlq())
        assert.is_true(d:alive())
    end)

    it("dead-letters a big entry of its own pending list the same way after a restart", function()
        w = world.new()
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "1Mi" })
        assert.are.equal(0, d:stop("TERM").code)
        -- delivered to c1 while it was down, as a crash after its read leaves it
        local big = event_of(20 * MiB, "own")
        local big_id = w:publish(big)
        local ok_id = w:publish('{"t":"ok"}')
        w:call("XREADGROUP", "GROUP", "relay", w:consumer("c1"), "COUNT", 10, "STREAMS", "events", ">")
        d = w:daemon("c1", { RELAY_MAX_EVENT_BYTES = "1Mi" })
        d:wait_until(function() return w:inv(ok_id)["~retained"] and #w:dlq() == 1 and w:pending() == 0 end, 30,
            "the pending entries settled")
        local f = w:dlq()[1].fields
        assert.are.equal(big_id, f.original_id)
        assert.are.equal(string.format("event too large (%d bytes > 1048576)", 20 * MiB), f.reason)
        assert.are.equal(big:sub(1, KEPT), f.event)
        assert.are.equal("2", f.deliveries)
    end)

    it("keeps the DLQ near RELAY_DLQ_MAXLEN (an approximate trim)", function()
        w = world.new()
        local d = w:started("c1", { RELAY_DLQ_MAXLEN = "20" })
        local last
        for i = 1, 250 do
            last = w:publish("not json " .. i)
        end
        d:wait_until(function() return w:inv(last)["-/-"] and w:pending() == 0 end, 30, "all dead-lettered")
        local length = w:call("XLEN", "relay:events:dlq")
        -- trimmed by whole nodes of up to 100 entries
        assert.is_true(length >= 20 and length <= 120, "DLQ length " .. length)
        assert.are.equal(last, w:dlq()[length].fields.original_id)
    end)
end)


maybe_compressed("poison entries #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("dead-letters an entry that crashed the daemon 5 times, and runs the rest of its batch", function()
        w = world.new()
        local mark = "crash-" .. w.tag
        local before = w:publish('{"t":"ok","i":1}')
        local poison = w:publish('{"t":"ok","crash":"' .. mark .. '"}')
        local after = w:publish('{"t":"ok","i":2}')
        local crashes, d = 0
        repeat
            d = w:daemon("c1", { RELAY_TEST_CRASH_ON = mark })
            local gone = d:wait_until(function() return #w:dlq() > 0 and "settled" or d:wait(0.05) end, 30,
                "a crash or a dead letter")
            if gone ~= "settled" then
                assert.are.equal(9, gone.signal)
                crashes = crashes + 1
            end
        until gone == "settled" or crashes > 8
        -- the first read of the batch, then five counted ones
        assert.are.equal(6, crashes)
        d:wait_until(function() return w:all_retained({ before, after, poison }) and w:pending() == 0 end, 30,
            "the batch settled")
        local dlq = w:dlq()
        assert.are.equal(1, #dlq)
        local f = dlq[1].fields
        assert.are.equal(poison, f.original_id)
        assert.are.equal("poison: crashed the worker 5 times", f.reason)
        assert.are.equal('{"t":"ok","crash":"' .. mark .. '"}', f.event)
        assert.are.equal("-", f.app)
        assert.matches("^succeeded:%d:", w:inv(before)["wa/ok"])
        assert.matches("^succeeded:1:", w:inv(after)["wa/ok"])
        -- only the poison entry's crash count is left, to expire
        assert.are.same({ "relay:events:handling:" .. poison }, w:call("KEYS", "relay:events:handling:*"))
        assert.are.equal("5", w:call("GET", "relay:events:handling:" .. poison))
        assert.is_true(d:alive())
    end)
end)


maybe_measured("daemon memory under large events #memory", function()
    local w

    after_each(function() w = world.close(w) end)

    local function bound(max_event_bytes)
        return 64 * MiB + 4 * max_event_bytes
    end

    it("stays under 64 MiB + 4 x RELAY_MAX_EVENT_BYTES with a 50 MB event in its first read", function()
        w = world.new()
        local ids = batch_around(w, function() return w:publish(event_of(50 * 1000 * 1000, "big")) end)
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "1Mi" })
        d:wait_until(function() return w:all_retained(ids) and #w:dlq() == 1 and w:pending() == 0 end, 60,
            "the batch settled")
        local peak = peak_rss(d.pid)
        print(string.format("\n[47 memory] 50 MB event, RELAY_MAX_EVENT_BYTES=1Mi: daemon VmHWM %.1f MiB (bound %d)",
            peak / MiB, bound(MiB) / MiB))
        assert.is_true(peak < bound(MiB), string.format("VmHWM %.1f MiB", peak / MiB))
    end)

    it("stays under the bound with a flood of events just under RELAY_MAX_EVENT_BYTES, all of which run",
        function()
        w = world.new()
        local ids = {}
        for i = 1, 60 do
            ids[i] = w:publish(event_of(MiB - 100, tostring(i)))
        end
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "1Mi", MAX_CONCURRENCY = "8" })
        d:wait_until(function() return w:all_retained(ids) and w:pending() == 0 end, 120, "every event ran")
        assert.is_true(ran_once(d, ids))
        assert.are.same({}, w:dlq())
        local peak = peak_rss(d.pid)
        print(string.format("\n[47 memory] 60 events of 1 MiB: daemon VmHWM %.1f MiB (bound %d)", peak / MiB,
            bound(MiB) / MiB))
        assert.is_true(peak < bound(MiB), string.format("VmHWM %.1f MiB", peak / MiB))
    end)

    it("scales with RELAY_MAX_EVENT_BYTES: 16Mi, events just under it and a 200 MB one", function()
        w = world.new()
        local ids = {}
        for i = 1, 4 do
            ids[#ids + 1] = w:publish(event_of(16 * MiB - 100, tostring(i)))
        end
        local big_id = w:publish(event_of(200 * 1000 * 1000, "big"))
        for i = 5, 8 do
            ids[#ids + 1] = w:publish(string.format('{"t":"ok","i":%d}', i))
        end
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "16Mi" })
        d:wait_until(function() return w:all_retained(ids) and #w:dlq() == 1 and w:pending() == 0 end, 120,
            "the batch settled")
        assert.is_true(ran_once(d, ids))
        assert.are.equal(big_id, w:dlq()[1].fields.original_id)
        assert.is_true(w:call("MEMORY", "USAGE", "relay:events:dlq") < 64 * 1024)
        local peak = peak_rss(d.pid)
        print(string.format("\n[47 memory] 16Mi, 4 events of 16 MiB and a 200 MB one: daemon VmHWM %.1f MiB "
            .. "(bound %d)", peak / MiB, bound(16 * MiB) / MiB))
        assert.is_true(peak < bound(16 * MiB), string.format("VmHWM %.1f MiB", peak / MiB))
    end)
end)
