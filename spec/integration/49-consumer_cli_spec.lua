-- relay consumer ls / rm against a real redis-server: liveness from the
-- heartbeat's consumer key, and a removal that never drops a pending entry.
local cjson = require("cjson")
local cli = require("helpers.cli")
local redis_server = require("helpers.redis")

describe("relay consumer", function()
    local server, env, client

    local function run(args)
        return cli.run(args, env)
    end

    local function pending_of(name)
        local ids = {}
        for _, p in ipairs(client:call("XPENDING", "events", "relay", "-", "+", 100, name)) do
            ids[#ids + 1] = p[1]
        end
        return ids
    end

    before_each(function()
        server = redis_server.start()
        env = { REDIS_URL = server.url, REDIS_STREAM = "events" }
        client = assert(require("relay.core.redis").connect_blocking({ path = server.sock, db = 0 }, 1))
        assert(client:call("XGROUP", "CREATE", "events", "relay", "0", "MKSTREAM"))
        for i = 1, 3 do
            assert(client:call("XADD", "events", "*", "event", '{"n":' .. i .. '}'))
        end
        -- ghost read two entries and died; live holds its heartbeat key
        assert(client:call("XREADGROUP", "GROUP", "relay", "ghost", "COUNT", 2, "STREAMS", "events", ">"))
        assert(client:call("XREADGROUP", "GROUP", "relay", "live", "COUNT", 1, "STREAMS", "events", ">"))
        assert(client:call("SET", "relay:events:consumer:live", "instance-1", "EX", 60))
    end)

    after_each(function()
        client:close()
        server:stop()
    end)

    it("lists every consumer with idle, pending and liveness, as text and JSON", function()
        local r = run({ "consumer", "ls" })
        assert.are.equal(0, r.code, r.stderr)
        local lines = {}
        for line in r.stdout:gmatch("[^\n]+") do
            lines[#lines + 1] = line
        end
        assert.are.same("NAME\tIDLE\tPENDING\tALIVE", lines[1])
        assert.matches("^ghost\t%d+%.%ds\t2\tno$", lines[2])
        assert.matches("^live\t%d+%.%ds\t1\tyes$", lines[3])
        assert.are.equal(3, #lines)
        assert.are.equal(2, #run({ "consumer", "ls", "--no-header" }).stdout:gsub("[^\n]", ""))

        r = run({ "consumer", "ls", "--json" })
        assert.are.equal(0, r.code, r.stderr)
        local first = r.stdout:match("^[^\n]+")
        assert.matches('^{"name":"ghost","idle_ms":%d+,"pending":2,"alive":false}$', first)
        assert.are.same({ name = "live", pending = 1, alive = true },
            (function(o) o.idle_ms = nil; return o end)(cjson.decode(r.stdout:match("\n([^\n]+)"))))
    end)

    it("hands a dead consumer's pending entries to a live one, then deletes it", function()
        local ghost_ids = pending_of("ghost")
        assert.are.equal(2, #ghost_ids)
        local r = run({ "consumer", "rm", "ghost" })
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("removed ghost; 2 pending entries handed to live\n", r.stdout)
        local live_ids = pending_of("live")
        assert.are.equal(3, #live_ids)
        for _, id in ipairs(ghost_ids) do
            assert.is_truthy(table.concat(live_ids, " "):find(id, 1, true), id)
        end
        assert.are.equal(3, client:call("XINFO", "GROUPS", "events")[1][6])  -- pending: nothing dropped
        assert.are.equal(1, #client:call("XINFO", "CONSUMERS", "events", "relay"))
    end)

    it("refuses a live consumer, an unknown one, and a dead one nobody can take over", function()
        local r = run({ "consumer", "rm", "live" })
        assert.are.same({ 1, "relay: live is alive: a running daemon holds it; stop that daemon first\n" },
            { r.code, r.stderr })
        r = run({ "consumer", "rm", "nobody" })
        assert.are.same({ 1, "relay: no consumer nobody in group relay of stream events\n" }, { r.code, r.stderr })

        assert(client:call("DEL", "relay:events:consumer:live"))
        r = run({ "consumer", "rm", "ghost" })
        assert.are.equal(1, r.code)
        assert.matches("ghost has 2 pending entries and no live consumer to take them", r.stderr)
        assert.are.equal(2, #pending_of("ghost"))
    end)
end)
