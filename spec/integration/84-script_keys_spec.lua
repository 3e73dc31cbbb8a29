-- Every server-side script declares every key it touches in KEYS (Redis
-- Cluster routes and checks a script by its declared keys only). The
-- scripts run here through a client that loads each one behind a guard:
-- every key a redis.call names (COMMAND GETKEYS) must be among KEYS, or
-- the script fails with "undeclared key". The paths that touch computed
-- keys are driven: another instance's live claim (its instance key), the
-- removal of a handler, unmatched ids, pending entries taken (their
-- invocation hashes and crash marks), the stranded sweep (its hashes, live
-- claims, and the hashes of the entries it re-queues).
local lifecycle = require("relay.lifecycle")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")

local GUARD = [[
local declared_keys = {}
for _, k in ipairs(KEYS) do
    declared_keys[k] = true
end
local server = redis
local function guarded(call)
    return function(...)
        local named = server.pcall('COMMAND', 'GETKEYS', ...)
        if type(named) == 'table' and not named.err then
            for _, k in ipairs(named) do
                if not declared_keys[k] then
                    error('undeclared key ' .. k .. ' in ' .. tostring((...)))
                end
            end
        end
        return call(...)
    end
end
local redis = setmetatable({ call = guarded(server.call), pcall = guarded(server.pcall) }, { __index = server })
]]


--- A client whose SCRIPT LOAD loads the script behind GUARD (relay.redis
-- caches the sha it gets, so every EVALSHA runs the guarded script).
local function strict(real)
    local client = {}
    function client.call(_, ...)
        local a, b, text = ...
        if a == "SCRIPT" and b == "LOAD" then
            return real:call("SCRIPT", "LOAD", GUARD .. text)
        end
        return real:call(...)
    end
    function client.call_timeout(_, ...)
        return real:call_timeout(...)
    end
    return client
end


local INV = { label = "a/h", app = "a", handler = "h", timeout_ms = 60000, max_attempts = 2 }
local FAR = "99999999999999"


describe("the scripts' declared keys", function()
    local server, r, life

    before_each(function()
        server = redis_server.start()
        r = assert(redis.connect(server.cfg))
        assert(r:call("SCRIPT", "FLUSH"))
        assert(r:call("XGROUP", "CREATE", "events", "relay", "0", "MKSTREAM"))
        life = lifecycle.new({ client = strict(r), stream = "events", group = "relay", consumer = "me",
            instance = "i1" })
        assert(r:call("SET", "relay:events:instance:i1", "1"))
    end)

    after_each(function()
        -- the guarded scripts' shas stay in relay.redis's cache: the next server loads them again
        r:close()
        server:stop()
    end)

    local function delivered(n, consumer)
        local ids = {}
        for i = 1, n do
            ids[i] = r:call("XADD", "events", "*", "event", '{"i":' .. i .. '}')
        end
        assert(r:call("XREADGROUP", "GROUP", "relay", consumer or "me", "STREAMS", "events", ">"))
        return ids
    end

    local function marker(id, field)
        local v = r:call("HGET", "relay:events:inv:" .. id, field or "a/h")
        return v ~= redis.null and v or nil
    end

    it("TryStart reads the instance key of another daemon's claim", function()
        local ids = delivered(2)
        assert(r:call("SET", "relay:events:instance:other", "1"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:other.1:" .. FAR))
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:1:gone.1:0"))
        local msg = { id = ids[1] }
        local value, err = life:try_start(msg, INV, life:token(msg, INV))
        assert.is_table(value, err)
        assert.are.same({ "skip", "running" }, { value[1], value[2] })
        msg = { id = ids[2] }
        value, err = life:try_start(msg, INV, life:token(msg, INV))
        assert.is_table(value, err)
        assert.are.same({ "skip", "lost" }, { value[1], value[2] })
    end)

    it("exhaust reads the instance key of a running claim", function()
        local ids = delivered(2)
        assert(r:call("SET", "relay:events:instance:other", "1"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "running:1:other.1:" .. FAR))
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:1:gone.1:" .. FAR))
        assert.are.equal("running", life:exhaust({ id = ids[1] }, "a/h", "handler removed"))
        assert.are.equal("exhausted", life:exhaust({ id = ids[2] }, "a/h", "handler removed"))
        assert.matches("^exhausted:1:gone%.1:dlq$", marker(ids[2]))
    end)

    it("ack_unmatched reads the invocation hashes of its ids", function()
        local ids = delivered(3)
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "waiting:1:0"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[3], "a/h", "succeeded:1:x.1"))
        local kept, err = life:ack_unmatched(ids)
        assert.is_table(kept, err)
        assert.are.same({ ids[2] }, kept)
        assert.are.equal("1", r:call("HGET", "relay:events:inv:" .. ids[3], "~retained"))
    end)

    it("taking pending entries reads their invocation hashes and crash marks", function()
        local own = delivered(2)
        assert(r:call("HSET", "relay:events:inv:" .. own[1], "a/h", "waiting:1:0"))
        local limits = { count = 10, event = 1024, entry = 65536, object_bytes = 64, poison_after = 3,
            min_idle_ms = 0 }
        local taken, err = life:take_pending("own", "-", limits)
        assert.is_table(taken, err)
        assert.are.equal(2, #taken.entries)
        assert.are.equal("1", r:call("GET", "relay:events:handling:" .. own[2]))
        -- an idle entry of another consumer, whose body is gone (the own ones settled first)
        assert(r:call("XACK", "events", "relay", own[1], own[2]))
        local gone = delivered(1, "other")[1]
        assert(r:call("XDEL", "events", gone))
        assert(r:call("HSET", "relay:events:inv:" .. gone, "a/h", "waiting:1:0"))
        taken, err = life:take_pending("idle", "-", limits)
        assert.is_table(taken, err)
        assert.are.equal(1, taken.deleted)
        assert.are.equal("1", r:call("HGET", "relay:events:inv:" .. gone, "~retained"))
    end)

    it("the stranded sweep reads its ids' hashes and instance keys and writes the re-queued ones", function()
        local ids = delivered(2)
        assert(r:call("SET", "relay:events:instance:other", "1"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[1], "a/h", "waiting:1:0"))
        assert(r:call("HSET", "relay:events:inv:" .. ids[2], "a/h", "running:1:other.1:" .. FAR))
        assert(r:call("XACK", "events", "relay", ids[1], ids[2]))
        local cursor, result
        repeat
            cursor, result = life:sweep_step(cursor or "0")
            assert.is_truthy(cursor, result)
        until cursor == "0"
        local moved = result[4]
        assert.is_table(moved, "one invocation re-queued")
        assert.are.equal("waiting:1:0", marker(moved[3]))
        assert.are.equal("1", r:call("HGET", "relay:events:inv:" .. ids[1], "~retained"))
        assert.are.equal(redis.null, r:call("HGET", "relay:events:inv:" .. ids[2], "~retained"))
    end)
end)
