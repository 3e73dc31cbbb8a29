-- App reload in the daemon: on a template.yaml change and on SIGHUP; a new
-- invalid template keeps the last good version loaded; a changed
-- `concurrency` holds from the reload on, counting the invocations that
-- started under the old value.
local daemon = require("helpers.daemon")
local redis_server = require("helpers.redis")
local fs = require("relay.fs")
local core_redis = require("relay.core.redis")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil

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


--- An apps dir with one app "cc" (the worker fixtures' stamping handler)
-- whose handler `sleep` sleeps for the event's "s" seconds.
local function concurrency_app(dir, concurrency)
    assert(fs.mkdir_p(dir .. "/cc"))
    assert(fs.write_file(dir .. "/cc/h.sh", assert(fs.read_file(world.APPS .. "/wa/h.sh"))))
    assert(fs.write_file(dir .. "/cc/template.yaml", table.concat({
        "runtime: {image: host, command: [/bin/sh, /app/h.sh]}",
        "concurrency: " .. concurrency,
        "events:",
        "  - handler: sleep",
        "    pattern: {t: [sleep]}",
        "    timeout: 30s",
    }, "\n") .. "\n"))
end


--- The most handler runs that were ever running at once, from the stamps;
-- with since_us, among the runs that started then or later.
local function most_at_once(d, since_us)
    local by_id = {}
    for _, r in ipairs(d:runs()) do
        by_id[r.id] = by_id[r.id] or {}
        by_id[r.id][r.what] = r.us
    end
    for id, run in pairs(by_id) do
        if run.start < (since_us or 0) then
            by_id[id] = nil
        end
    end
    local most = 0
    for _, a in pairs(by_id) do
        local at_once = 0
        for _, b in pairs(by_id) do
            if b.start <= a.start and a.start < (b["end"] or math.huge) then
                at_once = at_once + 1
            end
        end
        most = math.max(most, at_once)
    end
    return most
end


local maybe = usable and describe or pending

maybe("concurrency after a reload", function()
    local w, apps

    before_each(function()
        apps = daemon.tmpdir("apps")
        w = world.new({ apps = apps })
    end)

    after_each(function()
        w:close()
        fs.rm_rf(apps)
    end)

    local function publish_sleeps(seconds)
        for _, n in ipairs(seconds) do
            w:publish('{"t":"sleep","s":' .. n .. '}')
        end
    end

    --- Publishes events that sleep for each of `first` seconds under
    -- concurrency `from`, changes it to `to` while they run, then publishes
    -- `more`; returns the daemon once every run ended.
    local function reload_while_running(from, to, first, more)
        concurrency_app(apps, from)
        local d = w:started("cc", { MAX_CONCURRENCY = 4 })
        publish_sleeps(first)
        d:wait_until(function() return #d:runs("start") == #first end, 15, "the first runs")
        concurrency_app(apps, to)
        d:wait_until(function() return d:count("app updated") > 0 end, 10, "the reload")
        publish_sleeps(more)
        d:wait_until(function() return #d:runs("end") == #first + #more end, 30, "every run")
        return d
    end

    -- The run started under the old limit ends first, while the newer ones
    -- still hold their permits: the permits they give back must not add up
    -- to more than the new limit.
    it("a raised limit counts the runs started under the old one, then and later", function()
        local d = reload_while_running(1, 2, { 2 }, { 3, 3, 3 })
        assert.are.equal(2, most_at_once(d))
        local settled_us = d:runs("end")[4].us + 1  -- stamps are in time order
        publish_sleeps({ 1, 1, 1, 1 })
        d:wait_until(function() return #d:runs("end") == 8 end, 30, "the later runs")
        assert.are.equal(2, most_at_once(d, settled_us))
    end)

    it("a lowered limit holds new runs until the old ones are below it", function()
        local d = reload_while_running(2, 1, { 3, 3 }, { 1, 1 })
        assert.are.equal(2, most_at_once(d))  -- the two that were running, never a third
        local starts = d:runs("start")
        table.sort(starts, function(a, b) return a.us < b.us end)
        local ends = d:runs("end")
        table.sort(ends, function(a, b) return a.us < b.us end)
        assert.is_true(starts[3].us >= ends[2].us, "a new run started while an old one ran")
        assert.is_true(starts[4].us >= ends[3].us, "two new runs ran at once")
    end)
end)
