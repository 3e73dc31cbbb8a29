-- The life of one message (relay.dispatch), branch by branch, with a fake
-- lifecycle (the scripts' replies, modelled in memory), a fake runtime (a
-- driver that runs `sh -c` on the host through the real relay.runtime.invoke
-- and relay.core.proc) and the real slots, shutdown and registry.
local dispatch = require("relay.dispatch")
local log = require("relay.log")
local registry_mod = require("relay.registry")
local shutdown_mod = require("relay.shutdown")
local slots_mod = require("relay.slots")

local MAX = 2
local LOST = "worker lost during attempt"


--- The lifecycle's replies, modelled: every call is recorded in calls
-- ({ name, label, … }), a label is terminal once a reply says so, and
-- replies[name] (a value or function(label, …)) overrides the default.
local function fake_lifecycle(replies)
    local life = { calls = {}, terminal = {}, seq = 0 }
    local TERMINAL = { succeeded = true, exhausted = true, terminal = true, retained = true }

    local function reply(name, label, default, ...)
        life.calls[#life.calls + 1] = { name, label, ... }
        local r = replies[name]
        if type(r) == "function" then
            return r(label, ...)
        elseif r ~= nil then
            return r
        end
        return default
    end

    local function mark(label, r, ...)
        local word = type(r) == "table" and (r[1] == "skip" and r[2] or r[1]) or r
        life.terminal[label] = life.terminal[label] or TERMINAL[word] or false
        return r, ...
    end

    function life.token()
        life.seq = life.seq + 1
        return "i." .. life.seq
    end
    function life.try_start(_, _, inv, token)
        return mark(inv.label, reply("try_start", inv.label, { "start", 1, "" }, token))
    end
    function life.succeed(_, _, inv, token, attempt)
        return mark(inv.label, reply("succeed", inv.label, "succeeded", token, attempt))
    end
    function life.fail(_, _, inv, token, attempt, reason, output)
        return mark(inv.label, reply("fail", inv.label, { "waiting", 1000 }, token, attempt, reason, output))
    end
    function life.release(_, _, inv, token, attempt, previous)
        return reply("release", inv.label, "released", token, attempt, previous)
    end
    -- Recorded only when a spec sets its reply: most claims need no replica.
    function life.replicated()
        if replies.replicated == nil then
            return true
        end
        return reply("replicated", nil, true)
    end
    function life.exhaust(_, _, label, reason)
        return mark(label, reply("exhaust", label, "exhausted", reason))
    end
    function life.ack_if_terminal(_, _, labels)
        local open = {}
        for _, label in ipairs(labels) do
            if not life.terminal[label] then
                open[#open + 1] = label
            end
        end
        if replies.ack_if_terminal then
            return reply("ack_if_terminal", nil, nil, open)
        end
        life.calls[#life.calls + 1] = { "ack_if_terminal" }
        return #open == 0, open
    end
    function life.ack_obsolete(_, msg)
        return reply("ack_obsolete", msg.schedule, true)
    end
    function life.dead_letter_message(_, msg, reason)
        return reply("dead_letter_message", msg.target, "9-0", reason)
    end
    return life
end


--- The names of the calls made, in order.
local function call_names(life)
    local out = {}
    for i, c in ipairs(life.calls) do
        out[i] = c[1]
    end
    return out
end


--- The first recorded call named name.
local function call(life, name)
    for _, c in ipairs(life.calls) do
        if c[1] == name then
            return c
        end
    end
end


--- A runtime whose one driver runs each handler's shell script (app.scripts)
-- on the host; a handler without a script cannot be prepared: the host
-- failure of a container that never starts. on_finish runs as it ends.
local function fake_runtime(on_finish)
    local driver = { name = "fake" }
    function driver.check()
        return true
    end
    function driver.prepare(_, app, inv)
        local script = app.scripts[inv.handler]
        if not script then
            return nil, "image not found"
        end
        return { argv = { "/bin/sh", "-c", script } }
    end
    function driver.finish(_, _, report)
        if on_finish then
            on_finish()
        end
        return { status = report.status, signal = report.signal }
    end
    return { driver_for = function() return driver end }
end


local function fake_reporter()
    local r = { events = {}, attempts = {}, dlqs = {}, counts = {}, retries = {} }
    function r.event(outcome)
        r.events[#r.events + 1] = outcome
    end
    function r.attempt(inv, outcome, result, _, attempt, retry_in_ms)
        r.attempts[#r.attempts + 1] = { inv.app .. "/" .. inv.handler, outcome, attempt, result.reason }
        r.retries[#r.retries + 1] = retry_in_ms or false
    end
    function r.dlq(inv, _, reason, attempts, id)
        r.dlqs[#r.dlqs + 1] = { inv.app .. "/" .. inv.handler, reason, attempts, id }
    end
    function r.inc(name, _, by)
        r.counts[name] = (r.counts[name] or 0) + (by or 1)
    end
    return r
end


--- App "a": handlers ok, fails, slow (a 100 ms timeout) and nohost (no
-- script: its container never starts), and the schedule "nightly".
local function app_a()
    local function event(handler, timeout_ms)
        return { handler = handler, timeout_ms = timeout_ms or 5000, retries = 2 }
    end
    return {
        name = "a", state = "ok",
        events = { event("ok"), event("fails"), event("slow", 100), event("nohost") },
        schedules = { { name = "nightly", handler = "ok", timeout_ms = 5000, payload_json = '{"n":1}' } },
        scripts = { ok = "cat >/dev/null; echo done", fails = "echo boom >&2; exit 3", slow = "exec sleep 5" },
    }
end


local function fake_registry(paused)
    local reg = registry_mod.new({ max_concurrency = MAX })
    local app = app_a()
    reg.list, reg.by_name = { app }, { a = app }
    reg:set_paused(paused or {})
    return reg
end


--- A context as the worker builds it, over the fakes. opts: replies (the
-- lifecycle's), paused (app names), on_finish (the runtime's), max (global
-- permits).
local function context(opts)
    opts = opts or {}
    return {
        lifecycle = fake_lifecycle(opts.replies or {}),
        runtime = fake_runtime(opts.on_finish),
        registry = fake_registry(opts.paused),
        slots = slots_mod.new({ max = opts.max or MAX, limit_of = function() return MAX end }),
        reporter = fake_reporter(),
        shutdown = shutdown_mod.new(),
        constants = { slot_wait_ms = 20, default_retries = 4 },
    }
end


local function matched(...)
    return { id = "1-0", kind = "matched", labels = { ... }, event = '{"t":1}' }
end


--- Nothing is held once a message is processed: no invocation counted as
-- running, every permit free.
local function assert_slots_free(ctx)
    assert.are.equal(0, ctx.slots.running)
    for _ = 1, MAX do
        assert.is_function(ctx.slots:acquire("a", 0))
    end
end


describe("dispatch", function()
    local saved, lines, warnings

    before_each(function()
        saved = { info = log.info, warn = log.warn, handler_line = log.handler_line }
        lines, warnings = {}, {}
        log.info = function() end
        log.warn = function(msg) warnings[#warnings + 1] = msg end
        log.handler_line = function(_, stream, line) lines[#lines + 1] = stream .. ": " .. line end
    end)

    after_each(function()
        log.info, log.warn, log.handler_line = saved.info, saved.warn, saved.handler_line
    end)

    it("acknowledges a message whose handler succeeded", function()
        local ctx = context()
        assert.are.equal("acked", dispatch.process(ctx, matched("a/ok")))
        assert.are.same({ "try_start", "succeed", "ack_if_terminal" }, call_names(ctx.lifecycle))
        assert.are.same({ { "a/ok", "succeeded", 1 } }, ctx.reporter.attempts)
        assert.are.same({ "stdout: done" }, lines)
        assert_slots_free(ctx)
    end)

    it("records a failure with its stderr tail and keeps the message for the retry", function()
        local ctx = context()
        assert.are.same({ "pending", 1000 }, { dispatch.process(ctx, matched("a/fails")) })
        local fail = call(ctx.lifecycle, "fail")
        assert.are.same({ "fail", "a/fails", "i.1", 1, "exit status 3", "boom" }, fail)
        assert.are.same({ { "a/fails", "failed", 1, "exit status 3" } }, ctx.reporter.attempts)
        assert.are.same({ 1000 }, ctx.reporter.retries)  -- the log's next_attempt_at
        assert_slots_free(ctx)
    end)

    it("reports a timeout as its own outcome", function()
        local ctx = context()
        dispatch.process(ctx, matched("a/slow"))
        assert.are.same({ { "a/slow", "timeout", 1, "timeout after 100ms" } }, ctx.reporter.attempts)
    end)

    it("dead-letters a failure that exhausted the attempts and acknowledges", function()
        local ctx = context({ replies = { fail = { "exhausted", "7-0" } } })
        assert.are.equal("acked", dispatch.process(ctx, matched("a/fails")))
        assert.are.same({ { "a/fails", "exit status 3", 1, "7-0" } }, ctx.reporter.dlqs)
        assert.are.same({ false }, ctx.reporter.retries)  -- no retry to announce
        assert_slots_free(ctx)
    end)

    it("reports an attempt lost by a dead worker and waits for its backoff", function()
        local ctx = context({ replies = { try_start = { "skip", "lost", 2000, 1 } } })
        assert.are.same({ "pending", 2000 }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ { "a/ok", "lost", 1, LOST } }, ctx.reporter.attempts)
        assert.are.same({ 2000 }, ctx.reporter.retries)
        assert.is_nil(call(ctx.lifecycle, "succeed"))
        assert_slots_free(ctx)
    end)

    it("dead-letters a lost last attempt", function()
        local ctx = context({ replies = { try_start = { "exhausted", 5, "9-0" } } })
        assert.are.equal("acked", dispatch.process(ctx, matched("a/ok")))
        assert.are.same({ { "a/ok", "lost", 5, LOST } }, ctx.reporter.attempts)
        assert.are.same({ { "a/ok", LOST, 5, "9-0" } }, ctx.reporter.dlqs)
    end)

    it("leaves an invocation another worker is running alone", function()
        local ctx = context({ replies = { try_start = { "skip", "running", 3000 } } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({}, ctx.reporter.attempts)
        assert_slots_free(ctx)
    end)

    it("counts a success written with a stale token and keeps the message", function()
        local ctx = context({ replies = { succeed = "stale" } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.equal(1, ctx.reporter.counts.relay_stale_token_writes_total)
        assert_slots_free(ctx)
    end)

    it("counts a failure written with a stale token and keeps the message", function()
        local ctx = context({ replies = { fail = { "stale" } } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/fails")) })
        assert.are.equal(1, ctx.reporter.counts.relay_stale_token_writes_total)
    end)

    it("gives the claim back uncharged when the host cannot start the container", function()
        local ctx = context({ replies = { try_start = { "start", 2, "waiting:1:0" } } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/nohost")) })
        assert.are.same({ "release", "a/nohost", "i.1", 2, "waiting:1:0" }, call(ctx.lifecycle, "release"))
        assert.are.equal(1, ctx.reporter.counts.relay_start_failures_total)
        assert.are.same({}, ctx.reporter.attempts)
        assert.are.same({ "host could not start the container; the attempt is not charged" }, warnings)
        assert_slots_free(ctx)
    end)

    it("gives the claim back when draining began while claiming", function()
        local ctx
        ctx = context({ replies = { try_start = function()
            ctx.shutdown:drain()
            return { "start", 1, "" }
        end } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ "try_start", "release", "ack_if_terminal" }, call_names(ctx.lifecycle))
        assert.are.same({}, lines)  -- the handler never ran
        assert_slots_free(ctx)
    end)

    it("starts nothing when replicas do not acknowledge the claim: released uncharged, tried again later", function()
        local ctx = context({ replies = {
            try_start = { "start", 2, "waiting:1:0" },
            replicated = function() return false, "0 of 1 replicas acknowledged within 50 ms", true end,
        } })
        assert.are.same({ "pending", 20 }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ "try_start", "replicated", "release", "ack_if_terminal" }, call_names(ctx.lifecycle))
        assert.are.same({ "release", "a/ok", "i.1", 2, "waiting:1:0" }, call(ctx.lifecycle, "release"))
        assert.are.same({}, lines)  -- the handler never ran
        assert.are.same({}, ctx.reporter.attempts)
        assert.are.same({ "replicas do not acknowledge claims; nothing starts" }, warnings)
        assert_slots_free(ctx)
    end)

    it("runs a claim the replicas acknowledged", function()
        local ctx = context({ replies = { replicated = true } })
        assert.are.equal("acked", dispatch.process(ctx, matched("a/ok")))
        assert.are.same({ "try_start", "replicated", "succeed", "ack_if_terminal" }, call_names(ctx.lifecycle))
    end)

    it("starts nothing once draining", function()
        local ctx = context()
        ctx.shutdown:drain()
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ "ack_if_terminal" }, call_names(ctx.lifecycle))
    end)

    it("records nothing for a run a forced stop killed: its marker stays for recovery", function()
        local ctx
        ctx = context({ on_finish = function() ctx.shutdown:force(15) end })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/fails")) })
        assert.are.same({ "try_start", "ack_if_terminal" }, call_names(ctx.lifecycle))
        assert.are.same({}, ctx.reporter.attempts)
        assert_slots_free(ctx)
    end)

    it("starts nothing for a paused app", function()
        local ctx = context({ paused = { "a" } })
        assert.are.same({ "pending" }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ "ack_if_terminal" }, call_names(ctx.lifecycle))
    end)

    it("dead-letters the invocation of a removed handler and acknowledges", function()
        local ctx = context()
        assert.are.equal("acked", dispatch.process(ctx, matched("a/gone")))
        assert.are.same({ "exhaust", "a/gone", "handler removed" }, call(ctx.lifecycle, "exhaust"))
        assert.are.same({ { "a/gone", "handler removed" } }, ctx.reporter.dlqs)
    end)

    it("waits for a slot without charging an attempt", function()
        local ctx = context({ max = 0 })
        assert.are.same({ "pending", 20 }, { dispatch.process(ctx, matched("a/ok")) })
        assert.are.same({ "ack_if_terminal" }, call_names(ctx.lifecycle))
    end)

    it("stops at an infrastructure failure, holding nothing", function()
        local ctx = context({ replies = { try_start = function() return nil, "LOADING" end } })
        assert.are.same({ nil, "LOADING" }, { dispatch.process(ctx, matched("a/ok")) })
        assert_slots_free(ctx)
    end)

    it("runs every matched handler in order and acknowledges when all are terminal", function()
        local ctx = context({ replies = { fail = { "exhausted", "8-0" } } })
        assert.are.equal("acked", dispatch.process(ctx, matched("a/fails", "a/ok")))
        assert.are.same({ "try_start", "fail", "try_start", "succeed", "ack_if_terminal" },
            call_names(ctx.lifecycle))
    end)

    it("also runs the open invocations the message's state records", function()
        local ctx
        ctx = context({ replies = { ack_if_terminal = function(_, open)
            if not ctx.lifecycle.terminal["a/ok"] then
                return false, { "a/ok" }  -- recorded by an earlier delivery
            end
            return #open == 0, open
        end } })
        local msg = { id = "1-0", kind = "unmatched", event = "{}" }
        assert.are.equal("acked", dispatch.process(ctx, msg))
        assert.are.same({ "ack_if_terminal", "try_start", "succeed", "ack_if_terminal" }, call_names(ctx.lifecycle))
    end)

    it("runs a schedule's handler with its payload", function()
        local ctx = context()
        local msg = { id = "2-0", kind = "schedule", schedule = "a/nightly", occurrence = "2026-01-01T00:00:00Z" }
        assert.are.equal("acked", dispatch.process(ctx, msg))
        assert.are.same({ "schedule" }, ctx.reporter.events)
        assert.are.same({ { "a/ok", "succeeded", 1 } }, ctx.reporter.attempts)
        assert.matches('"payload":{"n":1}', msg.stdin, 1, true)
    end)

    it("acknowledges the occurrence of a schedule no longer configured", function()
        local ctx = context()
        local msg = { id = "2-0", kind = "schedule", schedule = "a/gone", occurrence = "x" }
        assert.are.equal("acked", dispatch.process(ctx, msg))
        assert.are.same({ "ack_obsolete" }, call_names(ctx.lifecycle))
        assert.are.same({ "obsolete" }, ctx.reporter.events)
    end)

    it("dead-letters a replay whose target is gone", function()
        local ctx = context()
        local msg = { id = "3-0", kind = "targeted", target = "a/gone", labels = { "a/gone" }, event = "{}" }
        assert.are.equal("acked", dispatch.process(ctx, msg))
        assert.are.same({ "dead_letter_message", "a/gone", "replay target not found" },
            call(ctx.lifecycle, "dead_letter_message"))
        assert.are.same({ { "-/-", "replay target not found", 0, "9-0" } }, ctx.reporter.dlqs)
    end)
end)
