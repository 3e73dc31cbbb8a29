-- relay app pause / resume against a real daemon: an app nobody knows is
-- refused unless --force, and a resumed app's held messages run within a
-- housekeeping period, not after the reclaim sweep's MinPendingIdle (a
-- minute in a release build).
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local loop = require("relay.core.loop")
local world = require("helpers.world")

describe("relay app pause / resume", function()
    local w, empty_apps

    before_each(function()
        w = world.new()
        empty_apps = daemon.tmpdir("no-apps")
    end)

    after_each(function()
        w:close()
        require("relay.fs").rm_rf(empty_apps)
    end)

    local function run(args, apps_dir)
        return cli.run(args, { REDIS_URL = w.server.url, RELAY_APPS = apps_dir or empty_apps })
    end

    it("refuses an app no replica runs and --apps lacks, unless --force", function()
        local r = run({ "app", "pause", "wa-typo" })
        assert.are.equal(1, r.code)
        assert.matches("no replica runs an app wa%-typo .*%-%-force", r.stderr)
        assert.are.same({}, w:call("SMEMBERS", "relay:events:paused"))
        r = run({ "app", "pause", "--force", "wa-typo" })
        assert.are.same({ 0, "wa-typo paused\n" }, { r.code, r.stdout })
        -- undoing it needs no --force: the name is in the paused set
        r = run({ "app", "resume", "wa-typo" })
        assert.are.same({ 0, "wa-typo resumed\n" }, { r.code, r.stdout })
        -- an app of --apps is known without any daemon
        r = run({ "app", "pause", "wa" }, world.APPS)
        assert.are.same({ 0, "wa paused\n" }, { r.code, r.stdout })
    end)

    it("knows the apps a running replica reported", function()
        local d = w:daemon("k1")
        w:ready(d)
        local null = require("relay.core.redis").null
        d:wait_until(function() return w.r:call("HGET", "relay:events:apps", "wb") ~= null end, 10,
            "the daemon's apps recorded")
        local r = run({ "app", "pause", "wb" })
        assert.are.same({ 0, "wb paused\n" }, { r.code, r.stdout })
    end)

    it("holds an event published right after the pause, before any replica looked", function()
        local d = w:daemon("p1")
        w:ready(d)
        assert.are.equal(0, run({ "app", "pause", "wb" }, world.APPS).code)
        local held = w:publish('{"t":"b-ok"}')
        local other = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(other)["~retained"] end, 15, "a message of another app")
        assert.are.same({}, w:inv(held))
        assert.is_truthy(w:pending_entries()[held], "the paused app's message is held")
        for _, run_of in ipairs(d:runs("start")) do
            assert.are_not.equal(held, run_of.id)
        end
    end)

    it("runs a resumed app's held messages within seconds", function()
        local d = w:daemon("h1")
        w:ready(d)
        assert.are.equal(0, run({ "app", "pause", "wb" }, world.APPS).code)
        d:wait_until(function() return d:count("apps paused; their messages are held") == 1 end, 10,
            "the daemon to see the pause")
        local held = w:publish('{"t":"b-ok"}')
        local other = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(other)["~retained"] end, 15, "a message of another app")
        assert.is_truthy(w:pending_entries()[held], "the paused app's message is held")
        assert.are.same({}, w:inv(held))
        assert.are.equal(0, run({ "app", "resume", "wb" }, world.APPS).code)
        local t0 = loop.monotonic()
        d:wait_until(function() return w:inv(held)["~retained"] end, 30, "the held message to run")
        -- housekeeping notices the resume (2 s in a release build) and re-reads
        -- this consumer's pending list; the reclaim sweep alone would take 60 s+
        assert.is_true(loop.monotonic() - t0 < 15, "took " .. (loop.monotonic() - t0) .. " s")
        assert.are.equal(1, d:count("apps resumed; running their held messages"))
    end)
end)
