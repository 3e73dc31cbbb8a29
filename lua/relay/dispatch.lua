--- Dispatch of one delivered message: its invocations run one at a time in
-- dispatch order; each is claimed (TryStart), run in its container and its
-- outcome recorded by a token-fenced script; the message is acknowledged
-- only when every invocation is terminal (events.md).
local invoke = require("relay.runtime.invoke")
local log = require("relay.log")
local loop = require("relay.core.loop")
local scheduler = require("relay.scheduler")

local _M = {}

local OUTPUT_TAIL_BYTES = 4096
local PERSIST_BACKOFF_CAP_S = 5
local LOST = "worker lost during attempt"


--- Retries fn until Redis accepts the write: an outcome that happened must
-- be recorded, however long Redis is away (RELIABILITY.md scenario 6).
local function persist(w, what, fn)
    local delay = 0.1
    while true do
        local value, err = fn()
        if value ~= nil then
            return value
        end
        if w.killed then
            return nil, err
        end
        log.warn("cannot record " .. what .. "; retrying", { error = err })
        loop.sleep(delay)
        delay = math.min(delay * 2, PERSIST_BACKOFF_CAP_S)
    end
end


--- The last OUTPUT_TAIL_BYTES of a handler's stderr, for its dead letter.
local function output_tail()
    local lines, size = {}, 0
    return {
        add = function(line)
            lines[#lines + 1] = line
            size = size + #line + 1
            while size > OUTPUT_TAIL_BYTES and #lines > 1 do
                size = size - #table.remove(lines, 1) - 1
            end
        end,
        text = function()
            local text = table.concat(lines, "\n")
            return #text > OUTPUT_TAIL_BYTES and text:sub(-OUTPUT_TAIL_BYTES) or text
        end,
    }
end


local function acquire_slots(w, app)
    local wait_s = w.constants.slot_wait_ms / 1000
    local started = loop.monotonic()
    if not w.slots.acquire(wait_s) then
        return false
    end
    local app_slots = w:app_slots(app)
    local left = math.max(0, wait_s - (loop.monotonic() - started))
    if not app_slots.acquire(left) then
        w.slots.release()
        return false
    end
    return true
end


local function release_slots(w, app)
    w:app_slots(app).release()
    w.slots.release()
end


local function execute(w, msg, inv, attempt)
    local tail = output_tail()
    local ctx = { app = inv.app, handler = inv.handler, message_id = msg.id, attempt = attempt }
    local key = {}
    local outcome = invoke.run({
        rt = w.rt, app = inv.app_table, entry = inv.entry, trigger = msg.trigger or "event",
        message_id = msg.id, attempt = attempt, stdin = msg.stdin or msg.event,
        on_line = function(stream, line)
            log.handler_line(ctx, stream, line)
            if stream == "stderr" then
                tail.add(line)
            end
        end,
        on_start = function(handle) w.running[key] = handle end,
    })
    w.running[key] = nil
    outcome.output = tail.text()
    return outcome
end


local function record_outcome(w, msg, inv, token, attempt, outcome)
    if outcome.ok then
        local r = persist(w, "a success", function() return w.life:succeed(msg, inv, token, attempt) end)
        w.metrics.attempt(inv, "succeeded", outcome, msg, attempt)
        if r == "stale" then
            w.metrics.inc("relay_stale_token_writes_total")
            return "pending"
        end
        return "terminal"
    end
    local r = persist(w, "a failure", function()
        return w.life:fail(msg, inv, token, attempt, outcome.reason, outcome.output)
    end)
    w.metrics.attempt(inv, outcome.timed_out and "timeout" or "failed", outcome, msg, attempt)
    if not r or r[1] == "stale" then
        w.metrics.inc("relay_stale_token_writes_total")
        return "pending"
    end
    if r[1] == "exhausted" then
        w.metrics.dlq(inv, msg, outcome.reason, attempt, r[2])
        return "terminal"
    end
    return "waiting", r[2]
end


--- Runs one invocation if it is runnable now.
-- @return "terminal" | "pending" | "waiting", wait_ms | "infra", err
local function run_invocation(w, msg, inv)
    if w.stopping or w.registry:blocked(inv.app) then
        return "pending"
    end
    if not acquire_slots(w, inv.app_table) then
        -- Blocked on a slot: not charged; try again here after another slot
        -- wait rather than leaving it to the reclaim sweep alone.
        return "waiting", w.constants.slot_wait_ms
    end
    local token = w.life:token()
    local r, err = w.life:try_start(msg, inv, token)
    if not r or r[1] ~= "start" or w.stopping then
        release_slots(w, inv.app_table)
        if not r then
            return "infra", err
        elseif r[1] == "start" then  -- stopping began while claiming: give it back
            persist(w, "a release", function() return w.life:release(msg, inv, token, r[2], r[3]) end)
            return "pending"
        elseif r[1] == "exhausted" then
            w.metrics.attempt(inv, "lost", { reason = LOST }, msg, r[2])
            w.metrics.dlq(inv, msg, LOST, r[2])
            return "terminal"
        end
        if r[2] == "lost" then
            w.metrics.attempt(inv, "lost", { reason = LOST }, msg, r[4])
        end
        local why = r[2]
        if why == "terminal" or why == "retained" then
            return "terminal"
        end
        return (why == "waiting" or why == "lost") and "waiting" or "pending", r[3]
    end
    local attempt, previous = r[2], r[3]
    w.active = w.active + 1
    local outcome = execute(w, msg, inv, attempt)
    release_slots(w, inv.app_table)
    local status, extra
    if w.exit_code then
        -- killed by a second signal: not the handler's outcome; the running
        -- marker stays for recovery (relay.md section 6, `relay run`), where
        -- it counts as a lost attempt (spec-worker fix: it was recorded as a
        -- timeout failure)
        status = "pending"
    elseif outcome.host_failure then
        log.warn("host could not start the container; the attempt is not charged",
            { app = inv.app, handler = inv.handler, message_id = msg.id, reason = outcome.reason })
        w.metrics.inc("relay_start_failures_total", { app = inv.app })
        persist(w, "a release", function() return w.life:release(msg, inv, token, attempt, previous) end)
        status = "pending"
    else
        status, extra = record_outcome(w, msg, inv, token, attempt, outcome)
    end
    w.active = w.active - 1
    w.idle_event()
    return status, extra
end


--- A handler's entry under `events:` only. A handler that appears only
-- under `schedules:` runs from its schedule's occurrence (msg.entries), never
-- from an event or a relay_target, which would hand it input its schedule
-- never sends.
local function event_entry(w, app_name, handler)
    local entry, app = w.registry:handler(app_name, handler)
    for _, ev in ipairs(entry and app.events or {}) do
        if ev == entry then
            return entry, app
        end
    end
    return nil, app
end


--- The invocation record for a label, or nil plus "removed" / "unavailable".
local function invocation_for(w, label, msg)
    local app_name, handler = label:match("^(.-)/(.*)$")
    if not app_name then
        return nil, "removed"
    end
    local entry, app = event_entry(w, app_name, handler)
    local forced = msg and msg.entries and msg.entries[label]
    if forced then
        entry = forced  -- a schedule's own entry (its timeout and retries)
    end
    if not entry then
        -- An app that was never loaded successfully is unavailable, not absent.
        return nil, (app and app.state ~= "ok") and "unavailable" or "removed"
    end
    return {
        label = label, app = app_name, handler = handler, app_table = app, entry = entry,
        timeout_ms = entry.timeout_ms, max_attempts = (entry.retries or w.constants.default_retries) + 1,
    }
end


local function run_labels(w, msg, labels, ran)
    local retry_in
    for _, label in ipairs(labels) do
        if not ran[label] then
            ran[label] = true
            ran[#ran + 1] = label
            local inv, why = invocation_for(w, label, msg)
            local status, extra
            if inv then
                status, extra = run_invocation(w, msg, inv)
            elseif why == "removed" then
                local r, err = w.life:exhaust(msg, label, "handler removed")
                status, extra = r and "terminal" or "infra", err
                if r == "exhausted" then
                    w.metrics.dlq({ app = label:match("^(.-)/"), handler = label:match("/(.*)$") }, msg,
                        "handler removed")
                end
            end
            if status == "infra" then
                return nil, extra
            elseif status == "waiting" then
                retry_in = math.min(retry_in or math.huge, extra or 0)
            end
        end
    end
    return true, retry_in
end


--- Resolves a schedule occurrence to its configured handler (events.md:
-- separate dispatch path, no matching). Returns "acked" for an obsolete
-- occurrence, "pending" while its app is unavailable, or nil to go on.
local function prepare_schedule(w, msg)
    local sched, app = scheduler.resolve(w.registry, msg.schedule)
    if not sched then
        if app and app.state ~= "ok" then
            return "pending"
        end
        local ok, err = w.life:ack_obsolete(msg)
        if not ok then
            return nil, err
        end
        w.metrics.event("obsolete", msg)
        log.info("obsolete schedule occurrence acknowledged", { message_id = msg.id, schedule = msg.schedule })
        return "acked"
    end
    w.metrics.event("schedule", msg)
    local label = app.name .. "/" .. sched.handler
    msg.trigger = "schedule"
    msg.stdin = scheduler.payload(app.name, sched, msg.occurrence or "")
    msg.event = msg.stdin  -- a dead letter's event is this payload, so a replay can rebuild it
    msg.lineage = msg.lineage or {}
    msg.lineage.relay_schedule = msg.schedule
    msg.lineage.relay_occurrence = msg.occurrence
    msg.labels = { label }
    msg.entries = { [label] = sched }
    return false
end


--- Processes a matched, targeted or schedule message (or an unmatched one
-- whose state still records invocations).
-- @return "acked" | "pending", retry_in_ms | nil, err (infrastructure)
function _M.process(w, msg)
    if msg.kind == "schedule" then
        local settled, err = prepare_schedule(w, msg)
        if settled == nil then
            return nil, err
        elseif settled then
            return settled
        end
    end
    if msg.kind == "targeted" then
        local inv, why = invocation_for(w, msg.target, msg)
        if not inv and why == "removed" then
            local id, err = w.life:dead_letter_message(msg, "replay target not found")
            if not id then
                return nil, err
            end
            w.metrics.dlq({ app = "-", handler = "-" }, msg, "replay target not found", 0, id)
            return "acked"
        end
    end
    local ran, labels, retry_in = {}, msg.labels or {}, nil
    for _ = 1, 3 do
        local ok, extra = run_labels(w, msg, labels, ran)
        if not ok then
            return nil, extra
        end
        retry_in = extra or retry_in
        local acked, open = w.life:ack_if_terminal(msg, ran)
        if acked == nil then
            return nil, open
        elseif acked then
            return "acked"
        end
        local fresh = false
        for _, label in ipairs(open) do
            fresh = fresh or not ran[label]
        end
        if not fresh then
            return "pending", retry_in
        end
        labels = open
    end
    return "pending", retry_in
end


return _M
