-- The metrics registry's Prometheus text format (0.0.4) and the responder's
-- answers for /metrics, /healthz and everything else.
local metrics = require("relay.metrics")
local observe = require("relay.observe")
local loop = require("relay.core.loop")
local sample = require("helpers.http").sample

local FAMILIES = {
    relay_events_total = "counter", relay_attempts_total = "counter",
    relay_attempt_duration_seconds = "histogram", relay_dlq_entries_total = "counter",
    relay_missing_payload_total = "counter", relay_trimmed_undelivered_total = "counter",
    relay_reclaimed_total = "counter",
    relay_running_invocations = "gauge", relay_redis_reconnects_total = "counter",
    relay_start_failures_total = "counter", relay_stale_token_writes_total = "counter",
    relay_warm_starts_total = "counter",
    relay_group_recreated_total = "counter", relay_log_dropped_total = "counter",
    relay_build_info = "gauge", process_cpu_seconds_total = "counter", process_resident_memory_bytes = "gauge",
    process_open_fds = "gauge", process_start_time_seconds = "gauge",
}


local function lines_of(text)
    local out = {}
    for line in text:gmatch("([^\n]*)\n") do
        out[#out + 1] = line
    end
    return out
end


local function fake_worker(connected)
    local w = { metrics_registry = metrics.new(), loop_tick = loop.monotonic() }
    observe.watch(w, {
        client = { connected = function() return connected end, info = function() return { reconnects = 3 } end },
        reader = { info = function() return { reconnects = 1 } end },
        slots = { running = 2 },
    })
    w.metrics = observe.reporter(w)
    return w
end


describe("metrics", function()
    it("renders HELP and TYPE for every documented family, and valid sample lines", function()
        local text = metrics.new():render()
        assert.are.equal("\n", text:sub(-1))
        for name, kind in pairs(FAMILIES) do
            assert.matches("\n?# HELP " .. name .. " [^\n]+\n# TYPE " .. name .. " " .. kind .. "\n", text)
        end
        for _, line in ipairs(lines_of(text)) do
            if line:sub(1, 1) ~= "#" then
                assert.matches("^[a-z_]+ 0$", line)  -- no series yet: unlabelled families show 0
            end
        end
        assert.are.equal(0, sample(text, "relay_reclaimed_total"))
        assert.is_nil(text:find("relay_events_total 0", 1, true))  -- labelled families have no bare sample
    end)

    it("sorts label names, escapes values and counts exactly", function()
        local reg = metrics.new()
        reg:inc("relay_attempts_total", { outcome = "failed", handler = 'h"\\\n', app = "a" })
        reg:inc("relay_attempts_total", { outcome = "failed", handler = 'h"\\\n', app = "a" }, 2)
        reg:inc("relay_missing_payload_total", nil, 12345678901)
        local text = reg:render()
        assert.truthy(text:find('relay_attempts_total{app="a",handler="h\\"\\\\\\n",outcome="failed"} 3\n', 1, true))
        assert.truthy(text:find("relay_missing_payload_total 12345678901\n", 1, true))
    end)

    it("renders histograms with cumulative buckets, +Inf, _sum and _count", function()
        local reg = metrics.new()
        for _, v in ipairs({ 0.01, 0.2, 3, 1000 }) do
            reg:observe("relay_attempt_duration_seconds", v, { app = "a", handler = "h" })
        end
        local text = reg:render()
        local p = 'relay_attempt_duration_seconds_bucket{app="a",handler="h",le="%s"} '
        assert.truthy(text:find(p:format("0.05") .. "1\n", 1, true))
        assert.truthy(text:find(p:format("0.25") .. "2\n", 1, true))
        assert.truthy(text:find(p:format("5") .. "3\n", 1, true))
        assert.truthy(text:find(p:format("900") .. "3\n", 1, true))
        assert.truthy(text:find(p:format("+Inf") .. "4\n", 1, true))
        assert.truthy(text:find('relay_attempt_duration_seconds_count{app="a",handler="h"} 4\n', 1, true))
        assert.truthy(text:find('relay_attempt_duration_seconds_sum{app="a",handler="h"} 1003.210000\n', 1, true))
        local last = -1
        for count in text:gmatch('_bucket{[^}]*} (%d+)') do
            assert.is_true(tonumber(count) >= last)
            last = tonumber(count)
        end
    end)

    it("shows every event outcome from the start through the worker's helpers", function()
        local w = fake_worker(true)
        w.metrics.event("unmatched", { id = "1-0" })
        local text = w.metrics_registry:render()
        for _, outcome in ipairs(observe.EVENT_OUTCOMES) do
            assert.is_number(sample(text, 'relay_events_total{outcome="' .. outcome .. '"}'))
        end
        assert.are.equal(1, sample(text, 'relay_events_total{outcome="unmatched"}'))
        assert.are.equal(0, sample(text, 'relay_events_total{outcome="matched"}'))
    end)
end)


describe("the metrics responder", function()
    it("serves /metrics in the Prometheus text format with fresh gauges", function()
        local w = fake_worker(true)
        local status, ctype, body = observe.respond(w, "GET", "/metrics")
        assert.are.equal(200, status)
        assert.are.equal("text/plain; version=0.0.4; charset=utf-8", ctype)
        assert.are.equal(2, sample(body, "relay_running_invocations"))
        assert.are.equal(4, sample(body, "relay_redis_reconnects_total"))
    end)

    it("serves relay_build_info and this process's own figures", function()
        local _, _, body = observe.respond(fake_worker(true), "GET", "/metrics")
        local build = require("relay.core.build")
        assert.are.equal(1, sample(body, string.format('relay_build_info{hiredis="%s",luajit="%s",version="%s"}',
            build.hiredis, build.luajit:gsub("^LuaJIT ", ""), build.version)))
        assert.is_true(sample(body, "process_cpu_seconds_total") > 0)
        assert.is_true(sample(body, "process_resident_memory_bytes") > 1024 * 1024)
        assert.is_true(sample(body, "process_open_fds") >= 3)  -- stdin, stdout, stderr at least
        local age = os.time() - sample(body, "process_start_time_seconds")
        assert.is_true(age >= -2 and age < 3600, "started " .. age .. " s ago")
    end)

    it("answers /healthz 200 while Redis is connected and the loop ticks, 503 otherwise", function()
        local w = fake_worker(true)
        local status, _, body = observe.respond(w, "GET", "/healthz")
        assert.are.equal(200, status)
        assert.are.equal("ok\n", body)
        w = fake_worker(false)
        status, _, body = observe.respond(w, "GET", "/healthz")
        assert.are.equal(503, status)
        assert.are.equal("redis disconnected\n", body)
        w = fake_worker(true)
        w.loop_tick = loop.monotonic() - 60
        status, _, body = observe.respond(w, "GET", "/healthz")
        assert.are.equal(503, status)
        assert.are.equal("event loop stalled\n", body)
        w.client = nil
        assert.are.equal(503, (observe.respond(w, "GET", "/healthz")))
    end)

    it("answers 404 elsewhere", function()
        assert.are.equal(404, (observe.respond(fake_worker(true), "GET", "/")))
    end)

    it("is served over HTTP by relay.core.http without a task", function()
        local http = require("relay.core.http")
        local w = fake_worker(true)
        local server = assert(http.listen("127.0.0.1", 0, function(method, path)
            return observe.respond(w, method, path)
        end))
        local out = {}
        local proc = require("relay.core.proc")
        local h = assert(proc.spawn({
            argv = { "python3", "-c", string.format([[
import urllib.request, urllib.error
for path in ("/metrics", "/healthz", "/nope"):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d" + path, timeout=5)
        print(r.status, r.headers["Content-Type"], len(r.read()) > 0)
    except urllib.error.HTTPError as e:
        print(e.code)
]], server:port()) },
            timeout = 10,
            on_line = function(stream, line) out[#out + 1] = stream .. ": " .. line end,
        }))
        local report = h:wait(15)
        server:close()
        assert.are.equal(0, report.status, table.concat(out, "\n"))
        assert.are.same({ "stdout: 200 text/plain; version=0.0.4; charset=utf-8 True",
            "stdout: 200 text/plain; charset=utf-8 True", "stdout: 404" }, out)
    end)

    it("fails to listen on a taken port with a message naming the address", function()
        local http = require("relay.core.http")
        local a = assert(http.listen("127.0.0.1", 0, function() return 200, "text/plain", "" end))
        local b, err = http.listen("127.0.0.1", a:port(), function() return 200, "text/plain", "" end)
        a:close()
        assert.is_nil(b)
        assert.matches("cannot listen on 127.0.0.1:%d+: Address already in use", err)
    end)
end)
