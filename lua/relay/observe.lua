--- The daemon's observability: the observer owns the metrics registry
-- (every counter and every gauge), the hooks file, and the /metrics +
-- /healthz responder served by the daemon's own loop on RELAY_METRICS_ADDR.
-- Every outcome is reported through one funnel, obs.report (the Prometheus
-- registry plus the user hooks):
--
--   report.event(outcome, msg)                        on_event
--   report.events(outcome, n)   n events no hook sees (when not report.event_hook())
--   report.attempt(inv, outcome, result, msg, attempt, retry_in_ms) on_attempt
--   report.dlq(inv, msg, reason, attempts, dlq_id)     on_dlq
--   report.inc(name, labels, by)
--
-- Attempts and dead letters are logged here too (relay.attempt_log), so
-- the log, the counters and the hooks tell one story.
-- The trailing arguments only feed the hooks and the log; a call site
-- without them still counts correctly. Hook arguments are fresh tables
-- each call.
local attempt_log = require("relay.attempt_log")
local build = require("relay.core.build")
local exit = require("relay.exit")
local hooks_mod = require("relay.hooks")
local log = require("relay.log")
local loop = require("relay.core.loop")
local metrics = require("relay.metrics")
local process_stats = require("relay.process_stats")
local redis = require("relay.redis")

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


local function set_known(reg, name, value)
    if value then
        reg:set(name, value)
    end
end


local function set_build_info(reg)
    reg:set("relay_build_info", 1, {
        version = build.version,
        luajit = (build.luajit:gsub("^LuaJIT ", "")),
        hiredis = build.hiredis,
    })
end


--- The reporting funnel over obs.metrics_registry and obs.hooks.
function _M.reporter(obs)
    local reg = obs.metrics_registry
    set_build_info(reg)
    set_known(reg, "process_start_time_seconds", process_stats.start_time_seconds())
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
        local h = obs.hooks and obs.hooks.on_event
        if h and msg then
            h({ id = msg.id, outcome = outcome, matches = list_copy(msg.labels) })
        end
    end
    --- Counts n events of an outcome that no hook is told of: for callers
    -- that checked event_hook() first.
    function m.events(outcome, n)
        reg:inc_key("relay_events_total", event_keys[outcome], n)
    end
    function m.event_hook()
        return obs.hooks ~= nil and obs.hooks.on_event ~= nil
    end
    function m.attempt(inv, outcome, result, msg, attempt, retry_in_ms)
        result = result or {}
        attempt_log.attempt(inv, outcome, result, msg, attempt, retry_in_ms)
        reg:inc("relay_attempts_total", { app = inv.app, handler = inv.handler, outcome = outcome })
        if result.duration_ms then
            reg:observe("relay_attempt_duration_seconds", result.duration_ms / 1000,
                { app = inv.app, handler = inv.handler })
        end
        local h = obs.hooks and obs.hooks.on_attempt
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
        attempt_log.dead_letter(inv, msg, reason, attempts, dlq_id)
        local h = obs.hooks and obs.hooks.on_dlq
        if h then
            h({
                id = type(dlq_id) == "string" and dlq_id or nil, app = inv.app, handler = inv.handler,
                message_id = msg and msg.id, reason = reason, attempts = attempts,
            })
        end
    end
    return m
end


--- Health: Redis connected (the command client), reads not refused (a
-- read-only replica, a cluster node that does not own the stream, a group
-- that cannot be recreated) and the task scheduler ticking.
-- @return ok, reason
function _M.health(obs)
    if not (obs.client and obs.client:connected()) then
        return false, "redis disconnected"
    end
    local blocker = obs.blocker and obs.blocker()
    if blocker then
        return false, blocker
    end
    if loop.monotonic() - (obs.loop_tick or 0) > STALL_S then
        return false, "event loop stalled"
    end
    return true, "ok"
end


local function refresh_process(reg)
    set_known(reg, "process_cpu_seconds_total", process_stats.cpu_seconds())
    set_known(reg, "process_resident_memory_bytes", process_stats.resident_bytes())
    set_known(reg, "process_open_fds", process_stats.open_fds())
end


--- The gauges are read from their sources when /metrics is asked for, so
-- they are never stale and nothing else has to keep them up to date.
local function refresh_gauges(obs)
    local reg = obs.metrics_registry
    reg:set("relay_running_invocations", obs.slots and obs.slots.running or 0)
    reg:set("relay_log_dropped_total", (log.dropped()))
    refresh_process(reg)
    if obs.client and obs.reader then
        reg:set("relay_redis_reconnects_total", obs.client:info().reconnects + obs.reader:info().reconnects)
    end
end


--- The HTTP handler: runs on the loop outside any task, must not wait.
function _M.respond(obs, method, path)
    if method ~= "GET" then
        return 405, TEXT_TYPE, "method not allowed\n"
    end
    if path == "/metrics" then
        refresh_gauges(obs)
        return 200, _M.PROMETHEUS_TYPE, obs.metrics_registry:render()
    elseif path == "/healthz" then
        local ok, why = _M.health(obs)
        return ok and 200 or 503, TEXT_TYPE, why .. "\n"
    end
    return 404, TEXT_TYPE, "not found (try /metrics or /healthz)\n"
end


local function load_hooks(path)
    if not path then
        return {}
    end
    local hooks, err = hooks_mod.load(path)
    if not hooks then
        exit.env("RELAY_HOOKS: " .. tostring(err))
    end
    hooks_mod.install_log_hook(hooks)
    log.info("hooks loaded", { path = path, hooks = table.concat(hooks.names, ",") })
    return hooks
end


local function listen(obs, addr)
    if not addr then
        return nil
    end
    local http = require("relay.core.http")
    local server, err = http.listen(addr.host, addr.port, function(method, path)
        return _M.respond(obs, method, path)
    end)
    if not server then
        exit.env("RELAY_METRICS_ADDR=" .. addr.text .. ": " .. tostring(err))
    end
    log.info("serving metrics", { addr = addr.text, port = server:port(), paths = "/metrics,/healthz" })
    return server
end


--- Before Redis: loads the hooks and binds the metrics address, so a bad
-- RELAY_HOOKS or RELAY_METRICS_ADDR fails the start at once (exit 2).
-- cfg: { hooks, metrics_addr }. The gauges' sources come with watch().
function _M.new(cfg)
    local obs = { metrics_registry = metrics.new(), loop_tick = loop.monotonic() }
    obs.hooks = load_hooks(cfg.hooks)
    obs.report = _M.reporter(obs)
    obs.http_server = listen(obs, cfg.metrics_addr)  -- kept here: the server lives as long as the observer
    return obs
end


--- Where the gauges and /healthz read from: { client, reader, slots,
-- blocker = function → why no progress can be made, or nil }.
function _M.watch(obs, sources)
    obs.client, obs.reader, obs.slots = sources.client, sources.reader, sources.slots
    obs.blocker = sources.blocker
end


--- Once the daemon runs: the scheduler tick /healthz watches, the outage
-- log (relay.redis.watch_outage), and on_start.
-- started: { stream, group, consumer, instance, apps = {names} }.
function _M.start(obs, started)
    redis.watch_outage()
    loop.spawn(function()
        while true do
            obs.loop_tick = loop.monotonic()
            loop.sleep(TICK_S)
        end
    end)
    local h = obs.hooks.on_start
    if h then
        h(started)
    end
end


return _M
