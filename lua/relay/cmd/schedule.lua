--- relay schedule ls: every schedule of the loaded apps with its next
-- occurrence (UTC).
local apps = require("relay.apps")
local config = require("relay.config")
local cron = require("relay.cron")
local duration = require("relay.duration")
local exit = require("relay.exit")
local loop = require("relay.core.loop")
local scheduler = require("relay.scheduler")

local _M = {}


function _M.configure(parser)
    parser:command_target("schedule_command")
    parser:require_command(true)
    local ls = parser:command("ls", "One line per schedule: app/name, handler, spec, next occurrence (UTC).")
    ls:flag("--json", "One JSON object per schedule.")
    config.add_flags(ls, { "apps" })
end


local function spec_text(sched)
    if sched.every_ms then
        return "every " .. duration.format_duration(sched.every_ms)
    end
    return "cron " .. sched.cron
end


function _M.execute(args)
    local cfg = config.load_or_exit(args)
    local list, lerr = apps.load_all(cfg.apps)
    if not list then
        exit.env(lerr)
    end
    local now = loop.now_ms()
    for _, app in ipairs(list) do
        if app.state ~= "ok" then
            io.stderr:write("relay: ", app.error or (app.name .. " is invalid"), "\n")
        else
            for _, sched in ipairs(app.schedules or {}) do
                local _, next_ms = scheduler.occurrences(sched, now)
                local next_text = next_ms and cron.rfc3339(next_ms) or "never"
                if args.json then
                    print(require("cjson").encode({ app = app.name, schedule = sched.name, handler = sched.handler,
                        spec = spec_text(sched), next = next_text }))
                else
                    print(table.concat({ app.name .. "/" .. sched.name, sched.handler, spec_text(sched), next_text },
                        "\t"))
                end
            end
        end
    end
    return 0
end


return _M
