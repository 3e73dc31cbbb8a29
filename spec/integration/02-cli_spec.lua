-- The CLI skeleton end to end: the real binary, a real redis-server.
local cli = require("helpers.cli")
local redis_server = require("helpers.redis")
local loop = require("relay.core.loop")

describe("relay CLI", function()
    local server, env

    setup(function()
        server = redis_server.start()
        env = { REDIS_URL = server.url, REDIS_STREAM = "events" }
    end)

    teardown(function()
        server:stop()
    end)

    it("lists every command of the README's command table in --help", function()
        local r = cli.run({ "--help" })
        assert.are.equal(0, r.code)
        for _, name in ipairs({ "run", "dev", "publish", "match", "app", "dlq", "schedule", "status", "version" }) do
            assert.matches("\n   " .. name .. " ", r.stdout)
        end
    end)

    it("lists the sub-commands of app, dlq and schedule, and refuses an unknown one", function()
        local subs = { app = { "validate", "ls", "invoke", "pause", "resume" },
            dlq = { "ls", "inspect", "replay", "rm" }, schedule = { "ls" } }
        for group, names in pairs(subs) do
            local r = cli.run({ group, "--help" })
            assert.are.equal(0, r.code)
            for _, name in ipairs(names) do
                assert.matches("\n   " .. name .. " ", r.stdout)
                local sub = cli.run({ group, name, "--help" })
                assert.are.equal(0, sub.code, group .. " " .. name)
                assert.matches("^Usage: relay " .. group .. " " .. name .. " ", sub.stdout)
            end
            r = cli.run({ group, "frobnicate" })
            assert.are.same({ 2, "relay: unknown command 'frobnicate' (see relay " .. group .. " --help)\n" },
                { r.code, r.stderr })
        end
    end)

    it("exits 2 with relay: on stderr for an unknown command or a usage error", function()
        local r = cli.run({ "frobnicate" })
        assert.are.equal(2, r.code)
        assert.matches("^relay: ", r.stderr)
        r = cli.run({ "publish" })
        assert.are.equal(2, r.code)
        assert.matches("^relay: ", r.stderr)
    end)

    it("prints usage for relay help and relay alone, and relay help COMMAND as COMMAND --help", function()
        local help = cli.run({ "--help" })
        local r = cli.run({ "help" })
        assert.are.same({ 0, help.stdout }, { r.code, r.stdout })
        r = cli.run({})
        assert.are.equal(2, r.code)
        assert.matches("^Usage: relay ", r.stderr)
        r = cli.run({ "help", "dlq", "ls" })
        assert.are.same({ 0, cli.run({ "dlq", "ls", "--help" }).stdout }, { r.code, r.stdout })
    end)

    it("shows each setting's default and accepted values in --help", function()
        local r = cli.run({ "run", "--help" })
        assert.matches("%-%-runtime <value>%s+overrides RELAY_RUNTIME; one of auto|runc|bwrap|docker|podman; "
            .. "default auto\n", r.stdout)
        assert.matches("%-%-stream <value>%s+overrides REDIS_STREAM; default events\n", r.stdout)
        assert.matches("%-%-consumer <value>%s+overrides RELAY_CONSUMER; default: this host's name\n", r.stdout)
    end)

    it("exits 70 when a Lua error escapes every command (a bug), x-lua included", function()
        local path = os.tmpname()
        local f = assert(io.open(path, "w"))
        f:write('error("a bug in a script")\n')
        f:close()
        local r = cli.run({ "x-lua", path })
        os.remove(path)
        assert.are.equal(70, r.code)
        assert.matches("a bug in a script", r.stderr)
    end)

    it("answers --version like relay version", function()
        local r = cli.run({ "--version" })
        assert.are.same({ 0, cli.run({ "version" }).stdout }, { r.code, r.stdout })
        assert.matches("^relay %d+%.%d+%.%d+\n", r.stdout)
    end)

    it("prints the versions of relay and its libraries", function()
        local r = cli.run({ "version" })
        assert.are.equal(0, r.code)
        assert.matches("^relay %d+%.%d+%.%d+\n", r.stdout)
        assert.matches("LuaJIT 2%.1", r.stdout)
        assert.matches("hiredis 0%.14", r.stdout)
        assert.matches("libev 4%.", r.stdout)
        assert.matches("libyaml 0%.2", r.stdout)
    end)

    it("heads text listings with their column names, unless --no-header", function()
        local with_env = { REDIS_URL = server.url, REDIS_STREAM = "events", RELAY_RUNTIME = "runc" }
        local r = cli.run({ "app", "ls", "--apps", "examples/apps" }, with_env)
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("^NAME\tSTATE\tDRIVER\tHANDLERS\tSCHEDULES\tCONCURRENCY\tNOTE\ngreeter\t", r.stdout)
        r = cli.run({ "app", "ls", "--apps", "examples/apps", "--no-header" }, with_env)
        assert.matches("^greeter\t", r.stdout)
        assert.matches("^{", cli.run({ "app", "ls", "--apps", "examples/apps", "--json" }, with_env).stdout)
    end)

    it("prints the new id as JSON with publish --json", function()
        local r = cli.run({ "publish", "--json", '{"a":1}' }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.matches('^{"id":"%d+%-%d+"}\n$', r.stdout)
    end)

    it("publishes the given text byte for byte as the event field", function()
        local text = '{"a":1,  "b" : "caf\\u00e9"}'
        local r = cli.run({ "publish", text }, env)
        assert.are.equal(0, r.code, r.stderr)
        local id = r.stdout:match("^(%d+%-%d+)\n$")
        assert.is_string(id, r.stdout)
        local c = assert(require("relay.core.redis").connect_blocking({ path = server.sock, db = 0 }, 1))
        local entries = c:call("XRANGE", "events", id, id)
        assert.are.same({ "event", text }, entries[1][2])
        -- "-" reads stdin
        r = cli.run({ "publish", "-" }, env, '{"from":"stdin"}')
        assert.are.equal(0, r.code, r.stderr)
        local last = c:call("XREVRANGE", "events", "+", "-", "COUNT", 1)
        assert.are.same({ "event", '{"from":"stdin"}' }, last[1][2])
        c:close()
    end)

    it("refuses what is not a JSON object and adds nothing", function()
        local before = server:cli("XLEN events")
        for _, bad in ipairs({ "notjson", "[1]", "", "{", '{"a":1}x', '"str"', "{\"a\":\"\255\"}" }) do
            local r = cli.run({ "publish", bad }, env)
            assert.are.equal(2, r.code, bad)
            assert.matches("^relay: not a valid event: ", r.stderr)
            assert.are.equal("", r.stdout)
        end
        assert.are.equal(before, server:cli("XLEN events"))
    end)

    it("refuses an event larger than RELAY_MAX_EVENT_BYTES", function()
        local big = '{"k":"' .. string.rep("x", 100) .. '"}'
        local r = cli.run({ "publish", big }, { REDIS_URL = server.url, RELAY_MAX_EVENT_BYTES = "64" })
        assert.are.equal(2, r.code)
        assert.matches("too large", r.stderr)
    end)

    it("exits 2 naming the cause for bad variables and bad REDIS_URL", function()
        local r = cli.run({ "publish", "{}" }, { REDIS_URL = "http://nope" })
        assert.are.equal(2, r.code)
        assert.matches("REDIS_URL=http://nope", r.stderr)
        r = cli.run({ "status" }, { REDIS_URL = server.url, MAX_CONCURRENCY = "abc" })
        assert.are.equal(2, r.code)
        assert.matches("MAX_CONCURRENCY=abc", r.stderr)
    end)

    it("fails within 5 s naming the address when redis is unreachable", function()
        local started = loop.monotonic()
        local r = cli.run({ "publish", "{}" }, { REDIS_URL = "redis://127.0.0.1:1/0" })
        assert.are.equal(2, r.code)
        assert.matches("127%.0%.0%.1:1", r.stderr)
        assert.is_true(loop.monotonic() - started < 5.5)
        -- a blackholed address must also fail in bounded time (connect timeout)
        started = loop.monotonic()
        r = cli.run({ "status" }, { REDIS_URL = "unix:///nonexistent/redis.sock" })
        assert.are.equal(2, r.code)
        assert.matches("/nonexistent/redis.sock", r.stderr)
        assert.is_true(loop.monotonic() - started < 5.5)
    end)

    it("shows a first status, as text and as JSON", function()
        server:cli("XGROUP CREATE events relay 0 MKSTREAM")
        server:cli("SADD relay:events:paused billing")
        server:cli("HSET relay:events:stats missing_payload_total 3")
        local r = cli.run({ "status" }, env)
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("stream\tevents\tlength %d+", r.stdout)
        assert.matches("group\trelay\tlag", r.stdout)
        assert.matches("missing_payload_total\t3", r.stdout)
        assert.matches("paused\tbilling", r.stdout)
        r = cli.run({ "status", "--json" }, env)
        assert.are.equal(0, r.code, r.stderr)
        local s = require("cjson").decode(r.stdout)
        assert.are.equal("events", s.stream)
        assert.are.equal(3, s.missing_payload_total)
        assert.are.same({ "billing" }, s.paused_apps)
        assert.are.equal(0, s.dlq_length)
    end)
end)
