--- relay app <sub>: the dispatcher of the app sub-commands.
-- Each sub-command lives in relay.cmd.app_<sub> (validate, ls, invoke, pause, resume). A
-- module may export configure(cmd) to declare its own arguments; otherwise the default
-- declaration below is used. A sub-command whose module does not exist yet answers
-- "app <sub> is not implemented yet" (exit 2). Errors inside an existing module are never
-- swallowed: existence is checked with package.searchpath, then the module is required.
local config = require("relay.config")
local exit = require("relay.exit")

local _M = {}

local DEFAULTS = {
    {
        name = "validate",
        summary = "Validate apps (default: all under --apps); errors as file:line:col.",
        configure = function(cmd)
            cmd:argument("dirs", "App directories (each holding template.yaml)."):args("*")
            cmd:flag("--json", "One JSON object per app.")
            config.add_flags(cmd, { "apps" })
        end,
    },
    {
        name = "ls",
        summary = "One line per app: name, state, driver, handlers, schedules, concurrency, note.",
        configure = function(cmd)
            cmd:flag("--json", "One JSON object per app.")
            config.add_flags(cmd, { "apps", "runtime", "max_concurrency", "redis_url", "stream" })
        end,
    },
    {
        name = "invoke",
        summary = "Run one handler now in its container.",
        configure = function(cmd)
            cmd:argument("app", "The app.")
            cmd:argument("handler", "The handler (of events or schedules).")
            cmd:mutex(
                cmd:option("--event", "The event JSON given to the handler on stdin."):argname("<json>"),
                cmd:option("--event-file", "A file holding the event JSON."):argname("<file>")
            )
            config.add_flags(cmd, { "apps", "runtime", "state_dir" })
        end,
    },
    {
        name = "pause",
        summary = "Pause an app fleet-wide: its matched invocations stay pending.",
        configure = function(cmd)
            cmd:argument("app", "The app.")
            config.add_flags(cmd, { "redis_url", "stream", "apps" })
        end,
    },
    {
        name = "resume",
        summary = "Resume a paused app.",
        configure = function(cmd)
            cmd:argument("app", "The app.")
            config.add_flags(cmd, { "redis_url", "stream", "apps" })
        end,
    },
}


local function sub_module_name(sub)
    return "relay.cmd.app_" .. sub
end


local function sub_module(sub)
    local name = sub_module_name(sub)
    if package.searchpath(name, package.path) == nil then
        return nil
    end
    return require(name)
end


function _M.configure(parser)
    parser:command_target("app_command")
    parser:require_command(true)
    for _, sub in ipairs(DEFAULTS) do
        local cmd = parser:command(sub.name, sub.summary)
        local mod = sub_module(sub.name)
        if mod and mod.configure then
            mod.configure(cmd)
        else
            sub.configure(cmd)
        end
    end
end


function _M.execute(args)
    local sub = args.app_command
    local mod = sub_module(sub)
    if not mod then
        exit.usage("app " .. sub .. " is not implemented yet")
    end
    return mod.execute(args)
end


return _M
