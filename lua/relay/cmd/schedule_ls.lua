--- relay schedule ls: every schedule of the loaded apps with its next
-- occurrence, in UTC and on the clock of the schedule's time zone (UTC
-- when it names none).
local apps = require("relay.apps")
local config = require("relay.config")
local duration = require("relay.duration")
local exit = require("relay.exit")
local listing = require("relay.listing")
local loop = require("relay.core.loop")
local rfc3339 = require("relay.rfc3339")
local scheduler = require("relay.scheduler")
local tzif = require("relay.tzif")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object per schedule.")
    listing.add_flags(cmd)
    config.add_flags(cmd, { "apps" })
end


local function spec_text(sched)
    if sched.every_ms then
        return "every " .. duration.format_duration(sched.every_ms)
    end
    return "cron " .. sched.cron
end


--- The next occurrence on the schedule's own clock, e.g.
-- 2026-12-02T03:00:00+01:00.
local function local_text(sched, next_ms)
    if not next_ms then
        return "never"
    end
    local offset = sched.zone and tzif.offset_at(sched.zone, next_ms) or 0
    return rfc3339.seconds_at_offset(next_ms, offset)
end


local function print_schedule(app, sched, now, json)
    local _, next_ms = scheduler.occurrences(sched, now)
    local next_text = next_ms and rfc3339.seconds(next_ms) or "never"
    local zone = sched.timezone or "UTC"
    if json then
        print((require("cjson").encode({ app = app.name, schedule = sched.name, handler = sched.handler,
            spec = spec_text(sched), next = next_text, timezone = zone, next_local = local_text(sched, next_ms) })
            :gsub("\\/", "/")))  -- zone names keep their slash
    else
        print(table.concat({ app.name .. "/" .. sched.name, sched.handler, spec_text(sched), next_text,
            local_text(sched, next_ms) .. " " .. zone }, "\t"))
    end
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local list = exit.or_env(apps.load_all(cfg.apps))
    local now = loop.now_ms()
    listing.header(args, { "SCHEDULE", "HANDLER", "SPEC", "NEXT (UTC)", "NEXT (LOCAL)" })
    for _, app in ipairs(list) do
        if app.state ~= "ok" then
            io.stderr:write("relay: ", app.error or (app.name .. " is invalid"), "\n")
        else
            for _, sched in ipairs(app.schedules or {}) do
                print_schedule(app, sched, now, args.json)
            end
        end
    end
    return 0
end

return _M
