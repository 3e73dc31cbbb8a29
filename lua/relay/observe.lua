--- The daemon's observability (relay.md sections 8 and 9): one funnel that
-- every outcome is reported through (w.metrics.*: the Prometheus registry
-- plus the user hooks), the hooks file, and the /metrics + /healthz responder
-- served by the daemon's own loop on RELAY_METRICS_ADDR.
--
--   w.metrics.event(outcome, msg)                        on_event
--   w.metrics.attempt(inv, outcome, result, msg, attempt) on_attempt
--   w.metrics.dlq(inv, msg, reason, attempts, dlq_id)     on_dlq
--   w.metrics.inc(name, labels, by)
--
-- The trailing arguments only feed the hooks; a call site without them
-- still counts correctly. Hook arguments are fresh tables each call.
local exit = require("relay.exit")
local hooks_mod = require("relay.hooks")
local log = require("relay.log")
local loop = require("relay.core.loop")
local metrics = require("relay.metrics")

local _M = {}

_M.PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
local TEXT_TYPE = "text/plain; charset=utf-8"
_M.EVENT_OUTCOMES = { "matched", "unmatched", "malformed", "schedule", "targeted", "obsolete" }
local STALL_S = 10  -- /healthz fails when the task scheduler has not ticked for this long
local TICK_S = 1


local function list_copy(list)
    local out = {}
    for i, v in ipairs(list or {}) do
        out[i] = v
    end
    return out
end


--- The reporting funnel for worker w (w.metrics).
function _M.helpers(w)
    local reg = w.metrics_registry
    for _, outcome in ipairs(_M.EVENT_OUTCOMES) do
        reg:inc("relay_events_total", { outcome = outcome }, 0)  -- every outcome visible from the start
    end
    local m = {}
    local event_keys = setmetatable({}, { __index = function(t, outcome)
        t[outcome] = metrics.label_key({ outcome = outcome })
        return t[outcome]
    end })
    function m.inc(name, labels, by)
        reg:inc(name, labels, by)
    end
    function m.event(outcome, msg)
        reg:inc_key("relay_events_total", event_keys[outcome])
        local h = w.hooks and w.hooks.on_event
        if h and msg then
            h({ id = msg.id, outcome = outcome, matches = list_copy(msg.labels) })
        end
    end
    function m.attempt(inv, outcome, result, msg, attempt)
        result = result or {}
        reg:inc("relay_attempts_total", { app = inv.app, handler = inv.handler, outcome = outcome })
        if result.duration_ms then
            reg:observe("relay_attempt_duration_seconds", result.duration_ms / 1000,
                { app = inv.app, handler = inv.handler })
        end
        local h = w.hooks and w.hooks.on_attempt
        if h then
            h({
                app = inv.app, handler = inv.handler, message_id = msg and msg.id, attempt = attempt,
                outcome = outcome, duration_ms = result.duration_ms, exit_code = result.status,
                signal = result.signal, reason = outcome ~= "succeeded" and result.reason or nil,
            })
        end
    end
    function m.dlq(inv, msg, reason, attempts, dlq_id)
        reg:inc("relay_dlq_entries_total", { app = inv.app, handler = inv.handler })
        local h = w.hooks and w.hooks.on_dlq
        if h then
            h({
                id = type(dlq_id) == "string" and dlq_id or nil, app = inv.app, handler = inv.handler,
                message_id = msg and msg.id, reason = reason, attempts = attempts,
            })
        end
    end
    return m
end


--- Health: Redis connected (the command client) and the task scheduler
-- ticking. @return ok, reason
function _M.health(w)
    if not (w.client and w.client:connected()) then
        return false, "redis disconnected"
    end
    if loop.monotonic() - (w.loop_tick or 0) > STALL_S then
        return false, "event loop stalled"
    end
    return true, "ok"
end


local function refresh_gauges(w)
    local reg = w.metrics_registry
    reg:set("relay_running_invocations", w.active or 0)
    if w.client and w.reader then
        reg:set("relay_redis_reconnects_total", w.client:info().reconnects + w.reader:info().reconnects)
    end
end


--- The HTTP handler: runs on the loop outside any task, must not wait.
function _M.respond(w, method, path)
    if method ~= "GET" then
        return 405, TEXT_TYPE, "method not allowed\n"
    end
    if path == "/metrics" then
        refresh_gauges(w)
        return 200, _M.PROMETHEUS_TYPE, w.metrics_registry:render()
    elseif path == "/healthz" then
        local ok, why = _M.health(w)
        return ok and 200 or 503, TEXT_TYPE, why .. "\n"
    end
    return 404, TEXT_TYPE, "not found (try /metrics or /healthz)\n"
end


local function load_hooks(w)
    w.hooks = {}
    if not w.cfg.hooks then
        return
    end
    local hooks, err = hooks_mod.load(w.cfg.hooks)
    if not hooks then
        exit.env("RELAY_HOOKS: " .. tostring(err))
    end
    w.hooks = hooks
    hooks_mod.install_log_hook(hooks)
    log.info("hooks loaded", { path = w.cfg.hooks, hooks = table.concat(hooks.names, ",") })
end


local function listen(w)
    local addr = w.cfg.metrics_addr
    if not addr then
        return
    end
    local http = require("relay.core.http")
    local server, err = http.listen(addr.host, addr.port, function(method, path)
        return _M.respond(w, method, path)
    end)
    if not server then
        exit.env("RELAY_METRICS_ADDR=" .. addr.text .. ": " .. tostring(err))
    end
    w.http_server = server
    log.info("serving metrics", { addr = addr.text, port = server:port(), paths = "/metrics,/healthz" })
end


--- Before Redis: loads the hooks and binds the metrics address, so a bad
-- RELAY_HOOKS or RELAY_METRICS_ADDR fails the start at once (exit 2).
function _M.attach(w)
    w.loop_tick = loop.monotonic()
    load_hooks(w)
    listen(w)
end


--- Once the daemon runs: the scheduler tick /healthz watches, and on_start.
function _M.start(w)
    loop.spawn(function()
        while true do
            w.loop_tick = loop.monotonic()
            loop.sleep(TICK_S)
        end
    end)
    local h = w.hooks and w.hooks.on_start
    if h then
        local apps = {}
        for i, app in ipairs(w.registry and w.registry.list or {}) do
            apps[i] = app.name
        end
        h({ stream = w.cfg.stream, group = w.cfg.group, consumer = w.cfg.consumer, instance = w.instance,
            apps = apps })
    end
end


return _M
