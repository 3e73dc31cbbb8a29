-- `relay run` end to end with a real redis-server and real runc containers:
-- the matched path (stdin, environment, ACK, markers, retention, output
-- prefix, dispatch order), unmatched and malformed entries, targeted
-- replays, unavailable and paused apps, the consumer-name guard, and one
-- retry on the release constants. Fault scenarios: 41-… and 42-….
local build = require("relay.core.build")
local cli = require("helpers.cli")
local fs = require("relay.fs")
local http_helper = require("helpers.http")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local runtime = require("relay.runtime")
local scripts = require("relay.scripts")
local world = require("helpers.world")

local usable = fs.geteuid() == 0 and fs.which("runc") ~= nil and runtime.cgroup_mode() ~= nil
local maybe = usable and describe or pending
local compressed = build.test_constants

local DAY_MS = 24 * 3600 * 1000
local RFC3339 = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.?%d*Z$"
local TOKEN = "[0-9a-f]+%.%d+"
local DLQ_FIELDS = { "original_stream", "original_id", "group", "consumer", "event", "reason", "app", "handler",
    "deliveries", "handler_attempts", "timestamp" }


local function hex(s)
    return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end


local function sorted(t)
    local copy = {}
    for i, v in ipairs(t) do
        copy[i] = v
    end
    table.sort(copy)
    return copy
end


--- XADD as `relay dlq replay` does: recorded as trusted, so its reserved
-- fields are honoured (a producer's are dead-lettered: 62-…).
local function xadd_trusted(w, ...)
    return assert(redis.eval(w.r, scripts.publish_trusted, { "events", "relay:events:trusted" }, { ... }))
end


--- Output lines of one handler run, without the prefix (the prefix must
-- be exactly `[<app>/<handler> <id>#<attempt>] `).
local function output_of(d, app, handler, id, attempt)
    local prefix = string.format("[%s/%s %s#%d] ", app, handler, id, attempt)
    local out = {}
    for _, l in ipairs(d.lines) do
        -- handler lines are INFO records: "<ts> INFO  [app/handler id#n] line"
        local rest = l:match("^%S+ INFO  (.*)$")
        if rest and rest:sub(1, #prefix) == prefix then
            out[#out + 1] = rest:sub(#prefix + 1)
        end
    end
    return out
end


maybe("relay run", function()
    local w

    before_each(function()
        w = world.new()
    end)

    after_each(function()
        w:close()
    end)

    it("runs a matched event's handler with the event on stdin and the environment contract", function()
        local d = w:started("c1")
        local event = '{"t":"echo", "n": 1.50,"s":"\\u00e9\xc3\xa9 x"}'
        local id = w:publish(event)
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message retained")

        local inv = w:inv(id)
        assert.matches("^succeeded:1:" .. TOKEN .. "$", inv["wa/echo"])
        assert.are.equal("1", inv["~retained"])
        local fields = {}
        for k in pairs(inv) do
            fields[#fields + 1] = k
        end
        assert.are.same({ "wa/echo", "~retained" }, sorted(fields))
        -- ~7 days of terminal retention (the test build divides it by 60)
        local retention = compressed and 7 * DAY_MS / 60 or 7 * DAY_MS
        local ttl = w:pttl("relay:events:inv:" .. id)
        assert.is_true(ttl > retention - 60000 and ttl <= retention, "pttl " .. ttl)
        assert.are.equal(0, w:pending())

        local out = output_of(d, "wa", "echo", id, 1)
        assert.are.same({
            "T start " .. id .. " 1 echo",
            "STDIN " .. hex(event),
            "ENV RELAY_APP=wa",
            "ENV RELAY_ATTEMPT=1",
            "ENV RELAY_HANDLER=echo",
            "ENV RELAY_MESSAGE_ID=" .. id,
            "ENV RELAY_TRIGGER=event",
            "T end " .. id .. " 1 echo",
        }, (function()
            local kept = {}
            for _, l in ipairs(out) do
                if not l:find("^ENV RELAY_DEADLINE=") then
                    kept[#kept + 1] = (l:gsub("^(T %a+ %S+ %d+ %S+) %d+$", "%1"))
                end
            end
            return kept
        end)())
        local deadlines = 0
        for _, l in ipairs(out) do
            local v = l:match("^ENV RELAY_DEADLINE=(.*)$")
            if v then
                assert.matches(RFC3339, v)
                deadlines = deadlines + 1
            end
        end
        assert.are.equal(1, deadlines)
        assert.are.same({}, w:dlq())
    end)

    it("runs every matching handler of a message one at a time, in dispatch order", function()
        local d = w:started("c1")
        local id = w:publish('{"t":"multi"}')
        d:wait_until(function() return w:inv(id)["~retained"] end, 15, "the message retained")
        local inv = w:inv(id)
        for _, label in ipairs({ "wa/multi.first", "wa/multi.second", "wb/multi.third" }) do
            assert.matches("^succeeded:1:" .. TOKEN .. "$", inv[label])
        end
        local runs = d:runs()
        local order = {}
        for _, r in ipairs(runs) do
            order[#order + 1] = r.what .. " " .. r.label
        end
        -- apps in sorted name order, rules in declaration order, never overlapping
        assert.are.same({ "start wa/multi.first", "end wa/multi.first", "start wa/multi.second",
            "end wa/multi.second", "start wb/multi.third", "end wb/multi.third" }, order)
        for i = 2, #runs do
            assert.is_true(runs[i].us >= runs[i - 1].us)
        end
        assert.are.equal(0, w:pending())
    end)

    it("acknowledges unmatched events without state and keeps serving", function()
        local d = w:started("c1")
        local ids = { w:publish('{"t":"nobody"}'), w:publish('{"x":1}'), w:publish("{}") }
        local ok_id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(ok_id)["~retained"] end, 15, "the ok message retained")
        d:wait_until(function() return w:pending() == 0 end, 5, "PEL empty")
        for _, id in ipairs(ids) do
            assert.are.same({}, w:inv(id))
        end
        assert.are.equal(1, #d:runs("start"))
        assert.are.same({}, w:dlq())
    end)

    it("settles a first read mixing unmatched, matched and malformed entries, counting each outcome", function()
        -- published before the start: one read brings them all (a stream batch, src/lua_stream_batch.c)
        local unmatched = { w:publish('{"t":"nobody"}'), w:xadd("event", '{"t":"x"}', "extra", "1"),
            w:publish("{}") }
        local ok_id = w:publish('{"t":"ok"}')
        local bad_id = w:publish("not json")
        local port = http_helper.free_port()
        local d = w:started("c1", { RELAY_METRICS_ADDR = "127.0.0.1:" .. port })
        d:wait_until(function() return w:inv(ok_id)["~retained"] end, 15, "the ok message retained")
        d:wait_until(function() return #w:dlq() == 1 and w:pending() == 0 end, 5, "PEL empty, one dead letter")
        for _, id in ipairs(unmatched) do
            assert.are.same({}, w:inv(id))
        end
        assert.are.equal(1, #d:runs("start"))
        assert.are.equal(bad_id, w:dlq()[1].fields.original_id)
        assert.matches("^invalid JSON", w:dlq()[1].fields.reason)
        local _, _, body = http_helper.get(port, "/metrics")
        assert.are.equal(3, http_helper.sample(body, 'relay_events_total{outcome="unmatched"}'))
        assert.are.equal(1, http_helper.sample(body, 'relay_events_total{outcome="matched"}'))
        assert.are.equal(1, http_helper.sample(body, 'relay_events_total{outcome="malformed"}'))
    end)

    it("dead-letters each malformed message once with the documented DLQ fields, then acknowledges it", function()
        local d = w:started("c1", { RELAY_MAX_EVENT_BYTES = "300000" })
        local cases = {
            { fields = { "other", "x" }, reason = "^missing event field$", event = "" },
            { event = "not json", reason = "^invalid JSON" },
            { event = "[1]", reason = "^event is not a JSON object$" },
            { event = '{"t":"ok","s":"\xff\xfe"}', reason = "^invalid UTF%-8" },
            -- too large to keep whole: its first 4 KiB and its size (47-…)
            { event = '{"t":"ok","pad":"' .. string.rep("x", 300000) .. '"}', reason = "^event too large",
                kept = 4096 },
            { event = '{"t":"ok","a":' .. string.rep("[", 100000) .. string.rep("]", 100000) .. "}",
                reason = "^nesting deeper than" },
        }
        local by_id = {}
        for _, c in ipairs(cases) do
            c.id = c.fields and w:xadd(unpack(c.fields)) or w:publish(c.event)
            by_id[c.id] = c
        end
        local after = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(after)["~retained"] end, 20, "the later good message")
        d:wait_until(function() return #w:dlq() >= #cases and w:pending() == 0 end, 10, "dead letters and ACKs")
        local entries = w:dlq()
        assert.are.equal(#cases, #entries)
        local seen = {}
        for _, e in ipairs(entries) do
            local f = e.fields
            local c = by_id[f.original_id]
            assert.is_truthy(c, "unexpected entry for " .. tostring(f.original_id))
            assert.is_nil(seen[f.original_id], "two entries for " .. f.original_id)
            seen[f.original_id] = true
            assert.are.same(sorted(c.kept and { "event_bytes", unpack(DLQ_FIELDS) } or DLQ_FIELDS), sorted(e.names))
            assert.are.equal("events", f.original_stream)
            assert.are.equal("relay", f.group)
            assert.are.equal(w:consumer("c1"), f.consumer)
            assert.are.equal(c.kept and c.event:sub(1, c.kept) or c.event, f.event)
            assert.are.equal(c.kept and tostring(#c.event) or nil, f.event_bytes)
            assert.matches(c.reason, f.reason)
            assert.are.equal("-", f.app)
            assert.are.equal("-", f.handler)
            assert.are.equal("1", f.deliveries)
            assert.are.equal("0", f.handler_attempts)
            assert.matches(RFC3339, f.timestamp)
            -- settled in one script: the dead letter is recorded and retained
            assert.are.equal(e.id, w:inv(f.original_id)["-/-"])
            assert.are.equal("1", w:inv(f.original_id)["~retained"])
        end
        -- no handler ran for any of them; only the good one
        local starts = d:runs("start")
        assert.are.equal(1, #starts)
        assert.are.equal(after, starts[1].id)
        assert.is_true(d:alive())
    end)

    it("runs a targeted entry's handler only, and dead-letters an unknown target", function()
        local d = w:started("c1")
        -- the event itself matches multi.*; the target picks one handler
        local id = xadd_trusted(w, "event", '{"t":"multi"}', "relay_target", "wa/multi.second",
            "relay_replay_of", "1-1")
        -- a targeted event needs no match at all
        local id2 = xadd_trusted(w, "event", '{"t":"nobody"}', "relay_target", "wb/ok")
        local gone = xadd_trusted(w, "event", '{"t":"ok"}', "relay_target", "wa/nosuch")
        local gone_app = xadd_trusted(w, "event", '{"t":"ok"}', "relay_target", "nosuch/ok")
        d:wait_until(function()
            return w:inv(id)["~retained"] and w:inv(id2)["~retained"] and w:pending() == 0 and #w:dlq() == 2
        end, 15, "targeted messages settled")
        local labels = {}
        for _, r in ipairs(d:runs("start")) do
            labels[#labels + 1] = r.id .. " " .. r.label
        end
        assert.are.same(sorted({ id .. " wa/multi.second", id2 .. " wb/ok" }), sorted(labels))
        assert.are.same({ "wa/multi.second", "~retained" }, sorted((function()
            local k = {}
            for f in pairs(w:inv(id)) do
                k[#k + 1] = f
            end
            return k
        end)()))
        local dlq = w:dlq()
        assert.are.equal(2, #dlq)
        local targets = {}
        for _, e in ipairs(dlq) do
            assert.are.equal("replay target not found", e.fields.reason)
            assert.are.equal("0", e.fields.handler_attempts)
            assert.are.equal('{"t":"ok"}', e.fields.event)
            targets[#targets + 1] = e.fields.original_id
        end
        assert.are.same(sorted({ gone, gone_app }), sorted(targets))
    end)

    it("keeps a message of an unavailable app pending, uncharged and out of the DLQ", function()
        local d = w:started("c1")
        local id = w:publish('{"t":"missing"}')
        local ok_id = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(ok_id)["~retained"] end, 15, "the other message")
        -- several reclaim sweeps on the test build; on the release build the
        -- immediate delivery only
        loop.sleep(2)
        assert.are.same({}, w:inv(id))
        local pend = w:pending_entries()
        assert.is_truthy(pend[id], "the message must stay pending")
        assert.are.equal(1, w:pending())
        assert.are.same({}, w:dlq())
        assert.are.equal(1, #d:runs("start"))
        local why = d:grep("app unavailable on this host")
        assert.are.equal(1, #why)
        assert.truthy(why[1]:find("app=wmissing", 1, true), why[1])
        assert.truthy(why[1]:find("image directory not found", 1, true), why[1])
    end)

    it("refuses a second live daemon with the same consumer name; a dead one's name is taken over at once",
        function()
        local d = w:started("guard")
        local env = { REDIS_URL = w.server.url, RELAY_APPS = world.APPS, RELAY_CONSUMER = w:consumer("guard"),
            RELAY_STATE_DIR = w.state_dir, RELAY_RUNTIME = "runc" }
        local t0 = loop.monotonic()
        local r = cli.run({ "run" }, env)
        assert.are.equal(2, r.code, r.stderr)
        assert.truthy(r.stderr:find("^relay: "), r.stderr)
        assert.truthy(r.stderr:find(w:consumer("guard"), 1, true), r.stderr)
        assert.is_true(loop.monotonic() - t0 < 10)
        assert.is_true(d:alive())

        d:kill9()
        t0 = loop.monotonic()
        local d2 = w:started("guard")
        -- well inside one heartbeat TTL (15 s on the release build)
        assert.is_true(loop.monotonic() - t0 < (compressed and 5 or 8))
        assert.are.equal(1, d2:count("taking over the consumer name from a dead process"))
        local id = w:publish('{"t":"ok"}')
        d2:wait_until(function() return w:inv(id)["~retained"] end, 15, "a message after the takeover")
    end)

    it("exits 2 when its first Redis connection fails", function()
        local r = cli.run({ "run" }, { REDIS_URL = "unix://" .. w.state_dir .. "/nosuch.sock",
            RELAY_APPS = world.APPS, RELAY_CONSUMER = w:consumer("nored"), RELAY_STATE_DIR = w.state_dir })
        assert.are.equal(2, r.code, r.stderr)
        assert.truthy(r.stderr:find("nosuch.sock", 1, true), r.stderr)
    end)

    -- Runs untagged: on the release build it checks the real 1-minute step.
    it("records a failed attempt as waiting for its backoff step and keeps the message pending", function()
        local d = w:started("c1")
        local id = w:publish('{"t":"exit3"}')
        d:wait_until(function() return (w:inv(id)["wa/exit3"] or ""):find("^waiting:") end, 15, "waiting marker")
        local now = w:time_ms()
        local marker = w:inv(id)["wa/exit3"]
        local next_at = tonumber(marker:match("^waiting:1:(%d+)$"))
        assert.is_truthy(next_at, marker)
        local step = compressed and 1000 or 60000
        -- written at most a couple of seconds ago, from Redis TIME
        assert.is_true(next_at - now <= step and next_at - now > step - 3000, "next at " .. next_at - now)
        assert.is_truthy(w:pending_entries()[id])
        -- not run again before its step (release: nor within a few seconds), not
        -- charged, still pending
        local quiet = compressed and (next_at - w:time_ms()) / 1000 - 0.2 or 4
        loop.sleep(quiet)
        assert.are.equal(1, #d:runs("start"))
        assert.are.equal(marker, w:inv(id)["wa/exit3"])
        assert.is_truthy(w:pending_entries()[id])
        if compressed then
            -- the second attempt comes once the step has passed (Redis TIME)
            d:wait_until(function() return #d:runs("start") == 2 end, 5, "the second attempt")
            assert.is_true(d:runs("start")[2].us >= next_at * 1000)
        end
        assert.are.same({}, w:dlq())
    end)
end)


local maybe_compressed = (usable and compressed) and describe or pending

maybe_compressed("relay run pause/resume #compressed", function()
    local w

    before_each(function()
        w = world.new()
    end)

    after_each(function()
        w:close()
    end)

    it("keeps a paused app's events pending and unrun, and runs them after resume", function()
        local env = { REDIS_URL = w.server.url, RELAY_APPS = world.APPS }
        local r = cli.run({ "app", "pause", "wb" }, env)
        assert.are.equal(0, r.code, r.stderr)
        local d = w:started("c1")
        local paused = { w:publish('{"t":"b-ok"}'), w:publish('{"t":"b-ok"}') }
        local other = w:publish('{"t":"ok"}')
        d:wait_until(function() return w:inv(other)["~retained"] end, 15, "the other app's message")
        -- several reclaim sweeps (250 ms) past MinPendingIdle (1 s)
        loop.sleep(2.5)
        for _, id in ipairs(paused) do
            assert.are.same({}, w:inv(id))
            assert.is_truthy(w:pending_entries()[id])
        end
        assert.are.equal(1, #d:runs("start"))
        assert.are.same({}, w:dlq())

        r = cli.run({ "app", "resume", "wb" }, env)
        assert.are.equal(0, r.code, r.stderr)
        local t0 = loop.monotonic()
        d:wait_until(function() return w:pending() == 0 end, 10, "resumed messages acknowledged")
        -- housekeeping (250 ms) + MinPendingIdle (1 s) + a sweep (250 ms) + the runs
        assert.is_true(loop.monotonic() - t0 < 4)
        for _, id in ipairs(paused) do
            assert.matches("^succeeded:1:" .. TOKEN .. "$", w:inv(id)["wb/ok"])
        end
        assert.are.equal(3, #d:runs("end"))
    end)
end)
