--- relay schedule ls: every schedule of the loaded apps with its next
-- occurrence (UTC).
local apps = require("relay.apps")
local config = require("relay.config")
local duration = require("relay.duration")
local exit = require("relay.exit")
local loop = require("relay.core.loop")
local rfc3339 = require("relay.rfc3339")
local scheduler = require("relay.scheduler")

local _M = {}


function _M.configure(cmd)
    cmd:flag("--json", "One JSON object per schedule.")
    config.add_flags(cmd, { "apps" })
end


local function spec_text(sched)
    if sched.every_ms then
        return "every " .. duration.format_duration(sched.every_ms)
    end
    return "cron " .. sched.cron
end


local function print_schedule(app, sched, now, json)
    local _, next_ms = scheduler.occurrences(sched, now)
    local next_text = next_ms and rfc3339.seconds(next_ms) or "never"
    if json then
        print(require("cjson").encode({ app = app.name, schedule = sched.name, handler = sched.handler,
            spec = spec_text(sched), next = next_text }))
    else
        print(table.concat({ app.name .. "/" .. sched.name, sched.handler, spec_text(sched), next_text }, "\t"))
    end
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local list = exit.or_env(apps.load_all(cfg.apps))
    local now = loop.now_ms()
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
