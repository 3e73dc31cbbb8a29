--- Dispatch of one delivered message: its invocations run one at a time in
-- dispatch order; each is claimed (TryStart), run in its container and its
-- outcome recorded by a token-fenced script; the message is acknowledged
-- only when every invocation is terminal.
--
-- Everything it needs comes in one context, and it writes into none of it
-- but through the parts' own calls:
--   ctx = { lifecycle (relay.lifecycle), runtime (relay.runtime context),
--           registry (relay.registry), slots (relay.slots),
--           reporter (relay.observe's funnel), shutdown (relay.shutdown),
--           constants (relay.constants) }
local backoff = require("relay.backoff")
local invoke = require("relay.runtime.invoke")
local log = require("relay.log")
local loop = require("relay.core.loop")
local scheduler = require("relay.scheduler")

local _M = {}

local OUTPUT_TAIL_BYTES = 4096
local PERSIST_BACKOFF_CAP_S = 5
local LOST = "worker lost during attempt"


--- Retries fn until Redis accepts the write: an outcome that happened must
-- be recorded, however long Redis is away. A retry repeats the call with
-- the same token and attempt, and the scripts answer a repeat of a write
-- that already happened as they answered the first.
local function persist(ctx, what, fn)
    local delay = 0.1
    while true do
        local value, err = fn()
        if value ~= nil then
            log.recovered("recording", "recording outcomes again")
            return value
        end
        if ctx.shutdown.forced then
            return nil, err
        end
        log.failing("recording", "cannot record " .. what .. "; retrying", { error = err })
        loop.sleep(backoff.jitter(delay))
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


local function execute(ctx, msg, inv, attempt, claimed_at)
    local tail = output_tail()
    local line_ctx = { app = inv.app, handler = inv.handler, message_id = msg.id, attempt = attempt }
    local untrack = function() end
    local outcome = invoke.run({
        rt = ctx.runtime, app = inv.app_table, entry = inv.entry, trigger = msg.trigger or "event",
        message_id = msg.id, attempt = attempt, stdin = msg.stdin or msg.event, claimed_at = claimed_at,
        on_line = function(stream, line)
            log.handler_line(line_ctx, stream, line)
            if stream == "stderr" then
                tail.add(line)
            end
        end,
        on_start = function(handle) untrack = ctx.slots:track(handle) end,
    })
    untrack()
    if outcome.warm then
        ctx.reporter.inc("relay_warm_starts_total", { app = inv.app })
    end
    outcome.output = tail.text()
    return outcome
end


local function record_outcome(ctx, msg, inv, token, attempt, outcome)
    local life, report = ctx.lifecycle, ctx.reporter
    if outcome.ok then
        local r = persist(ctx, "a success", function() return life:succeed(msg, inv, token, attempt) end)
        report.attempt(inv, "succeeded", outcome, msg, attempt)
        if r == "stale" then
            report.inc("relay_stale_token_writes_total")
            return "pending"
        end
        return "terminal"
    end
    local r = persist(ctx, "a failure", function()
        return life:fail(msg, inv, token, attempt, outcome.reason, outcome.output)
    end)
    local kind = outcome.timed_out and "timeout" or "failed"
    if not r or r[1] == "stale" then
        report.attempt(inv, kind, outcome, msg, attempt)
        report.inc("relay_stale_token_writes_total")
        return "pending"
    end
    if r[1] == "exhausted" then
        report.attempt(inv, kind, outcome, msg, attempt)
        report.dlq(inv, msg, outcome.reason, attempt, r[2])
        return "terminal"
    end
    report.attempt(inv, kind, outcome, msg, attempt, r[2])
    return "waiting", r[2]
end


--- What a TryStart that started nothing means for the message: a lost
-- attempt is reported (and dead-lettered when it was the last one).
local function not_started(ctx, msg, inv, r)
    local report = ctx.reporter
    if r[1] == "exhausted" then
        report.attempt(inv, "lost", { reason = LOST }, msg, r[2])
        report.dlq(inv, msg, LOST, r[2], r[3])
        return "terminal"
    end
    local why = r[2]
    if why == "lost" then
        report.attempt(inv, "lost", { reason = LOST }, msg, r[4], r[3])
    end
    if why == "terminal" or why == "retained" then
        return "terminal"
    end
    if why == "lease" then
        log.info("the daemon of a running attempt stopped answering; the next attempt waits out its lease",
            { message_id = msg.id, handler = inv.label, wait_ms = r[3] })
    end
    local retry_here = why == "waiting" or why == "lost" or why == "lease"
    return retry_here and "waiting" or "pending", r[3]
end


--- Runs a claimed attempt in its container and records what happened.
-- release gives the slots back as soon as the container is gone.
local function run_claimed(ctx, msg, inv, claim, release)
    local leave = ctx.slots:enter()
    if ctx.shutdown.forced then
        -- A forced stop may already have declared this instance dead:
        -- nothing starts after it.
        release()
        leave()
        return "pending"
    end
    local outcome = execute(ctx, msg, inv, claim.attempt, claim.claimed_at)
    release()
    local status, extra
    if ctx.shutdown.forced then
        -- Killed by a second signal: not the handler's outcome. The running
        -- marker stays, and the next start counts it as a lost attempt
        -- rather than a timeout the handler never had.
        status = "pending"
    elseif outcome.host_failure then
        log.warn("host could not start the container; the attempt is not charged",
            { app = inv.app, handler = inv.handler, message_id = msg.id, reason = outcome.reason })
        ctx.reporter.inc("relay_start_failures_total", { app = inv.app })
        persist(ctx, "a release", function()
            return ctx.lifecycle:release(msg, inv, claim.token, claim.attempt, claim.previous)
        end)
        status = "pending"
    else
        status, extra = record_outcome(ctx, msg, inv, claim.token, claim.attempt, outcome)
    end
    leave()
    return status, extra
end


--- Claims an invocation: TryStart, then (RELAY_CLAIM_WAIT) the replicas'
-- acknowledgement. Returns the claim, or nil plus what run_invocation
-- returns instead of running it.
local function claim_invocation(ctx, msg, inv)
    local life = ctx.lifecycle
    local token = life:token(msg, inv)
    -- before the claim is sent: the container's deadline counts from here,
    -- so it never outlives the lease the claim sets (runtime/invoke.lua)
    local claimed_at = loop.monotonic()
    local r, err = life:try_start(msg, inv, token)
    if not r then
        return nil, "infra", err
    elseif r[1] ~= "start" then
        return nil, not_started(ctx, msg, inv, r)
    end
    local claim = { token = token, attempt = r[2], previous = r[3], claimed_at = claimed_at }
    if ctx.shutdown.draining then  -- draining began while claiming: give the claim back
        persist(ctx, "a release", function() return life:release(msg, inv, token, claim.attempt, claim.previous) end)
        return nil, "pending"
    end
    local ok, why, changed = life:replicated()
    if changed then  -- logged once per change, not per claim
        local say = ok and log.info or log.warn
        say(ok and "replicas acknowledge claims again" or "replicas do not acknowledge claims; nothing starts",
            { reason = why, message_id = msg.id })
    end
    if not ok then
        -- A claim a failover could lose must not start a container: give
        -- it back uncharged and try again later. Unanswered, the release is
        -- redone by the next TryStart, which reuses the token.
        life:release(msg, inv, token, claim.attempt, claim.previous)
        return nil, "waiting", ctx.constants.slot_wait_ms
    end
    return claim
end


--- Runs one invocation if it is runnable now.
-- @return "terminal" | "pending" | "waiting", wait_ms | "infra", err
local function run_invocation(ctx, msg, inv)
    if ctx.shutdown.draining or ctx.registry:blocked(inv.app) then
        return "pending"
    end
    local release = ctx.slots:acquire(inv.app, ctx.constants.slot_wait_ms / 1000)
    if not release then
        -- Blocked on a slot: not charged; try again here after another slot
        -- wait rather than leaving it to the reclaim sweep alone.
        return "waiting", ctx.constants.slot_wait_ms
    end
    local claim, status, extra = claim_invocation(ctx, msg, inv)
    if not claim then
        release()
        return status, extra
    end
    return run_claimed(ctx, msg, inv, claim, release)
end


--- A handler's entry under `events:` only. A handler that appears only
-- under `schedules:` runs from its schedule's occurrence (msg.entries), never
-- from an event or a relay_target, which would hand it input its schedule
-- never sends.
local function event_entry(registry, app_name, handler)
    local entry, app = registry:handler(app_name, handler)
    for _, ev in ipairs(entry and app.events or {}) do
        if ev == entry then
            return entry, app
        end
    end
    return nil, app
end


--- The invocation record for a label, or nil plus "removed" / "unavailable".
local function invocation_for(ctx, label, msg)
    local app_name, handler = label:match("^(.-)/(.*)$")
    if not app_name then
        return nil, "removed"
    end
    local entry, app = event_entry(ctx.registry, app_name, handler)
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
        timeout_ms = entry.timeout_ms, max_attempts = (entry.retries or ctx.constants.default_retries) + 1,
    }
end


local function run_labels(ctx, msg, labels, ran)
    local retry_in
    for _, label in ipairs(labels) do
        if not ran[label] then
            ran[label] = true
            ran[#ran + 1] = label
            local inv, why = invocation_for(ctx, label, msg)
            local status, extra
            if inv then
                status, extra = run_invocation(ctx, msg, inv)
            elseif why == "removed" then
                local r, err_or_id = ctx.lifecycle:exhaust(msg, label, "handler removed")
                status, extra = r and "terminal" or "infra", err_or_id
                if r == "exhausted" then
                    ctx.reporter.dlq({ app = label:match("^(.-)/"), handler = label:match("/(.*)$") }, msg,
                        "handler removed", nil, err_or_id)
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


--- Resolves a schedule occurrence to its configured handler (a separate
-- dispatch path: a schedule entry is never matched against patterns).
-- Returns "acked" for an obsolete occurrence, "pending" while its app is
-- unavailable, or nil to go on.
local function prepare_schedule(ctx, msg)
    local sched, app = scheduler.resolve(ctx.registry, msg.schedule)
    if not sched then
        if app and app.state ~= "ok" then
            return "pending"
        end
        local ok, err = ctx.lifecycle:ack_obsolete(msg)
        if not ok then
            return nil, err
        end
        ctx.reporter.event("obsolete", msg)
        log.info("obsolete schedule occurrence acknowledged", { message_id = msg.id, schedule = msg.schedule })
        return "acked"
    end
    ctx.reporter.event("schedule", msg)
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
function _M.process(ctx, msg)
    if msg.kind == "schedule" then
        local settled, err = prepare_schedule(ctx, msg)
        if settled == nil then
            return nil, err
        elseif settled then
            return settled
        end
    end
    if msg.kind == "targeted" then
        local inv, why = invocation_for(ctx, msg.target, msg)
        if not inv and why == "removed" then
            local id, err = ctx.lifecycle:dead_letter_message(msg, "replay target not found")
            if not id then
                return nil, err
            end
            ctx.reporter.dlq({ app = "-", handler = "-" }, msg, "replay target not found", 0, id)
            return "acked"
        end
    end
    local ran, labels, retry_in = {}, msg.labels or {}, nil
    for _ = 1, 3 do
        local ok, extra = run_labels(ctx, msg, labels, ran)
        if not ok then
            return nil, extra
        end
        retry_in = extra or retry_in
        local acked, open = ctx.lifecycle:ack_if_terminal(msg, ran)
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
