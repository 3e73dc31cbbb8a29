-- More of the daemon: retention trimming, Redis refusing writes (OOM) as an
-- infrastructure error, and `relay dev` with its private Redis.
local cli = require("helpers.cli")
local daemon = require("helpers.daemon")
local loop = require("relay.core.loop")
local proc = require("relay.core.proc")
local world = require("helpers.world")

describe("the worker #compressed", function()
    local w

    after_each(function() w = world.close(w) end)

    it("trims acknowledged entries past RELAY_RETENTION, never pending or undelivered ones", function()
        w = world.new()
        -- pending: a matched entry of a paused app; acked: unmatched entries
        w:call("SADD", "relay:events:paused", "wa")
        for i = 1, 5 do
            w:publish('{"t":"nothing","i":' .. i .. "}")
        end
        local pending_id = w:publish('{"t":"ok"}')
        local d = w:started("t1", { RELAY_RETENTION = "1s" })
        d:wait_until(function() return w:pending() == 1 end, 10, "unmatched acked, one pending")
        -- a second group that has not read anything keeps every entry it has not seen
        d:wait_until(function()
            return w:call("XLEN", "events") == 1
        end, 10, "the five acknowledged entries trimmed")
        local left = w:call("XRANGE", "events", "-", "+")
        assert.are.equal(pending_id, left[1][1])
        w:call("XGROUP", "CREATE", "events", "late", "0")
        local later = w:publish('{"t":"nothing"}')
        loop.sleep(2.5)
        -- the late group has delivered nothing: nothing at or after its position goes
        assert.are.equal(pending_id, w:call("XRANGE", "events", "-", "+")[1][1])
        assert.are.equal(later, w:call("XRANGE", "events", "-", "+")[2][1])
    end)

    it("treats OOM replies as infrastructure: no ACK, no DLQ until Redis accepts writes", function()
        w = world.new()
        local d = w:started("o1")
        w:call("CONFIG", "SET", "maxmemory", "1")
        local refused = pcall(w.publish, w, '{"t":"exit3"}')
        assert.is_false(refused)  -- the producer is refused too
        w:call("CONFIG", "SET", "maxmemory", "0")
        -- hold the message back (paused app) until Redis refuses writes again
        w:call("SADD", "relay:events:paused", "wa")
        local id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:pending() == 1 end, 10, "the message delivered and held")
        w:call("CONFIG", "SET", "maxmemory", "1")
        w:call("SREM", "relay:events:paused", "wa")  -- deletions are allowed under OOM
        d:wait_until(function() return d:count("cannot") + d:count("stays pending") > 0 end, 10, "a refused write")
        assert.are.equal(1, w:pending())
        assert.are.equal(0, w:call("XLEN", "relay:events:dlq"))
        w:call("CONFIG", "SET", "maxmemory", "0")
        d:wait_until(function()
            local m = w:inv(id)["wa/ok"]
            return w:pending() == 0 and m and m:match("^succeeded")
        end, 20, "the message to complete once Redis accepts writes")
        assert.are.equal(0, w:call("XLEN", "relay:events:dlq"))
    end)
end)

describe("relay dev", function()
    it("starts a private Redis, says how to publish, runs the apps and stops Redis on SIGTERM", function()
        local lines = {}
        local state = daemon.tmpdir("devstate")
        local h = assert(proc.spawn({
            argv = { cli.binary(), "dev", "--apps", world.APPS, "--consumer", "devspec" },
            env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", RELAY_STATE_DIR = state },
            on_line = function(stream, line) if stream == "stderr" then lines[#lines + 1] = line end end,
        }))
        local url = daemon.wait_until(function()
            for _, l in ipairs(lines) do
                local u = l:match("private Redis is running at (unix://%S+)")
                if u then return u end
            end
        end, 15, "the banner")
        local r = cli.run({ "publish", '{"t":"ok"}' }, { REDIS_URL = url })
        assert.are.equal(0, r.code, r.stderr)
        local id = r.stdout:match("^(%S+)")
        daemon.wait_until(function()
            for _, l in ipairs(lines) do
                if l:find("[wa/ok " .. id .. "#1] T end", 1, true) then return true end
            end
        end, 15, "the handler to run")
        h:kill("TERM")
        local report = assert(h:wait(30))
        assert.are.equal(0, report.status)
        local sock = url:match("^unix://(.*)$")
        assert.is_false(require("relay.fs").exists(sock), "the private redis socket is gone")
        require("relay.fs").rm_rf(state)
    end)
end)
