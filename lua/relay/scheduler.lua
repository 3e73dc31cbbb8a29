--- Schedules: every replica runs this tick; the atomic publish script makes
-- each occurrence appear on the stream exactly once, recorded as trusted so
-- that its relay_schedule field is honoured.
-- The dispatch side (an entry with relay_schedule) lives in relay.dispatch.
local cron = require("relay.cron")
local keys = require("relay.keys")
local log = require("relay.log")
local redis = require("relay.redis")
local rfc3339 = require("relay.rfc3339")
local scripts = require("relay.scripts")

local _M = {}


--- The latest occurrence at or before now_ms and the next one after it.
function _M.occurrences(sched, now_ms)
    if sched.every_ms then
        local latest = math.floor(now_ms / sched.every_ms) * sched.every_ms
        return latest, latest + sched.every_ms
    end
    local spec = sched.cron_spec or assert(cron.parse(sched.cron))
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
        log.warn("scheduler: cannot publish", { schedule = id, error = err })
        return
    end
    last[id] = latest
    if r ~= "initialized" and r ~= "published" and r ~= "not-due" then
        log.info("schedule occurrence published", { schedule = id, occurrence = text, id = r })
    end
end


--- The daemon's tick: a function that publishes every due occurrence of
-- every runnable app. parts: { client, stream, registry }. The tick
-- remembers the last occurrence handled per schedule to skip the script.
function _M.ticker(parts)
    parts = { client = parts.client, stream = parts.stream, registry = parts.registry,
        keys = keys.for_stream(parts.stream) }
    local last = {}
    return function()
        local now, err = redis_now_ms(parts.client)
        if not now then
            log.warn("scheduler: cannot read Redis TIME", { error = err })
            return
        end
        for _, app in ipairs(parts.registry.list) do
            if app.state == "ok" and not parts.registry:blocked(app.name) then
                for _, sched in ipairs(app.schedules or {}) do
                    publish_latest(parts, app, sched, now, last)
                end
            end
        end
    end
end


return _M
