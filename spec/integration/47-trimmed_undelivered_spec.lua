-- Entries trimmed from the stream before the group read them (a producer's
-- MAXLEN while no consumer ran) used to stay in the group's lag for ever:
-- no metric, no log. `relay status` tells them apart from the lag; the
-- daemon counts them once (relay_trimmed_undelivered_total, the fleet
-- counter in relay:<stream>:stats), logs it, and corrects the lag.
local cjson = require("cjson.safe")
local cli = require("helpers.cli")
local endpoints = require("helpers.http")
local core_redis = require("relay.core.redis")
local redis = require("relay.redis")
local redis_server = require("helpers.redis")
local scripts = require("relay.scripts")
local world = require("helpers.world")

local maybe_compressed = world.usable({ tools = { "runc", "python3" }, compressed = true }) and describe or pending

local ADD_1000 = "for i = 1, 1000 do redis.call('XADD', KEYS[1], '*', 'event', '{\"t\":\"nobody\"}') end"


--- The group reads one entry (so Redis keeps its read counter), then 1000
-- more are added while nobody reads and all but the last 150 trimmed.
local function trim_unread(call)
    call("XADD", "events", "*", "event", '{"t":"nobody"}')
    call("XREADGROUP", "GROUP", "relay", "reader", "COUNT", 10, "STREAMS", "events", ">")
    call("EVAL", ADD_1000, 1, "events")
    call("XTRIM", "events", "MAXLEN", 150)
end


--- The words of the README's `ACL SETUSER relay …` line.
local function readme_relay_acl()
    for line in io.lines("README.md") do
        if line:match("^ACL SETUSER relay ") then
            local words = {}
            for word in line:gmatch("%S+") do
                words[#words + 1] = word
            end
            return words
        end
    end
end


describe("entries trimmed before delivery", function()
    local server

    before_each(function()
        server = redis_server.start()
    end)

    after_each(function()
        server:stop()
    end)

    it("are told apart from the lag in relay status", function()
        server:cli("XGROUP CREATE events relay 0 MKSTREAM")
        local client = assert(redis.connect(server.cfg))
        trim_unread(function(...) return assert(client:call(...)) end)
        client:close()
        local r = cli.run({ "status", "--json" }, { REDIS_URL = server.url })
        assert.are.equal(0, r.code, r.stderr)
        local s = assert(cjson.decode(r.stdout))
        assert.are.equal(1000, s.lag)
        assert.are.equal(850, s.lag_trimmed)
        assert.are.equal(850, s.trimmed_undelivered_total)
        r = cli.run({ "status" }, { REDIS_URL = server.url })
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("\ngroup\trelay\tlag 1000 %(850 trimmed before delivery%)\t", r.stdout)
        assert.matches("\ntrimmed_undelivered_total\t850\n", r.stdout)
    end)

    it("are counted once by the README's relay user", function()
        server:cli("XGROUP CREATE events relay 0 MKSTREAM")
        local admin = assert(redis.connect(server.cfg))
        trim_unread(function(...) return assert(admin:call(...)) end)
        local words = readme_relay_acl()
        assert(admin:call("ACL", unpack(words, 2)))
        local relay_user = assert(core_redis.connect_blocking({ path = server.sock, user = "relay",
            password = words[5]:sub(2) }, 2))
        local count = { "events", "relay:events:stats" }
        assert.are.equal(850, assert(redis.eval(relay_user, scripts.count_trimmed, count, { "relay", "peek" })))
        assert.are.equal(850, assert(redis.eval(relay_user, scripts.count_trimmed, count, { "relay", "count" })))
        assert.are.equal(0, assert(redis.eval(relay_user, scripts.count_trimmed, count, { "relay", "count" })))
        assert.are.equal("850", admin:call("HGET", "relay:events:stats", "trimmed_undelivered_total"))
        assert.are.equal(150, redis.pairs_to_table(admin:call("XINFO", "GROUPS", "events")[1]).lag)
        relay_user:close()
        admin:close()
    end)
end)


maybe_compressed("relay run and entries trimmed before delivery #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("counts them once, in the metric, the fleet counter and the log, and the lag is true again", function()
        w = world.new()
        local port = endpoints.free_port()
        local env = { RELAY_METRICS_ADDR = "127.0.0.1:" .. port }
        local d = w:started("c1", env)
        assert.are.equal(0, d:stop("TERM").code)
        trim_unread(function(...) return w:call(...) end)
        d = w:daemon("c1", env)
        d:wait_until(function()
            return w:call("HGET", "relay:events:stats", "trimmed_undelivered_total") == "850" and w:pending() == 0
        end, 20, "the trimmed entries counted and the rest read")
        local g = redis.pairs_to_table(w:call("XINFO", "GROUPS", "events")[1])
        assert.are.equal(0, g.lag)
        assert.are.equal(850, endpoints.metric(port, "relay_trimmed_undelivered_total"))
        local logged = d:grep("trimmed from the stream before any consumer read them")
        assert.are.equal(1, #logged)
        assert.matches("count=850", logged[1])
        -- nothing is left to count: a second pass finds nothing
        assert.are.equal(0, redis.eval(w.r, scripts.count_trimmed, { "events", "relay:events:stats" },
            { "relay", "count" }))
        local r = cli.run({ "status", "--json" }, { REDIS_URL = w.server.url })
        local s = assert(cjson.decode(r.stdout))
        assert.are.equal(0, s.lag)
        assert.are.equal(0, s.lag_trimmed)
        assert.are.equal(850, s.trimmed_undelivered_total)
    end)
end)
