-- The lifecycle's retried transitions, strays, the stranded sweep and the
-- dead-consumer reaper, call by call against a real redis-server (no
-- daemon, no containers). A "lossy" client runs a call and drops its reply,
-- as when Redis runs a command sitting in a socket the watchdog gave up on.
local constants = require("relay.constants")
local daemon = require("helpers.daemon")
local lifecycle = require("relay.lifecycle")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")
local tables = require("helpers.tables")

local TTL_MS = 20  -- heartbeat TTL of these specs: a consumer is dead after 10 of them


local function with(overrides)
    return tables.merged(constants, overrides)
end


--- A client that runs every call on the real one and, while lose is set,
-- drops the reply of EVALSHA calls (the call still ran).
local function lossy(real)
    local client = { lose = false }
    function client.call(_, ...)
        local first = select(1, ...)
        local word = type(first) == "table" and first[1] or first
        local value, err, kind = real:call(...)
        if client.lose and word == "EVALSHA" then
            return nil, "timeout after 10.0s (connection reset)", "io"
        end
        return value, err, kind
    end
    return client
end


local INV = { label = "a/h", app = "a", handler = "h", timeout_ms = 60000, max_attempts = 2 }


describe("lifecycle transitions on a real redis", function()
    local server, r

    before_each(function()
        server = redis_server.start()
        r = assert(redis.connect(server.cfg))
        assert(r:call("XGROUP", "CREATE", "events", "relay", "0", "MKSTREAM"))
    end)

    after_each(function()
        r:close()
        server:stop()
    end)

    local function life_for(instance, client, overrides)
        return lifecycle.new({ client = client or r, stream = "events", group = "relay", consumer = "me",
            instance = instance, constants = with(overrides) })
    end

    local function delivered(n)
        local ids = {}
        for i = 1, n do
            ids[i] = r:call("XADD", "events", "*", "event", '{"i":' .. i .. '}')
        end
        assert(r:call("XREADGROUP", "GROUP", "relay", "me", "STREAMS", "events", ">"))
        return ids
    end

    local function marker(id, field)
        local v = r:call("HGET", "relay:events:inv:" .. id, field or "a/h")
        return v ~= redis.null and v or nil
    end

    local function alive(instance)
        assert(r:call("SET", "relay:events:instance:" .. instance, "1"))
    end

    it("retries an unanswered TryStart with its token, and the retry is the same claim", function()
        local msg = { id = delivered(1)[1] }
        local client = lossy(r)
        local life = life_for("i1", client)
        alive("i1")
        local token = life:token(msg, INV)
        client.lose = true
        assert.is_nil(life:try_start(msg, INV, token))
        assert.matches("^running:1:i1%.1:", marker(msg.id))  -- it ran
        client.lose = false
        assert.are.equal(token, life:token(msg, INV))
        assert.are.same({ "start", 1, "" }, life:try_start(msg, INV, token))
        -- a claim in hand is never handed out again
        assert.are_not.equal(token, life:token(msg, INV))
    end)

    it("answers a repeated outcome write as it answered the first", function()
        local ids = delivered(3)
        local life = life_for("i1")
        alive("i1")
        local function claimed(id)
            local msg = { id = id }
            local token = life:token(msg, INV)
            assert.are.equal("start", life:try_start(msg, INV, token)[1])
            return msg, token
        end
        local msg, token = claimed(ids[1])
        assert.are.equal("succeeded", life:succeed(msg, INV, token, 1))
        assert.are.equal("succeeded", life:succeed(msg, INV, token, 1))
        assert.are.equal("stale", life:succeed(msg, INV, "i1.99", 1))

        msg, token = claimed(ids[2])
        local first = life:fail(msg, INV, token, 1, "exit status 1")
        assert.are.equal("waiting", first[1])
        assert.are.equal("waiting", life:fail(msg, INV, token, 1, "exit status 1")[1])
        -- the last attempt: dead-lettered once
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "waiting:1:0"))
        token = life:token(msg, INV)
        assert.are.same({ "start", 2, "waiting:1:0" }, life:try_start(msg, INV, token))
        assert.are.equal("exhausted", life:fail(msg, INV, token, 2, "exit status 1")[1])
        assert.are.same({ "exhausted" }, life:fail(msg, INV, token, 2, "exit status 1"))
        assert.are.equal(1, r:call("XLEN", "relay:events:dlq"))

        msg, token = claimed(ids[3])
        assert.are.equal("released", life:release(msg, INV, token, 1, ""))
        assert.are.equal("released", life:release(msg, INV, token, 1, ""))
        assert.is_nil(marker(ids[3]))
    end)

    it("takes a marker of its own instance that it does not hold for a stray: uncharged", function()
        local ids = delivered(3)
        local life = life_for("i1")
        alive("i1")
        alive("other")
        -- a rolled back Redis, or a TryStart run after its caller gave up
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:i1.7:99999999999999"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:2:i1.8:99999999999999"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[3], "a/h", "running:1:other.1:99999999999999"))
        local msg = { id = ids[1] }
        assert.are.same({ "start", 1, "" }, life:try_start(msg, INV, life:token(msg, INV)))
        msg = { id = ids[2] }
        local r2 = life:try_start(msg, INV, life:token(msg, INV))
        assert.are.equal("start", r2[1])
        assert.are.equal(2, r2[2])  -- the same attempt: not charged
        assert.matches("^waiting:1:%d+$", r2[3])
        -- another live instance's claim is left alone
        msg = { id = ids[3] }
        assert.are.same("running", life:try_start(msg, INV, life:token(msg, INV))[2])
    end)

    it("charges another instance's attempt only once its lease is over or its host declared it dead", function()
        local ids = delivered(4)
        local life = life_for("i1")
        alive("i1")
        alive("live")
        local far = "99999999999999"
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:live.1:" .. far))
        -- an instance key that lapsed: frozen or cut off, its container may run
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:1:lapsed.1:" .. far))
        assert(r:call("HSET", "relay:events:inv:" .. ids[3], "a/h", "running:1:dead.1:" .. far))
        assert(r:call("SET", "relay:events:dead:dead", "1"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[4], "a/h", "running:1:lapsed.2:1"))
        local function try(id)
            local msg = { id = id }
            return life:try_start(msg, INV, life:token(msg, INV))
        end
        assert.are.equal("running", try(ids[1])[2])
        local waiting = try(ids[2])
        assert.are.equal("lease", waiting[2])
        assert.is_true(waiting[3] > 0)
        assert.matches("^running:1:lapsed%.1:", marker(ids[2]))
        assert.are.same("lost", try(ids[3])[2])
        assert.matches("^waiting:1:%d+$", marker(ids[3]))
        assert.are.same("lost", try(ids[4])[2])
    end)

    it("declares the holder's instance and dead keys to TryStart", function()
        local msg = { id = delivered(1)[1] }
        local declared = {}
        local client = { call = function(_, argv, ...)
            if type(argv) == "table" and argv[1] == "EVALSHA" then
                local keys = {}
                for i = 4, 3 + argv[3] do
                    keys[#keys + 1] = argv[i]
                end
                declared[#declared + 1] = keys
            end
            return r:call(argv, ...)
        end }
        local life = life_for("i1", client)
        assert(r:call("HSET", "relay:events:inv:" .. msg.id, "a/h", "running:1:other.1:99999999999999"))
        assert.are.equal("lease", life:try_start(msg, INV, life:token(msg, INV))[2])
        local last = declared[#declared]
        assert.are.same({ "relay:events:inv:" .. msg.id, "relay:events:dlq", "events", "relay:events:paused",
            "relay:events:instance:other", "relay:events:dead:other" }, last)
    end)

    it("starts nothing of a paused app from the moment the pause is written", function()
        local ids = delivered(2)
        local life = life_for("i1")
        alive("i1")
        assert(r:call("SADD", "relay:events:paused", "a"))
        assert.are.same({ "skip", "paused", 0 }, life:try_start({ id = ids[1] }, INV, life:token({ id = ids[1] }, INV)))
        assert.is_nil(marker(ids[1]))
        -- an attempt of its own left running (a retry of an unanswered claim) waits too
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:1:i1.77:99999999999999"))
        assert.are.same({ "skip", "paused", 0 }, life:try_start({ id = ids[2] }, INV, "i1.77"))
        assert(r:call("SREM", "relay:events:paused", "a"))
        assert.are.same({ "start", 1, "" }, life:try_start({ id = ids[1] }, INV, life:token({ id = ids[1] }, INV)))
    end)

    it("releases its own strays in the sweep, never a claim it holds or issues meanwhile", function()
        local ids = delivered(3)
        local life = life_for("i1")
        alive("i1")
        local held_msg = { id = ids[2] }
        local held = life:token(held_msg, INV)
        assert.are.equal("start", life:try_start(held_msg, INV, held)[1])
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:i1.0:99999999999999"))
        -- a token issued after the sweep's snapshot (its TryStart on another connection)
        assert(r:call("HSET", "relay:events:inv:" .. ids[3], "a/h", "running:1:i1.1000:99999999999999"))
        local cursor, result
        repeat
            cursor, result = life:sweep_step(cursor or "0")
            assert.is_truthy(cursor, result)
        until cursor == "0"
        assert.is_nil(marker(ids[1]))
        assert.matches("^running:1:" .. held:gsub("%.", "%%.") .. ":", marker(ids[2]))
        assert.matches("^running:1:i1%.1000:", marker(ids[3]))
    end)

    it("releases unanswered claims on a clean stop", function()
        local msg = { id = delivered(1)[1] }
        local client = lossy(r)
        local life = life_for("i1", client)
        client.lose = true
        assert.is_nil(life:try_start(msg, INV, life:token(msg, INV)))
        client.lose = false
        assert.are.equal(0, life:release_unanswered())
        assert.is_nil(marker(msg.id))
    end)

    it("re-queues the open invocations of a message in no pending list, carrying their state", function()
        local ids = delivered(3)
        local life = life_for("i1")
        local inv = "relay:events:inv:"
        assert(r:call("HSET", inv .. ids[1], "a/h", "waiting:1:0", "a/done", "succeeded:1:x.1"))
        assert(r:call("HSET", inv .. ids[2], "a/h", "succeeded:1:x.2"))  -- terminal: only retained
        assert(r:call("HSET", inv .. ids[3], "a/h", "waiting:1:0"))
        assert.are.equal(1, r:call("XACK", "events", "relay", ids[1]))
        assert.are.equal(1, r:call("XACK", "events", "relay", ids[2]))
        -- ids[3] stays pending: untouched
        local _, result = life:sweep_step("0")
        assert.are.same({ 0, 2, 0 }, { result[1], result[2], result[3] })
        assert.are.equal(4, #result)
        local moved = result[4]
        assert.are.same({ ids[1], "a/h" }, { moved[1], moved[2] })
        local fields = redis.pairs_to_table(r:call("XRANGE", "events", moved[3], moved[3])[1][2])
        assert.are.same({ event = '{"i":1}', relay_target = "a/h", relay_replay_of = ids[1] }, fields)
        assert.is_number(r:call("ZSCORE", "relay:events:trusted", moved[3]) ~= redis.null and 1 or nil)
        assert.are.equal("waiting:1:0", marker(moved[3]))
        assert.are.equal("1", r:call("HGET", inv .. ids[1], "~retained"))
        assert.are.equal("1", r:call("HGET", inv .. ids[2], "~retained"))
        assert.are.equal(redis.null, r:call("HGET", inv .. ids[3], "~retained"))
        -- a second pass finds nothing left to do
        _, result = life:sweep_step("0")
        assert.are.same({ 0, 0, 0 }, result)
    end)

    it("counts a stranded invocation whose entry is gone as missing", function()
        local ids = delivered(1)
        local life = life_for("i1")
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "waiting:1:0"))
        assert(r:call("XACK", "events", "relay", ids[1]))
        assert(r:call("XDEL", "events", ids[1]))
        local _, result = life:sweep_step("0")
        assert.are.same({ 0, 1, 1 }, result)
        assert.are.equal("1", r:call("HGET", "relay:events:stats", "missing_payload_total"))
    end)

    it("leaves an undelivered message and one whose attempt runs live alone", function()
        local ids = delivered(1)
        local life = life_for("i1")
        alive("other")
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:other.1:99999999999999"))
        assert(r:call("XACK", "events", "relay", ids[1]))
        local later = r:call("XADD", "events", "*", "event", "{}")  -- never delivered
        assert(r:call("HSET", "relay:events:inv:" .. later, "a/h", "waiting:1:0"))
        local _, result = life:sweep_step("0")
        assert.are.same({ 0, 0, 0 }, result)
    end)

    it("removes a dead consumer after claiming its pending entries, in bounded steps", function()
        local life = life_for("i1", nil, { heartbeat_ttl_ms = TTL_MS })
        local bound = life:dead_consumer_after_ms()
        for i = 1, 150 do
            r:call("XADD", "events", "*", "event", '{"i":' .. i .. '}')
        end
        assert(r:call("XREADGROUP", "GROUP", "relay", "dead", "STREAMS", "events", ">"))
        assert(r:call("XREADGROUP", "GROUP", "relay", "live", "COUNT", 1, "STREAMS", "events", "0"))
        assert(r:call("SET", "relay:events:consumer:live", "host:1:x"))
        local function idle(name)
            for _, c in ipairs(r:call("XINFO", "CONSUMERS", "events", "relay")) do
                local t = redis.pairs_to_table(c)
                if t.name == name then
                    return t.idle
                end
            end
        end
        daemon.wait_until(function() return idle("dead") >= bound and idle("live") >= bound end, 5,
            "idle past the bound")
        assert.are.same({ { "dead", "claimed", 100 } }, life:reap_dead_consumers())
        assert.are.same({ { "dead", "deleted", 50 } }, life:reap_dead_consumers())
        local pending = r:call("XPENDING", "events", "relay")
        assert.are.equal(150, pending[1])
        local by = {}
        for _, c in ipairs(pending[4]) do
            by[c[1]] = tonumber(c[2])
        end
        assert.are.same({ me = 150 }, by)  -- "live" read nothing of its own: XREADGROUP 0 is its PEL
        -- claimed ids only (no delivery counted), idle as the reclaim sweep wants them
        local e = r:call("XPENDING", "events", "relay", "-", "+", 1)[1]
        assert.are.equal(1, e[4])
        assert.is_true(e[3] >= constants.min_pending_idle_ms)
        -- the live one (its key held) stays
        assert.is_truthy(idle("live"))
        assert.is_nil(idle("dead"))
    end)
end)
