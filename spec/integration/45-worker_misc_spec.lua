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

    it("warns once at start when the apps directory holds no app", function()
        local empty = daemon.tmpdir("empty-apps")
        w = world.new({ apps = empty })
        local d = w:daemon("e1")
        w:ready(d)
        d:wait_until(function() return d:count("no apps: every event is acknowledged unmatched") == 1 end, 10,
            "the no-apps warning")
        assert.matches("WARN", d:grep("no apps: every event")[1])
        assert.is_truthy(d:grep("no apps: every event")[1]:find(empty, 1, true))
    end)

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
    local runtime_dir, state

    before_each(function()
        runtime_dir = daemon.tmpdir("devrun")
        state = daemon.tmpdir("devstate")
    end)

    after_each(function()
        require("relay.fs").rm_rf(runtime_dir)
        require("relay.fs").rm_rf(state)
    end)

    local function start_dev(lines, extra_env)
        local env = { PATH = os.getenv("PATH"), HOME = os.getenv("HOME") or "/root", RELAY_STATE_DIR = state,
            XDG_RUNTIME_DIR = runtime_dir }
        for k, v in pairs(extra_env or {}) do
            env[k] = v
        end
        return assert(proc.spawn({
            argv = { cli.binary(), "dev", "--apps", world.APPS, "--consumer", "devspec" },
            env = env,
            on_line = function(stream, line) if stream == "stderr" then lines[#lines + 1] = line end end,
        }))
    end

    local function banner_url(lines)
        return daemon.wait_until(function()
            for _, l in ipairs(lines) do
                local u = l:match("private Redis is running at (unix://%S+)")
                if u then return u end
            end
        end, 15, "the banner")
    end

    local function answers(url)
        local c = require("relay.core.redis").connect_blocking({ path = url:match("^unix://(.*)$"), db = 0 }, 1)
        if c then
            c:close()
        end
        return c ~= nil
    end

    it("starts a private Redis, says how to publish, runs the apps and stops Redis on SIGTERM", function()
        local lines = {}
        local h = start_dev(lines)
        local url = banner_url(lines)
        -- the banner lists the loaded apps and publishes an event one of them matches
        local text = table.concat(lines, "\n")
        assert.matches("\n    wa: ", text)
        assert.matches("\n    wb: ", text)
        assert.matches("relay publish '{\"", text)
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

        -- the same apps directory gets the same socket path again
        lines = {}
        h = start_dev(lines)
        assert.are.equal(url, banner_url(lines))
        -- a second relay dev on it is refused while this one runs
        local second = cli.run({ "dev", "--apps", world.APPS }, { XDG_RUNTIME_DIR = runtime_dir,
            RELAY_STATE_DIR = state })
        assert.are.equal(2, second.code)
        assert.matches("relay dev already runs on", second.stderr)
        h:kill("TERM")
        assert.are.equal(0, assert(h:wait(30)).status)
    end)

    it("leaves no Redis running after a SIGKILL, and starts again on the same path", function()
        local lines = {}
        local h = start_dev(lines)
        local url = banner_url(lines)
        assert.is_true(answers(url))
        h:kill("KILL")
        h:wait(30)
        -- the kernel ends the private redis-server with relay
        daemon.wait_until(function() return not answers(url) end, 10, "the private Redis to be gone")
        lines = {}
        h = start_dev(lines)
        assert.are.equal(url, banner_url(lines))
        h:kill("INT")
        assert.are.equal(0, assert(h:wait(30)).status)
        assert.is_false(require("relay.fs").exists(url:match("^unix://(.*)$")))
    end)

    it("says to unset a REDIS_URL that does not answer", function()
        local r = cli.run({ "dev", "--apps", world.APPS }, { REDIS_URL = "unix://" .. runtime_dir .. "/gone.sock",
            RELAY_STATE_DIR = state })
        assert.are.equal(2, r.code)
        assert.matches("`unset REDIS_URL` and relay dev starts a private Redis", r.stderr)
    end)
end)

describe("a test-constants build", function()
    it("says so in relay version", function()
        local r = cli.run({ "version" })
        local says = r.stdout:find("test build: compressed lifecycle waits", 1, true) ~= nil
        assert.are.equal(require("relay.core.build").test_constants and true or false, says)
    end)
end)
