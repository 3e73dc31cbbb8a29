-- relay.core.redis's stream batch (src/lua_stream_batch.c) against a real
-- redis-server: a read of new entries kept in C, matched there, its
-- unmatched ids acknowledged as one command word, the rest handed to Lua.
local core = require("relay.core.redis")
local matcher_core = require("relay.core.matcher")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")

local MAX = 1024  -- max event bytes in these specs
local OBJECT = core.reply_object_bytes
local ENTRY_LIMIT = MAX + 64 * 1024

describe("redis stream batch", function()
    local server, c, m

    before_each(function()
        server = redis_server.start()
        c = assert(redis.connect(server.cfg))
        assert(c:call("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"))
        m = matcher_core.new()
        assert(m:add('{"t":[{"eq":"hit"}]}'))
        assert(m:compile())
    end)

    after_each(function()
        c:close()
        server:stop()
    end)

    local function add(...)
        return assert(c:call("XADD", "s", "*", ...))
    end

    local function read(count)
        return c:call_timeout(5, redis.stream_batch, "XREADGROUP", "GROUP", "g", "me", "COUNT", count or 100,
            "STREAMS", "s", ">")
    end

    local function pending()
        return c:call("XPENDING", "s", "g")[1]
    end

    it("matches event-only entries in C and hands the others to Lua by index", function()
        local ids = {
            add("event", '{"t":"miss"}'),
            add("event", '{"t":"hit"}'),
            add("event", "not json"),
            add("event", '{"t":"miss"}', "relay_target", "a/h"),
            add("other", "x"),
            add("event", '{"t":"miss","pad":"' .. string.rep("x", MAX) .. '"}'),
            add("event", '{"t":"miss2"}'),
        }
        local batch = read()
        assert.are.equal(7, batch:count())
        assert.are.equal(ids[7], batch:last_id())
        local unmatched, largest, bytes, rest = batch:match(m, MAX, 0, OBJECT, ENTRY_LIMIT)
        assert.are.equal(2, unmatched)
        assert.are.same({ 2, 3, 4, 5, 6 }, rest)
        local cost6 = #"event" + #('{"t":"miss","pad":"' .. string.rep("x", MAX) .. '"}') + 5 * OBJECT
        assert.are.equal(cost6, largest)
        assert.is_true(bytes > largest)
        assert.are.same({ ids[2], { "event", '{"t":"hit"}' } }, batch:entry(2))
        assert.are.same({ ids[5], { "other", "x" } }, batch:entry(5))
        assert.are.equal(2, c:call("XACK", "s", "g", batch))
        assert.are.equal(5, pending())
        local left = c:call("XPENDING", "s", "g", "-", "+", 10)
        for _, p in ipairs(left) do
            assert.are_not.equal(ids[1], p[1])
            assert.are_not.equal(ids[7], p[1])
        end
        batch:free()
        assert.has_error(function() batch:count() end)
    end)

    it("acknowledges nothing it did not match, and entries taken out are no longer its ids", function()
        local a = add("event", '{"t":"miss"}')
        add("event", '{"t":"miss"}')
        local batch = read()
        assert.are.equal(2, (batch:match(m, MAX, 0, OBJECT, ENTRY_LIMIT)))
        assert.are.same({ a, { "event", '{"t":"miss"}' } }, batch:entry(1))
        assert.are.equal(1, c:call("XACK", "s", "g", batch))
        assert.are.equal(1, pending())
        batch:free()
        assert.are.equal(redis.null, read())
    end)

    it("turns back into the plain reply's entries", function()
        local a = add("event", '{"t":"miss"}', "k", "v")
        local b = add("event", '{"t":"hit"}')
        local batch = read()
        assert.are.same({ { a, { "event", '{"t":"miss"}', "k", "v" } }, { b, { "event", '{"t":"hit"}' } } },
            batch:entries())
        batch:free()
        batch:free()  -- idempotent
    end)

    it("leaves other replies as they were", function()
        assert.are.equal(redis.null, read())
        assert.are.same({ ok = "OK" }, c:call_timeout(5, redis.stream_batch, "SET", "k", "v"))
    end)

    it("refuses a userdata word that is not a batch", function()
        assert.has_error(function() c:call("XACK", "s", "g", io.stdout) end)
    end)
end)
