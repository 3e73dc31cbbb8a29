-- Honest answers when Redis refuses: `relay status` reports an error reply
-- (NOAUTH, WRONGTYPE) as `relay: redis refused: …` with exit 2, in text and
-- --json; /healthz answers 503 with the reason while the server is a
-- read-only replica, nothing is charged or acknowledged meanwhile, and it
-- is 200 again once the server is a primary.
local cli = require("helpers.cli")
local fs = require("relay.fs")
local endpoints = require("helpers.http")
local redis_server = require("helpers.redis")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
    and fs.which("curl") ~= nil


describe("relay status on an error reply", function()
    local server

    before_each(function()
        server = redis_server.start("--requirepass pw")
    end)

    after_each(function()
        server:stop()
    end)

    it("says NOAUTH and where the password goes, exit 2, in text and --json", function()
        for _, args in ipairs({ { "status" }, { "status", "--json" } }) do
            local r = cli.run(args, { REDIS_URL = server.url })
            assert.are.equal(2, r.code, r.stderr)
            assert.are.equal("", r.stdout)
            assert.matches("^relay: redis refused: NOAUTH [^\n]*; put the password in REDIS_URL\n$", r.stderr)
        end
    end)

    it("says WRONGTYPE when the stream's key holds something else, exit 2", function()
        server:cli("-a pw --no-auth-warning SET events not-a-stream")
        local url = "unix://:pw@" .. server.sock
        for _, args in ipairs({ { "status" }, { "status", "--json" } }) do
            local r = cli.run(args, { REDIS_URL = url })
            assert.are.equal(2, r.code, r.stderr)
            assert.are.equal("", r.stdout)
            assert.matches("^relay: redis refused: WRONGTYPE [^\n]*; REDIS_STREAM names a key that is not a stream\n$",
                r.stderr)
        end
    end)

    it("still reports a stream without a group, exit 0", function()
        local r = cli.run({ "status", "--json" }, { REDIS_URL = "unix://:pw@" .. server.sock })
        assert.are.equal(0, r.code, r.stderr)
        assert.matches('"group_exists": *false', r.stdout)
    end)
end)


--- GET /healthz: status, body.
local function healthz(port)
    local status, _, body = endpoints.get(port, "/healthz")
    return status, body
end


local maybe = usable and describe or pending
maybe("/healthz while the server is a read-only replica", function()
    local w

    before_each(function()
        w = world.new()
    end)

    after_each(function()
        w:close()
    end)

    it("answers 503 naming READONLY, charges nothing meanwhile, and 200 once a primary again", function()
        local port = endpoints.free_port()
        local d = w:daemon("ro", { RELAY_METRICS_ADDR = "127.0.0.1:" .. port })
        w:ready(d)
        d:wait_until(function() return healthz(port) == 200 end, 15, "healthz 200")

        -- A handler runs while the server turns into a replica of a primary that never answers:
        -- it keeps its data and refuses every write (READONLY).
        local id = w:publish('{"t":"sleep","s":2}')
        d:wait_until(function() return #d:runs("start") == 1 end, 15, "the handler started")
        w:call("REPLICAOF", "127.0.0.1", "1")
        d:wait_until(function()
            local code, body = healthz(port)
            return code == 503 and body:find("READONLY", 1, true)
        end, 20, "healthz 503 naming READONLY")
        d:wait_until(function() return #d:runs("end") == 1 end, 15, "the handler finished")
        -- The outcome cannot be written: nothing acknowledged, charged or dead-lettered.
        assert.are.equal(1, w:pending())
        assert.is_nil(w:inv(id)["~retained"])
        assert.are.equal(0, #w:dlq())
        local code = healthz(port)
        assert.are.equal(503, code)

        w:call("REPLICAOF", "NO", "ONE")
        d:wait_until(function() return healthz(port) == 200 end, 30, "healthz 200 again")
        d:wait_until(function() return w:inv(id)["~retained"] and w:pending() == 0 end, 30, "the outcome written")
        assert.matches("^succeeded:1:", w:inv(id)["wa/sleep"])
        assert.are.equal(0, #w:dlq())
        assert.are.equal(1, #d:runs("start"), "the handler ran once")

        local later = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(later)["~retained"] end, 15, "a later event handled")
        assert.are.equal(200, (healthz(port)))
    end)

    it("answers 503 while the stream's key holds something else, and 200 once the group is back", function()
        local port = endpoints.free_port()
        local d = w:daemon("wt", { RELAY_METRICS_ADDR = "127.0.0.1:" .. port })
        w:ready(d)
        d:wait_until(function() return healthz(port) == 200 end, 15, "healthz 200")
        w:call("DEL", "events")
        w:call("SET", "events", "not a stream")
        d:wait_until(function()
            local code, body = healthz(port)
            return code == 503 and body:find("WRONGTYPE", 1, true)
        end, 20, "healthz 503 naming WRONGTYPE")
        w:call("DEL", "events")
        d:wait_until(function() return healthz(port) == 200 end, 30, "healthz 200 once the group is recreated")
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "an event handled")
    end)
end)
