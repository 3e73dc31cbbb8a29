--- A JSON-lines metrics hook for Relay (RELAY_HOOKS=examples/hooks/jsonl_metrics.lua).
--
-- Writes one log record per attempt and per dead letter, and every
-- SUMMARY_EVERY_MS a summary of the classified events, through relay.log. Run
-- the daemon with RELAY_LOG_FORMAT=json and each record is one JSON line on
-- stderr that a log shipper can turn into metrics, e.g.
--   {"ts":"…","level":"info","msg":"relay.metric","kind":"attempt","app":"billing",…}
-- Hooks run in a sandbox and must not block: no io, no os.execute.
-- luacheck: globals relay
local SUMMARY_EVERY_MS = 10000

local events = {}
local last_summary = relay.now()


local function maybe_summarize()
    local now = relay.now()
    if now - last_summary < SUMMARY_EVERY_MS then
        return
    end
    local fields = { kind = "events", window_ms = now - last_summary }
    for outcome, n in pairs(events) do
        fields[outcome] = n
    end
    relay.log("info", "relay.metric", fields)
    events = {}
    last_summary = now
end


return {
    on_start = function(info)
        relay.log("info", "relay.metric", { kind = "start", stream = info.stream, consumer = info.consumer,
            apps = #info.apps })
    end,

    on_event = function(e)
        events[e.outcome] = (events[e.outcome] or 0) + 1
        maybe_summarize()
    end,

    on_attempt = function(a)
        relay.log("info", "relay.metric", {
            kind = "attempt", app = a.app, handler = a.handler, outcome = a.outcome,
            attempt = a.attempt, duration_ms = a.duration_ms, exit_code = a.exit_code,
        })
        maybe_summarize()
    end,

    on_dlq = function(d)
        relay.log("warn", "relay.metric", { kind = "dlq", app = d.app, handler = d.handler, reason = d.reason,
            message_id = d.message_id })
    end,
}
