-- A password-protected Redis: the password never reaches a message (start-up
-- errors, CLI errors), and a password-protected unix socket can be used.
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local redis_server = require("helpers.redis")
local world = require("helpers.world")

local PASSWORD = "s3cret-Pa55"

describe("a password-protected redis", function()
    local server

    setup(function()
        server = redis_server.start("--requirepass " .. PASSWORD)
    end)

    teardown(function()
        server:stop()
    end)

    local function assert_secret_kept(r)
        local all = r.stdout .. r.stderr
        assert.is_falsy(all:find(PASSWORD, 1, true), all)
    end

    it("is usable through a unix socket URL with user:password@ before the path", function()
        local r = cli.run({ "publish", '{"t":"x"}' },
            { REDIS_URL = "unix://default:" .. PASSWORD .. "@" .. server.sock, REDIS_STREAM = "events" })
        assert.are.equal(0, r.code, r.stderr)
        assert.are.equal("1", server:cli("-a " .. PASSWORD .. " --no-auth-warning XLEN events"))
    end)

    it("is usable through a unix socket URL with a password query parameter", function()
        local r = cli.run({ "status", "--json" },
            { REDIS_URL = "unix://" .. server.sock .. "?password=" .. PASSWORD .. "&db=0", REDIS_STREAM = "events" })
        assert.are.equal(0, r.code, r.stderr)
        assert.matches('"length": *1', r.stdout)
    end)

    it("masks the password in CLI errors: a wrong password, an unreachable address", function()
        for _, url in ipairs({
            "unix://:" .. PASSWORD .. "x@" .. server.sock,
            "redis://:" .. PASSWORD .. "@127.0.0.1:1/0",
            "redis://alice:" .. PASSWORD .. "@127.0.0.1:1/0",
            "unix://" .. server.sock .. "?password=" .. PASSWORD .. "x",
        }) do
            for _, args in ipairs({ { "publish", "{}" }, { "status" }, { "dlq", "ls" } }) do
                local r = cli.run(args, { REDIS_URL = url })
                assert.are.equal(2, r.code, url .. " " .. args[1] .. ": " .. r.stderr)
                assert_secret_kept(r)
                assert.matches("%*%*%*", r.stderr)
            end
        end
    end)

    it("masks the password in a bad URL's error", function()
        local r = cli.run({ "status" }, { REDIS_URL = "redis://:" .. PASSWORD .. "@h:99999/0" })
        assert.are.equal(2, r.code)
        assert_secret_kept(r)
        assert.matches("redis://:%*%*%*@h:99999/0", r.stderr)
    end)

    it("masks the password in the daemon's start-up error", function()
        local d = daemon.start({
            url = "redis://:" .. PASSWORD .. "@127.0.0.1:1/0", consumer = "secrets-c1", apps = world.APPS,
        })
        local report = d:wait(30)
        local text = table.concat(d.lines, "\n") .. table.concat(d.stdout, "\n")
        d:cleanup()
        assert.are.equal(2, report and report.code, text)
        assert.is_falsy(text:find(PASSWORD, 1, true), text)
        assert.matches("redis://:%*%*%*@127%.0%.0%.1:1/0", text)
    end)
end)
