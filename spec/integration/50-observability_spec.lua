-- Observability end to end: the real daemon with
-- runc, JSON logs, a hooks file and the metrics address, fed a known
-- workload (3 succeed, 1 fails with retries: 0, 2 unmatched, 1 malformed).
-- Asserts exact /metrics values, /healthz, the hooks' calls and fields, that
-- every stderr line is a JSON record, and `relay status --json` afterwards.
local cjson = require("cjson.safe")
local cli = require("helpers.cli")
local endpoints = require("helpers.http")
local http = require("relay.core.http")
local poll = require("helpers.daemon")
local proc = require("relay.core.proc")
local redis_server = require("helpers.redis")
local runtime = require("relay.runtime")
local world = require("helpers.world")

local usable = world.usable({ tools = { "runc", "python3" } })

local CWD = io.popen("pwd"):read("*l")
local APPS = CWD .. "/spec/fixtures/obs-apps"
local HOOKS = CWD .. "/spec/fixtures/obs-hooks/record.lua"
local CONSUMER = "obs-itest"


local function daemon_env(server, port, extra)
    local env = {
        PATH = os.getenv("PATH"), REDIS_URL = server.url, RELAY_APPS = APPS, RELAY_RUNTIME = "runc",
        RELAY_STATE_DIR = server.dir .. "/state", RELAY_CONSUMER = CONSUMER, RELAY_LOG_FORMAT = "json",
        RELAY_METRICS_ADDR = "127.0.0.1:" .. port, RELAY_HOOKS = HOOKS,
    }
    for k, v in pairs(extra or {}) do
        env[k] = v or nil
    end
    return env
end


--- Starts `relay run`; every stderr line lands in lines.
local function start_daemon(env, lines)
    return assert(proc.spawn({
        argv = { cli.binary(), "run" }, env = env, timeout = 300, line_max = 1048576,
        on_line = function(_, line)
            lines[#lines + 1] = line
        end,
    }))
end


local function records_of(lines)
    local out, bad = {}, {}
    for _, line in ipairs(lines) do
        local r = cjson.decode(line)
        if type(r) == "table" then
            out[#out + 1] = r
        else
            bad[#bad + 1] = line
        end
    end
    return out, bad
end


local function hook_calls(records, name)
    local out = {}
    for _, r in ipairs(records) do
        if r.msg == "hook call" and r.hook == name then
            out[#out + 1] = r.data
        end
    end
    return out
end


local maybe = usable and describe or pending
maybe("observability of the daemon", function()
    local server, daemon, port, spawned_between
    local lines = {}
    local ids = {}

    setup(function()
        server = redis_server.start()
        port = endpoints.free_port()
        spawned_between = { os.time() }
        daemon = start_daemon(daemon_env(server, port), lines)
        spawned_between[2] = os.time()
        poll.wait_until(function() return endpoints.get(port, "/healthz") == 200 end, 20,
            function() return "a healthy daemon:\n" .. table.concat(lines, "\n") end)
        local function xadd(event)
            ids[#ids + 1] = server:cli("XADD events '*' event " .. cli.quote(event))
        end
        for _, e in ipairs({ '{"kind":"ok","n":1}', '{"kind":"ok","n":2}', '{"kind":"ok","n":3}',
            '{"kind":"bad"}', '{"kind":"none"}', '{"kind":"other"}', 'not json' }) do
            xadd(e)
        end
        poll.wait_until(function()
            local _, _, body = endpoints.get(port, "/metrics")
            return endpoints.sample(body, 'relay_attempts_total{app="obs",handler="ok",outcome="succeeded"}') == 3
                and endpoints.sample(body, 'relay_dlq_entries_total{app="obs",handler="bad"}') == 1
                and endpoints.sample(body, 'relay_dlq_entries_total{app="-",handler="-"}') == 1
                and endpoints.sample(body, 'relay_events_total{outcome="unmatched"}') == 2
        end, 60, function() return "the workload to finish:\n" .. table.concat(lines, "\n") end)
        poll.wait_until(function() return server:cli("XPENDING events relay"):match("^0") end, 10, "no pending entry")
    end)

    teardown(function()
        if os.getenv("OBS_DUMP") then io.stderr:write(table.concat(lines, "\n"), "\n") end
        if daemon then
            pcall(function() daemon:kill("KILL") daemon:wait(5) end)
        end
        if server then
            server:stop()
        end
        runtime.remove_cgroup_dirs("relay/" .. runtime.root_name(CONSUMER, "events", "relay"))
    end)

    it("serves exact metric values for the workload", function()
        local status, ctype, body = endpoints.get(port, "/metrics")
        assert.are.equal(200, status)
        assert.are.equal("text/plain; version=0.0.4; charset=utf-8", ctype)
        local want = {
            ['relay_events_total{outcome="matched"}'] = 4,
            ['relay_events_total{outcome="unmatched"}'] = 2,
            ['relay_events_total{outcome="malformed"}'] = 1,
            ['relay_events_total{outcome="targeted"}'] = 0,
            ['relay_events_total{outcome="schedule"}'] = 0,
            ['relay_events_total{outcome="obsolete"}'] = 0,
            ['relay_attempts_total{app="obs",handler="ok",outcome="succeeded"}'] = 3,
            ['relay_attempts_total{app="obs",handler="bad",outcome="failed"}'] = 1,
            ['relay_attempt_duration_seconds_count{app="obs",handler="ok"}'] = 3,
            ['relay_attempt_duration_seconds_bucket{app="obs",handler="bad",le="+Inf"}'] = 1,
            ['relay_dlq_entries_total{app="obs",handler="bad"}'] = 1,
            ['relay_dlq_entries_total{app="-",handler="-"}'] = 1,
            relay_missing_payload_total = 0,
            relay_running_invocations = 0,
            relay_redis_reconnects_total = 0,
            relay_stale_token_writes_total = 0,
            relay_group_recreated_total = 0,
        }
        for series, value in pairs(want) do
            assert.are.equal(value, endpoints.sample(body, series), series)
        end
        assert.is_number(endpoints.sample(body, "relay_reclaimed_total"))
        assert.is_nil(body:find("relay_start_failures_total{", 1, true))
        assert.is_nil(body:find('outcome="timeout"', 1, true))
        assert.is_nil(body:find('outcome="lost"', 1, true))
    end)

    it("serves the build info and the standard process metrics of the daemon", function()
        local _, _, body = endpoints.get(port, "/metrics")
        local version = cli.run({ "version" }).stdout
        local want_info = string.format('relay_build_info{hiredis="%s",luajit="%s",version="%s"}',
            version:match("\nhiredis (%S+)"), version:match("\nLuaJIT (%S+)"), version:match("^relay (%S+)"))
        assert.are.equal(1, endpoints.sample(body, want_info), body)
        for _, family in ipairs({ "process_cpu_seconds_total counter", "process_resident_memory_bytes gauge",
            "process_open_fds gauge", "process_start_time_seconds gauge", "relay_build_info gauge" }) do
            assert.truthy(body:find("\n# TYPE " .. family .. "\n", 1, true), family)
        end
        assert.is_true(endpoints.sample(body, "process_cpu_seconds_total") > 0)
        -- the daemon's own figures, read from outside it
        local status = assert(io.open("/proc/" .. daemon.pid .. "/status")):read("*a")
        local rss = tonumber(status:match("\nVmRSS:%s*(%d+) kB")) * 1024
        assert.is_true(math.abs(endpoints.sample(body, "process_resident_memory_bytes") - rss) < rss / 2)
        local fds = #assert(require("relay.fs").list("/proc/" .. daemon.pid .. "/fd"))
        assert.is_true(math.abs(endpoints.sample(body, "process_open_fds") - fds) <= 8,
            endpoints.sample(body, "process_open_fds") .. " vs " .. fds)
        local started = endpoints.sample(body, "process_start_time_seconds")
        assert.is_true(started >= spawned_between[1] - 2 and started <= spawned_between[2] + 2,
            started .. " not within " .. spawned_between[1] .. ".." .. spawned_between[2])
    end)

    it("answers /healthz 200 and unknown paths 404", function()
        local status, _, body = endpoints.get(port, "/healthz")
        assert.are.equal(200, status)
        assert.are.equal("ok\n", body)
        assert.are.equal(404, (endpoints.get(port, "/")))
    end)

    it("calls every hook with the documented fields", function()
        local records = records_of(lines)
        local start = hook_calls(records, "on_start")
        assert.are.equal(1, #start)
        assert.are.same({ "obs" }, start[1].apps)
        assert.are.equal("events", start[1].stream)
        assert.are.equal("relay", start[1].group)
        assert.are.equal(CONSUMER, start[1].consumer)

        local events = {}
        for _, e in ipairs(hook_calls(records, "on_event")) do
            events[e.id] = e
        end
        for i = 1, 3 do
            assert.are.same({ id = ids[i], outcome = "matched", matches = { "obs/ok" } }, events[ids[i]])
        end
        assert.are.same({ id = ids[4], outcome = "matched", matches = { "obs/bad" } }, events[ids[4]])
        assert.are.equal("unmatched", events[ids[5]].outcome)
        assert.are.equal("unmatched", events[ids[6]].outcome)
        assert.are.equal("malformed", events[ids[7]].outcome)

        local attempts = hook_calls(records, "on_attempt")
        assert.are.equal(4, #attempts)
        table.sort(attempts, function(a, b) return a.message_id < b.message_id end)
        for i = 1, 3 do
            local a = attempts[i]
            assert.are.equal(ids[i], a.message_id)
            assert.are.same({ "obs", "ok", 1, "succeeded", 0 }, { a.app, a.handler, a.attempt, a.outcome, a.exit_code })
            assert.is_number(a.duration_ms)
            assert.is_nil(a.reason)
        end
        assert.are.same({ app = "obs", handler = "bad", message_id = ids[4], attempt = 1, outcome = "failed",
            exit_code = 3, reason = "exit status 3", duration_ms = attempts[4].duration_ms }, attempts[4])

        local dlq = hook_calls(records, "on_dlq")
        assert.are.equal(2, #dlq)
        table.sort(dlq, function(a, b) return a.message_id < b.message_id end)
        assert.are.same({ "obs", "bad", ids[4], "exit status 3", 1 },
            { dlq[1].app, dlq[1].handler, dlq[1].message_id, dlq[1].reason, dlq[1].attempts })
        assert.matches("^%d+%-%d+$", dlq[1].id)
        assert.are.same({ "-", "-", ids[7] }, { dlq[2].app, dlq[2].handler, dlq[2].message_id })
        assert.is_string(dlq[2].reason)
        assert.matches("^%d+%-%d+$", dlq[2].id)
    end)

    it("writes only JSON records on stderr, honours on_log, and keeps handler lines structured", function()
        local records, bad = records_of(lines)
        assert.are.same({}, bad)
        for _, r in ipairs(records) do
            assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", r.ts)
            assert.is_string(r.level)
            assert.is_string(r.msg)
        end
        local seen = {}
        for _, r in ipairs(records) do
            seen[r.msg] = true
        end
        assert.is_true(seen["relay started"])
        assert.is_true(seen["serving metrics"])
        assert.is_nil(seen["hooks loaded"])  -- suppressed by on_log
        local out, err = {}, {}
        for _, r in ipairs(records) do
            if r.app == "obs" and r.stream == "stdout" then
                out[#out + 1] = r
            elseif r.app == "obs" and r.stream == "stderr" and r.handler == "ok" then
                err[#err + 1] = r
            end
        end
        assert.are.equal(3, #out)
        for _, r in ipairs(out) do
            assert.are.equal("ok", r.handler)
            assert.are.equal(1, r.attempt)
            assert.are.equal("done " .. r.message_id, r.line)
        end
        assert.are.equal(3, #err)
        assert.are.equal("bad \239\191\189 byte", err[1].line)  -- U+FFFD
    end)

    it("shows the stream in relay status --json", function()
        local r = cli.run({ "status", "--json" }, { REDIS_URL = server.url })
        assert.are.equal(0, r.code, r.stderr)
        assert.truthy(r.stdout:find('"paused_apps":[]', 1, true))
        local s = assert(cjson.decode(r.stdout))
        assert.are.equal(7, s.length)
        assert.are.equal(0, s.pending)
        assert.are.equal(0, s.lag)
        assert.are.equal(2, s.dlq_length)
        assert.are.equal(0, s.missing_payload_total)
        assert.are.same({}, s.paused_apps)
        assert.are.equal(1, #s.consumers)
        assert.are.equal(CONSUMER, s.consumers[1].name)
        assert.are.equal(0, s.consumers[1].pending)
        assert.is_number(s.consumers[1].idle_ms)
        r = cli.run({ "status" }, { REDIS_URL = server.url })
        assert.are.equal(0, r.code, r.stderr)
        assert.matches("^stream\tevents\tlength 7\n", r.stdout)
        assert.matches("\nconsumer\t" .. CONSUMER:gsub("%-", "%%-") .. "\tpending 0\tidle %d+%.%ds\talive\n", r.stdout)
    end)

    it("drains on SIGTERM with a JSON goodbye", function()
        daemon:kill("TERM")
        local report = daemon:wait(30)
        daemon = nil
        assert.are.equal(0, report.status)
        local records, bad = records_of(lines)
        assert.are.same({}, bad)
        assert.are.equal("stopped", records[#records].msg)
    end)

    it("fails the start, naming the variable, when the address is taken or the hooks file is bad", function()
        local holder = assert(http.listen("127.0.0.1", 0, function() return 200, "text/plain", "" end))
        local taken = {}
        local h = start_daemon(daemon_env(server, holder:port()), taken)
        local report = h:wait(30)
        holder:close()
        assert.are.equal(2, report.status)
        local records, bad = records_of(taken)
        assert.are.same({}, bad)
        assert.matches("RELAY_METRICS_ADDR=127.0.0.1:%d+: cannot listen on 127.0.0.1:%d+: Address already in use",
            records[#records].msg)
        local broken = {}
        h = start_daemon(daemon_env(server, endpoints.free_port(),
            { RELAY_HOOKS = CWD .. "/spec/fixtures/obs-hooks/broken.lua" }), broken)
        report = h:wait(30)
        assert.are.equal(2, report.status)
        records = records_of(broken)
        assert.matches("RELAY_HOOKS: .*unknown hook 'on_evnt'", records[#records].msg)
    end)
end)
