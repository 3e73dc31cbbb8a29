-- Redis Sentinel: a primary, a replica and three Sentinels. Relay finds the
-- primary through the Sentinels (redis+sentinel://…/<master>), and a
-- failover with events published during it loses nothing and charges
-- nothing: every event succeeds at its first attempt on the new primary,
-- nothing is dead-lettered, and Relay resumes there by itself.
local build = require("relay.core.build")
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local fs = require("relay.fs")
local runtime = require("relay.runtime")
local sentinel = require("helpers.sentinel")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = (usable and build.test_constants) and describe or pending


maybe("a Sentinel-managed Redis #compressed", function()
    local s, d

    setup(function()
        s = sentinel.start()
    end)

    teardown(function()
        if d then
            d:cleanup()
        end
        s:stop()
    end)

    it("runs on the primary the Sentinels name and follows it through a failover", function()
        d = daemon.start({ url = s.url, consumer = "sentinel-c1", apps = world.APPS })
        d:wait_until(function() return d:count("relay started") > 0 end, 30, "relay started")
        local env = { REDIS_URL = s.url }
        local ids = {}
        -- A publish refused while the primary changes is published again: the CLI exits 2 then.
        local function publish(n)
            for _ = 1, n do
                local r
                daemon.wait_until(function()
                    r = cli.run({ "publish", '{"t":"ok"}' }, env)
                    return r.code == 0
                end, 30, "a publish to go through")
                ids[#ids + 1] = (r.stdout:gsub("%s+$", ""))
            end
        end
        publish(5)

        local old = s.primary
        assert.are.equal(old, s:primary_port())
        assert.are.equal("OK", s:failover())
        publish(10)
        daemon.wait_until(function() return s:primary_port() == s.replica end, 30, "the replica promoted")
        daemon.wait_until(function()
            return s:cli(old, "ROLE"):match("^slave") ~= nil
        end, 30, "the old primary turned into a replica")
        publish(5)

        local primary = s.replica
        local function succeeded(id)
            return s:cli(primary, "HGET relay:events:inv:" .. id .. " wa/ok"):match("^succeeded:1:") ~= nil
        end
        d:wait_until(function()
            for _, id in ipairs(ids) do
                if not succeeded(id) then
                    return false
                end
            end
            return true
        end, 60, "every event succeeded at its first attempt on the new primary")
        d:wait_until(function() return s:cli(primary, "XPENDING events relay"):match("^0") ~= nil end, 20,
            "every entry acknowledged")
        assert.are.equal("0", s:cli(primary, "XLEN relay:events:dlq"))
        assert.is_true(d:alive())

        local status = cli.run({ "status", "--json" }, env)
        assert.are.equal(0, status.code, status.stderr)
        assert.matches('"pending": *0', status.stdout)
    end)
end)
