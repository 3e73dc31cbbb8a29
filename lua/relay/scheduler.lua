--- Schedules: every replica runs this tick; the atomic publish script makes
-- each occurrence appear on the stream exactly once, recorded as trusted so
-- that its relay_schedule field is honoured.
-- The dispatch side (an entry with relay_schedule) lives in relay.dispatch.
local backoff = require("relay.backoff")
local cron = require("relay.cron")
local cron_zone = require("relay.cron_zone")
local keys = require("relay.keys")
local log = require("relay.log")
local loop = require("relay.core.loop")
local redis = require("relay.redis")
local rfc3339 = require("relay.rfc3339")
local scripts = require("relay.scripts")

local _M = {}

local FAILURE = "scheduler"  -- the log.failing name
local RETRY_CAP_S = 5  -- a failing tick skips the ticks of a doubling delay, at most this long


--- The latest occurrence at or before now_ms and the next one after it.
function _M.occurrences(sched, now_ms)
    if sched.every_ms then
        local latest = math.floor(now_ms / sched.every_ms) * sched.every_ms
        return latest, latest + sched.every_ms
    end
    local spec = sched.cron_spec or assert(cron.parse(sched.cron))
    if sched.zone then
        return cron_zone.prev(spec, now_ms, sched.zone), cron_zone.next(spec, now_ms, sched.zone)
    end
    return cron.prev(spec, now_ms), cron.next(spec, now_ms)
end


--- The stdin of a schedule's handler.
function _M.payload(app_name, sched, occurrence)
    return string.format('{"app":%s,"schedule":%s,"occurrence":%s,"payload":%s}', log.json_quote(app_name),
        log.json_quote(sched.name), log.json_quote(occurrence), sched.payload_json or "null")
end


--- The schedule named by a relay_schedule value in the loaded apps.
-- @return sched, app | nil, app (obsolete or unavailable: see app.state)
function _M.resolve(registry, value)
    local app_name, name = tostring(value):match("^(.-)/(.*)$")
    local app = app_name and registry.by_name[app_name]
    if not app or app.state ~= "ok" then
        return nil, app
    end
    for _, sched in ipairs(app.schedules or {}) do
        if sched.name == name then
            return sched, app
        end
    end
    return nil, app
end


local function redis_now_ms(client)
    local t, err = client:call("TIME")
    if not t then
        return nil, err
    end
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end


--- Publishes one schedule's latest occurrence unless last already holds it.
local function publish_latest(parts, app, sched, now, last)
    local id = app.name .. "/" .. sched.name
    local latest = _M.occurrences(sched, now)
    if not latest or last[id] == latest then
        return
    end
    local text = rfc3339.seconds(latest)
    local r, err = redis.eval(parts.client, scripts.publish_occurrence,
        { parts.keys.sched(app.name, sched.name), parts.stream, parts.keys.trusted }, { latest, id, text })
    if r == nil then
        log.failing(FAILURE, "scheduler: cannot publish", { schedule = id, error = err })
        return false
    end
    last[id] = latest
    if r ~= "initialized" and r ~= "published" and r ~= "not-due" then
        log.info("schedule occurrence published", { schedule = id, occurrence = text, id = r })
    end
end


--- Publishes what is due. @return true, or false when a call failed
local function tick(parts, last)
    local now, err = redis_now_ms(parts.client)
    if not now then
        log.failing(FAILURE, "scheduler: cannot read Redis TIME", { error = err })
        return false
    end
    local ok = true
    for _, app in ipairs(parts.registry.list) do
        if app.state == "ok" and not parts.registry:blocked(app.name) then
            for _, sched in ipairs(app.schedules or {}) do
                ok = publish_latest(parts, app, sched, now, last) ~= false and ok
            end
        end
    end
    return ok
end


--- The daemon's tick: a function that publishes every due occurrence of
-- every runnable app. parts: { client, stream, registry }. The tick
-- remembers the last occurrence handled per schedule to skip the script.
-- After a failure it skips ticks for a jittered, doubling delay (capped),
-- and logs the failure once per change (log.failing).
function _M.ticker(parts)
    parts = { client = parts.client, stream = parts.stream, registry = parts.registry,
        keys = keys.for_stream(parts.stream) }
    local last, delay, retry_at = {}, 0, 0
    return function()
        if loop.monotonic() < retry_at then
            return
        end
        if tick(parts, last) then
            delay = 0
            log.recovered(FAILURE, "scheduler: publishing again")
            return
        end
        delay = backoff.grow(math.max(delay, 0.5), RETRY_CAP_S)
        retry_at = loop.monotonic() + backoff.jitter(delay)
    end
end


return _M
