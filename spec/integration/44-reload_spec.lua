-- App reload in the daemon: on a template.yaml change and on SIGHUP; a new
-- invalid template keeps the last good version loaded (relay.md section 2).
local daemon = require("helpers.daemon")
local redis_server = require("helpers.redis")
local fs = require("relay.fs")
local core_redis = require("relay.core.redis")

local HANDLER = "#!/bin/sh\ncat >/dev/null\necho \"ran $RELAY_HANDLER\"\n"

local function template(handlers)
    local out = { "runtime: {image: host, command: [/bin/sh, /app/h.sh]}", "events:" }
    for _, h in ipairs(handlers) do
        out[#out + 1] = string.format("  - handler: %s\n    pattern: {t: [%s]}", h, h)
    end
    return table.concat(out, "\n") .. "\n"
end

describe("app reload #compressed", function()
    it("picks up template changes, keeps the last good version, reloads on SIGHUP", function()
        local server = redis_server.start()
        local client = assert(core_redis.connect_blocking({ path = server.sock, db = 0 }, 2))
        local apps = daemon.tmpdir("apps")
        assert(fs.mkdir_p(apps .. "/rl"))
        assert(fs.write_file(apps .. "/rl/h.sh", HANDLER))
        assert(fs.write_file(apps .. "/rl/template.yaml", template({ "one" })))
        local d = daemon.start({ url = server.url, consumer = "r1", apps = apps })
        local function ran(handler)
            return #d:grep("[rl/" .. handler .. " ") > 0
        end
        local function publish(t)
            return client:call("XADD", "events", "*", "event", '{"t":"' .. t .. '"}')
        end

        d:wait_until(function() return #d:grep("relay started") > 0 end, 10, "start")
        publish("one")
        d:wait_until(function() return ran("one") end, 15, "handler one")

        assert(fs.write_file(apps .. "/rl/template.yaml", template({ "one", "two" })))
        d:wait_until(function() return #d:grep("app updated") > 0 end, 10, "the update")
        publish("two")
        d:wait_until(function() return ran("two") end, 15, "handler two")

        assert(fs.write_file(apps .. "/rl/template.yaml", "events:\n  - handler: three\n    pattern: {t: x}\n"))
        d:wait_until(function() return #d:grep("keeping the last good version") > 0 end, 10, "the error")
        local err_line = d:grep("keeping the last good version")[1]
        assert.matches("template%.yaml:3:18: t: a field condition must be a list; write %[x%]", err_line)
        local before = #d:grep("ran two")
        publish("two")
        d:wait_until(function() return #d:grep("ran two") > before end, 15, "two again, from the last good version")

        d:signal("HUP")
        d:wait_until(function() return #d:grep("reason=SIGHUP") > 0 end, 10, "the SIGHUP reload")
        assert.are.equal(0, d:stop("TERM").status)
        d:cleanup()
        client:close()
        server:stop()
        fs.rm_rf(apps)
    end)
end)
